"""The classification task: a BERT-family encoder fine-tuned on labelled texts, distilled into a small encoder
(or the NPU student), with a plain and a distilled RNN beside it; quality is test accuracy."""
from __future__ import annotations

from pipeline.task import TRAIN_READS, Step, Task, lazy

# model name -> (stage, sub-folder) of its checkpoint
MODEL_FOLDERS = {"teacher": ("teacher", "model"), "student": ("distill", "student"),
                 "lstm": ("baseline", "lstm"), "lstm_distilled": ("baseline", "lstm_distilled")}
_HERE = "pipeline.tasks.classification"

TASK = Task(
    name="classification",
    doc="text classification: labelled texts in, class logits out",
    models=MODEL_FOLDERS,
    quality="accuracy",
    steps={
        # data.max_unlabeled: the logits stage's (data/left_out.jsonl holds every left-out text): not the teacher's
        "data": Step(lazy(f"{_HERE}.train:stage_data"), ("data.*", "-data.max_unlabeled")),
        # teacher.eval_batch_size only batches the validation score in the summary: the model is the same
        # (teacher.precision is kept: it moves that score by bf16 rounding);
        # the student / layer-map checks here only fail early (the distill step reads those keys)
        "teacher": Step(lazy(f"{_HERE}.train:stage_teacher"),
                        ("teacher.*", "-teacher.eval_batch_size", *TRAIN_READS, "-student.hidden", "-student.layers",
                         "-student.init", "-distill.layer_map"), distributed=True),
        # teacher.eval_batch_size: length-sorted batches padded per batch, so the batch size moves logits ~1e-8
        # data.max_unlabeled: how many of data/left_out.jsonl join the distillation set (the data stage writes them all)
        "logits": Step(lazy(f"{_HERE}.train:stage_logits"),
                       ("augment.*", "teacher.eval_batch_size", "teacher.precision", "data.max_unlabeled"),
                       distributed=True),
        "distill": Step(lazy(f"{_HERE}.train:stage_distill"), ("student.*", "distill.*", *TRAIN_READS),
                        distributed=True),
        # teacher.max_length: the RNNs' length when baseline.max_length = 0; of [distill] only the temperature
        "baseline": Step(lazy(f"{_HERE}.train:stage_baseline"),
                         ("baseline.*", "teacher.max_length", "distill.temperature", *TRAIN_READS), distributed=True),
        "eval": Step(lazy(f"{_HERE}.train:stage_eval"), ("teacher.eval_batch_size",)),
        "quantize": Step(lazy(f"{_HERE}.ship:stage_quantize"), ("quantize.*", "teacher.eval_batch_size")),
        # the HTP compile (eval/qnn.py): every chip, every NPU length, the emulator's agreement gate; keyed on
        # onnxruntime-qnn's state too, so a compile that skipped without it re-runs once it is installed
        "compile": Step(lazy(f"{_HERE}.compile:stage_compile"),
                        ("npu.*", "quantize.npu_lengths", "quantize.min_argmax_agreement"),
                        environment={"onnxruntime-qnn": lazy("eval.qnn:compiler_state")}),
        # bundle.accuracy_window: the FastGelu browser files' accuracy check (export/web_model.py)
        "export": Step(lazy(f"{_HERE}.ship:stage_export"),
                       ("export.*", "quantize.check_samples", "quantize.lossless_atol",
                        "quantize.min_argmax_agreement", "teacher.eval_batch_size", "bundle.accuracy_window")),
        # Optimum's files: bench.optimum_peer / peer_eval_texts are the peer's keys, not the timing's; revision 2:
        # the export is seeded (eval/peer.py), so a restricted-vocabulary student's files are the same each run
        "peer": Step(lazy(f"{_HERE}.bench:stage_peer"), ("bench.optimum_peer", "bench.peer_eval_texts", "quantize.opset"),
                     revision=2),
        # revision 2: the browser pages run with V8 --no-liftoff (eval/browser.py V8_FLAGS); 3: the int8 students
        # and the fp32 teacher timed in interleaved rounds (latency.json teacher_rounds, eval/paired.py); 4: the
        # browser targets sweep the teacher's fp32 files only (eval/plan.py), and seconds.parts is written; 5: the
        # Chromium rounds run in the 1-thread sweep page, with its V8 flags (eval/browser_cross.py chromium_rounds);
        # 6: host-cpu's .onnx files are timed in interleaved rounds too (eval/paired.py teacher_rounds), and rounds
        # on more than one thread pause before each file's turn (eval/paired.py SETTLE_S)
        # student.max_length: only a warning when bench.headline_length is past it. Keyed on where each target runs
        # here too, so a target skipped for want of Chromium, a GPU or onnxruntime-gpu is timed once it is installed
        "bench": Step(lazy(f"{_HERE}.bench:stage_bench"),
                      ("bench.*", "-bench.optimum_peer", "-bench.peer_eval_texts", "-student.max_length"), revision=6,
                      environment={"bench runtimes": lazy("eval.targets:runtimes_state")}),
        # bundle.accuracy_window: the report's "which file for which workload" table picks as the bundle does
        "report": Step(lazy("pipeline.tasks.common:report"), ("bundle.accuracy_window",)),
        # data.* / teacher.model: the model card names the dataset and the teacher; export.coreml_lengths:
        # the metadata's Core ML sequence lengths; teacher.eval_batch_size: the batch the report's accuracy used;
        # revision 2 (both bundles): tokenizer/ cuts at max_length (export/hf_layout.py cap_tokenizer); 3: the app
        # samples' string literals escaped for Kotlin and Swift, and the NPU sample runs a text longer than its
        # compiled lengths whole on the CPU (verify-bundle compares the samples with what metadata.json makes)
        "bundle": Step(lazy(f"{_HERE}.bundle:stage_bundle"),
                       ("bundle.model", "bundle.variant", "bundle.accuracy_window", "bundle.min_agreement",
                        "bundle.sample_texts", "bundle.dist_dir", "data.source", "data.train_path", "data.hub_name",
                        "data.hub_config", "teacher.model", "export.coreml_lengths", "teacher.eval_batch_size"),
                       revision=3),
        # bench.browser_executable: whether the page check runs, recorded in the bundle's metadata (keyed on
        # whether Chromium can be driven here, so a bundle built without its page check gets one once it can)
        "web-bundle": Step(lazy(f"{_HERE}.web:stage_web_bundle"),
                           ("bundle.web", "bundle.web_target", "bundle.model", "bundle.variant",
                            "bundle.accuracy_window", "bundle.min_agreement", "bundle.sample_texts",
                            "bundle.dist_dir", "bench.browser_executable"), revision=2,
                           environment={"browser": lazy("eval.browser:browser_state")}),
        # every section: best-<target>.toml is the whole resolved config with the best trial's shape (a change
        # the study's name does not hash re-runs no trial, it only rewrites the outputs)
        "search": Step(lazy("pipeline.search:stage_search"), ("*",)),
    },
    results=lazy("eval.results:classification_results"),
    verify=lazy(f"{_HERE}.verify:verify"),
    validate=lazy(f"{_HERE}.checks:validate"),
    search=lazy(f"{_HERE}.search:searcher"),
    phone_bench=True,
)
