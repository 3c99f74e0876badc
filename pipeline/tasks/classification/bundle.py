"""Stage wiring for bundle: the app bundle (model files, tokenizer, labels, metadata, string-in model where an
in-graph tokenizer can reproduce the model's, Kotlin / Swift samples, README), written to runs/<run>/bundle/
and published to <bundle.dist_dir>/<run>/."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from pipeline.data import read_labels, read_split
from pipeline.errors import PipelineError
from pipeline.task import StageContext
from pipeline.tasks.classification import MODEL_FOLDERS


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy2(src, dst)


def vocabulary(tok_dir: Path) -> dict:
    """How the model reads token ids: always the tokenizer's own; a restricted or factorized embedding maps
    them to its rows inside the graph (distill/embeddings.py), with the kept ids in tokenizer/vocab_map.json."""
    spec = json.loads((tok_dir / "pocketformer.json").read_text()).get("embedding")
    if spec is None:
        return {"input_ids": "tokenizer ids", "rows": "the tokenizer's whole vocabulary"}
    return {"input_ids": "tokenizer ids (the id -> row table is inside the model)", **spec,
            "kept_ids_file": "tokenizer/vocab_map.json" if (tok_dir / "vocab_map.json").is_file() else None}


def stage_bundle(ctx: StageContext) -> dict:
    """The app bundle of the chosen model, its string-in twin checked on the test split, and samples.

    Reads export/variants.json, quantize/variants.json and quantize/<model>/tokenizer/, report/results.json
    and data/test.jsonl. Writes bundle/ (model/, tokenizer/, labels.json, samples.json, metadata.json,
    README.md, android/, ios/) and publishes a copy to <bundle.dist_dir>/<run name>/.
    """
    from transformers import AutoTokenizer

    from distill.batching import encode
    from eval.metrics import scores
    from export.app_samples import classification_readme, write_classification_samples
    from export.bundle import bundle_workloads, choose, coreml_row, finish, io_spec, latency_for, normalisation
    from export.checks import agreement_texts, ort_runner, predict, require_texts
    from export.client_files import add_client_files, readme_sections
    from export.coreml import spec_summary
    from export.hf_layout import cap_tokenizer
    from export.npu_bundle import add_npu_files, not_shipped
    from export.qnn_bundle import add_qnn_files
    from export.ort_session import ort_session
    from export.padding import allowed_lengths
    from export.string_model import (agreement, build_string_model, predict_strings, token_id_mismatches,
                                     unsupported, wordpiece_settings)
    from export.web_model import is_fast_gelu
    from pipeline.manifest import library_versions
    from pipeline.tasks.classification.replay import npu_logits, qnn_logits, run_models

    cfg, b = ctx.cfg, ctx.cfg.bundle  # its settings were checked when the config loaded (config_rules.py)
    # the browser-only FastGelu files (export/web_model.py says why) are never the phone bundle's
    export_rows = [r for r in json.loads((ctx.input("export") / "variants.json").read_text())
                   if not is_fast_gelu(r["variant"])]
    qrows = json.loads((ctx.input("quantize") / "variants.json").read_text())
    results = json.loads((ctx.input("report") / "results.json").read_text())
    # variants that failed their check in quantize have no .ort; named here so an explicit choice says why
    failed = {(r["model"], r["variant"]): r["check"].get("reason", "its check failed") for r in qrows
              if r.get("status") == "failed"}
    row = choose(export_rows, results, b.model, b.variant, b.accuracy_window, cfg.source, failed)
    name, variant = row["model"], row["variant"]
    onnx_row = next((r for r in qrows if (r["model"], r["variant"]) == (name, variant)
                     and r.get("status") != "failed"), None)
    if onnx_row is None:
        raise PipelineError(f"quantize/variants.json has no {name} {variant} .onnx (the source of its .ort); run "
                            f"`python -m pipeline quantize --config {cfg.source}`")
    # the string-in model's gate needs enough test texts to mean its share (export/checks.py agreement_texts);
    # checked before anything is copied or built
    test = read_split(ctx.input("data"), "test")
    needed = agreement_texts(b.min_agreement)
    require_texts(len(test), needed, "the string-in model's agreement check",
                  f"bundle.min_agreement = {b.min_agreement:g}", "lower bundle.min_agreement (a minimum m needs "
                  "1 / (1 - m) texts, at most 100)")
    out, stem = ctx.out, f"{name}-{variant}"
    tok_src = ctx.input("quantize") / name / "tokenizer"
    max_length = json.loads((tok_src / "pocketformer.json").read_text())["max_length"]
    labels = read_labels(ctx.input("data"))

    _copy(ctx.run_dir / row["file"], out / "model" / f"{stem}.ort")
    _copy(ctx.run_dir / onnx_row["file"], out / "model" / f"{stem}.onnx")
    _copy(tok_src, out / "tokenizer")
    cap_tokenizer(out / "tokenizer", max_length)  # an app running tokenizer.json as it is must cut where we do
    (out / "labels.json").write_text(json.dumps(labels, indent=2))
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    # no in-graph op tokenizes as a sentencepiece or DeBERTa tokenizer does: the bundle ships without the
    # string-in model and says why (metadata string_model_check, the README, this line), never a wrong one
    no_string = unsupported(tokenizer)
    if no_string:
        print(f"[bundle] no string-in model: {no_string}")
    string_path = None if no_string else build_string_model(out / "model" / f"{stem}.onnx", tokenizer, max_length,
                                                             out / "model" / f"{stem}-text.onnx")
    cm = coreml_row(export_rows, name, variant)
    if cm:
        _copy(ctx.run_dir / cm["file"], out / "model" / f"{name}-{cm['variant']}.mlpackage")

    # the string-in model must label the test split as tokenizer + model do
    texts = [r["text"] for r in test]
    pair_session = ort_session(out / "model" / f"{stem}.onnx", cfg.run.threads)
    # batch 1, as an app calls it: dynamic int8 quantizes activations per call, so a padded batch would give
    # slightly different logits than the string-in model (one text per call) for the same text
    pair = predict(ort_runner(pair_session), tokenizer, texts, max_length, 1)  # (N, C)
    text_session = None if no_string else ort_session(string_path, max(cfg.run.threads, 1), custom_ops=True,
                                                       fix=None)  # as an app does
    check = {"status": "not built", "reason": no_string} if no_string else \
        {**agreement(predict_strings(text_session, texts), pair), "minimum": b.min_agreement,
         "needed_texts": needed, "split": "test",
         "token_ids_differ": token_id_mismatches(string_path, tokenizer, texts, max_length)}
    if not no_string and check["agreement"] < b.min_agreement:
        raise PipelineError(f"the string-in model {string_path.name} agrees with tokenizer + model on only "
                            f"{check['agreement']:.2%} of {len(texts)} test texts (bundle.min_agreement = "
                            f"{b.min_agreement:.2%}): its in-graph tokenizer differs from "
                            f"{tokenizer.__class__.__name__}")
    index = {lab: i for i, lab in enumerate(labels)}
    acc = scores(pair, np.array([index[r["label"]] for r in test]), len(labels))
    models = {"ort": {"file": f"model/{stem}.ort", **io_spec(ort_session(out / "model" / f"{stem}.ort", 1)),
                      "format": "ort", "target_platform": row.get("details", {}).get("target_platform")},
              "onnx": {"file": f"model/{stem}.onnx", **io_spec(pair_session), "format": "onnx",
                       "opset": onnx_row.get("opset")}}
    if text_session is not None:
        models["string_onnx"] = {"file": f"model/{stem}-text.onnx", **io_spec(text_session), "format": "onnx",
                                 "needs": "onnxruntime-extensions (custom op library)"}
    if cm:
        rel = f"model/{name}-{cm['variant']}.mlpackage"
        spec = spec_summary(out / rel)  # read from the shipped package: the logits are float16 in an fp16 one
        models["coreml"] = {"file": rel, "variant": cm["variant"],
                            "format": "coreml", "deployment_target": cm.get("deployment_target"),
                            "inputs": [{"name": n, "type": spec["dtypes"][n], "shape": [1, "sequence"]}
                                       for n in spec["inputs"]],
                            "outputs": [{"name": n, "type": spec["dtypes"][n], "shape": [1, len(labels)]}
                                        for n in spec["outputs"]],
                            "sequence_shapes": cm.get("sequence_shapes"),
                            # the lengths the package was exported for, and export.padding's rule to reach one
                            "sequence_lengths": allowed_lengths(list(cfg.export.coreml_lengths), max_length),
                            "pad_id": tokenizer.pad_token_id or 0,
                            "padding": "right with pad_id up to the smallest sequence_lengths entry that holds the "
                                       "ids; attention_mask 1 on the ids, 0 on the padding"}
    # samples: a few test texts with the token ids the model was fed, the label the shipped model gives (not
    # the gold one), and each onnxruntime file's own logits, one text per call as an app runs it; verify-bundle
    # runs every file again and compares it with its own reference (a fused .ort and its .onnx differ by ~1e-3)
    n = b.sample_texts
    samples = [{"text": t, "token_ids": [int(v) for v in ids], "expected_label": labels[int(pair[i].argmax())],
                "gold_label": test[i]["label"]}
               for i, (t, ids) in enumerate(zip(texts[:n], encode(tokenizer, texts[:n], max_length)[0]))]
    # an npu student's static per-length NPU files: listed apart from `models`, whose files run with dynamic
    # shapes; each gets its own reference logits on the samples that fit its length (padded with pad_id)
    npu = add_npu_files(ctx.run_dir, ctx.input("quantize"), name, out, pad_id=tokenizer.pad_token_id or 0)
    npu_failed = not_shipped(ctx.input("quantize"), name)  # failed their quantize check: named, not copied
    # the HTP context binaries that compiled and agreed on the emulator (compile stage), per chip; their
    # reference logits are the emulator's own, which verify-bundle reproduces where onnxruntime-qnn is installed
    npu_json = ctx.input("quantize") / "npu.json"
    scored = qrows + (json.loads(npu_json.read_text()) if npu_json.is_file() else [])  # an NPU row wins a tie
    qnn = add_qnn_files(ctx.run_dir, ctx.input("compile"), name, out, fallback=models["ort"]["file"],
                        pad_id=tokenizer.pad_token_id or 0,
                        accuracy={r["variant"]: r["accuracy"] for r in scored
                                  if r["model"] == name and r.get("accuracy") is not None})
    refs = run_models(out, models, samples)
    npu_refs = npu_logits(out, npu or {}, samples)
    if qnn["shipped"]:
        npu_refs.update(qnn_logits(out, qnn, samples))
    for i, s in enumerate(samples):
        s["reference_logits"] = {models[k]["file"]: rows[i] for k, rows in refs.items()}
        s["reference_logits"].update({rel: rows[i] for rel, rows in npu_refs.items() if rows[i] is not None})
    (out / "samples.json").write_text(json.dumps(samples, indent=2))
    dist = Path(b.dist_dir) / cfg.run.name
    meta = {"run": cfg.run.name, "task": "classification", "kind": "app", "dist_path": str(dist),
            "model": {"name": name, "variant": variant, "choice": row["choice"]},
            "models": models, "max_length": max_length, "labels": labels,
            "vocabulary": vocabulary(tok_src),
            "label_map": {str(i): lab for i, lab in enumerate(labels)},
            "text_normalisation": normalisation(tokenizer, max_length),
            # BERT's WordPiece (whatever the class): what the Swift sample's tokenizer implements
            "bert_wordpiece": wordpiece_settings(tokenizer) is not None,
            # one text per call, as an app calls it; the report scored the .ort in padded batches, and a quantized
            # file's logits move with the batch (int8-dynamic quantizes each call's activations as a whole)
            "accuracy": {**acc, "split": "test", "texts": len(texts), "batch": 1,
                         "source": "the .onnx twin of the .ort file, one text per call",
                         "report": {"file": row["file"], "accuracy": row["accuracy"],
                                    "batch": cfg.teacher.eval_batch_size}},
            "headline_length": results.get("plan", {}).get("headline_length"),
            "latency": latency_for(results, name, variant, "ort"),
            # the file per workload (batch 1 latency, batch-N throughput) on the choice target, as the report says
            "workloads": bundle_workloads(results, b.accuracy_window, name, variant, models["ort"]["file"]),
            "string_model_check": check, "samples": samples[:1], "samples_file": "samples.json",
            "versions": library_versions(), **({"npu": npu} if npu else {}),
            **({"npu_not_shipped": npu_failed} if npu_failed else {}), "qnn": qnn}
    # hf/ (transformers.js, Optimum) and required_operators.config (reduced ONNX Runtime build)
    stage_name, sub = MODEL_FOLDERS[name]
    meta.update(add_client_files(out, cfg, model=name, model_dir=ctx.input(stage_name) / sub,
                                 ort_rel=f"model/{stem}.ort", qrows=qrows, results=results, labels=labels,
                                 max_length=max_length, tokenizer_dir=tok_src, test_texts=len(texts),
                                 versions=meta["versions"]))
    write_classification_samples(out, meta)  # no iOS sample without a Core ML package
    meta = finish(out, meta, lambda m: classification_readme(m) + readme_sections(m), dist)
    print(f"[bundle] {name} {variant}: {len(meta['files'])} files -> {dist} "
          + ("(no string-in model: see string_model_check in metadata.json)" if no_string else
             f"(string-in agreement {check['agreement']:.2%} on {len(texts)} test texts)"))
    return {"model": name, "variant": variant, "rule": row["choice"]["rule"], "dist": str(dist),
            "string_model_check": check, "files": len(meta["files"])}
