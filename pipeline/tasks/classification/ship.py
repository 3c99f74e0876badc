"""Stage wiring for quantize (ONNX variants, checked and scored through ONNX Runtime) and export (.ort
files and Core ML packages). Every file written is compared with its source on real test texts: a lossless
file outside its tolerance fails the stage naming the file and the numbers; a lossy one below
quantize.min_argmax_agreement is recorded as failed (status, numbers, reason) and goes no further."""
from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import numpy as np

from pipeline.data import read_labels, read_split
from pipeline.errors import VariantSkipped, lookup, tree_bytes
from pipeline.task import StageContext
from pipeline.tasks.classification import MODEL_FOLDERS
from pipeline.tasks.classification.train import _xy
from pipeline.tasks.common import reports_truncation, threads

log = logging.getLogger("pocketformer")


def _load(ctx: StageContext, name: str, fmt: str):
    from export.registry import load_source

    stage, sub = lookup(MODEL_FOLDERS, name, f"model '{name}' for {fmt}", "Known models")
    return load_source(ctx.input(stage) / sub, name, fmt)


def _check_texts(ctx: StageContext, n: int) -> list[str]:
    """The first quantize.check_samples test texts; a test split with fewer refuses the stage before any work
    (a gate passed on 1 text said "agreement 1.0" against check_samples = 16)."""
    from export.checks import require_check_samples

    texts = [r["text"] for r in read_split(ctx.input("data"), "test")]
    require_check_samples(len(texts), n, f"the {ctx.name} stage's checks")
    return texts[:n] if n > 0 else texts


def calibration_texts(cfg, data_dir: Path) -> list[str]:
    """quantize.calibration_samples training texts, shuffled with run.seed: a sample across labels, not the file's
    first rows (the quantize stage's, and the search's for its candidates' static files)."""
    texts = [r["text"] for r in read_split(data_dir, "train")]
    random.Random(cfg.run.seed).shuffle(texts)
    return texts[: cfg.quantize.calibration_samples]


def _rel(ctx: StageContext, path: Path) -> str:
    return f"{ctx.name}/{path.relative_to(ctx.out).as_posix()}"


@reports_truncation
def stage_quantize(ctx: StageContext) -> dict:
    """ONNX fp32 / optimized / int8 / fp16 files per model, each checked and scored on the test split.

    Reads the model folders, data/{train,test}.jsonl and eval/accuracy.json. Writes
    quantize/<model>/<variant>.onnx, quantize/<model>/tokenizer/ (tokenizer + labels.json),
    variants.json (one row per file with its check), accuracy.json/.md (eval's rows + the ONNX rows),
    npu.json and quantize/<model>/npu/ (static per-length NPU files of an npu student, pipeline/tasks/classification/npu.py).
    """
    from distill.models import count_params
    from eval.metrics import scores
    from eval.table import markdown
    from export.checks import (argmax_check, check_inputs, failed_rows, max_abs_diff_check, ort_runner, predict,
                               torch_runner)
    from export.onnx_export import file_opset
    from export.ort_session import ort_session
    from export.registry import ONNX_VARIANTS, ExportJob, for_variant
    from pipeline.tasks.classification.npu import npu_rows

    # variant, fusion and NPU names and lengths were checked when the config loaded (tasks/classification/checks.py)
    cfg, q = ctx.cfg, ctx.cfg.quantize
    threads(cfg)
    variants = sorted(dict.fromkeys(q.variants), key=list(ONNX_VARIANTS).index)  # sources before what needs them
    labels = read_labels(ctx.input("data"))
    test_texts, y = _xy(ctx.input("data"), "test", labels)
    check_texts = _check_texts(ctx, q.check_samples)
    calibration = calibration_texts(cfg, ctx.input("data"))
    eval_rows = json.loads((ctx.input("eval") / "accuracy.json").read_text())
    fp32_acc = {r["model"]: r["accuracy"] for r in eval_rows}
    teacher_acc = fp32_acc.get("teacher")
    eval_keys = list(eval_rows[0]) if eval_rows else []
    rows, acc_rows, skipped, npu = [], [], [], []
    for name in q.models:
        m = _load(ctx, name, "onnx")
        folder = ctx.out / name
        m.tokenizer.save_pretrained(folder / "tokenizer")
        for meta in ("labels.json", "pocketformer.json", "vocab_map.json"):  # label order; kind, max_length;
            if (m.folder / meta).is_file():  # the kept ids of a restricted vocabulary (distill/vocab.py)
                shutil.copy2(m.folder / meta, folder / "tokenizer" / meta)
        inputs = check_inputs(m.tokenizer, check_texts, m.max_length, wanted=q.check_samples)
        ref = torch_runner(m.model)
        params = count_params(m.model)
        job = ExportJob(name, m, folder, q, cfg.export, calibration_texts=calibration)
        for variant in variants:
            exp = for_variant(variant)
            if exp.transformer_only and m.kind != "hf":
                why = ("the npu student's graph has no LayerNormalization / Gelu / BERT attention pattern to fuse "
                       "(its layer norms are decomposed on purpose)" if m.kind == "npu" else
                       "an RNN has nothing for the attention / LayerNorm fusions to match")
                skipped.append({"model": name, "variant": variant, "reason": f"transformer-only ({why})"})
                continue
            job.out, job.variant = folder / f"{variant}.onnx", variant
            try:
                details = exp.fn(job)
            except VariantSkipped as e:  # e.g. a type ORT has no fusions for (a teacher): no file, the rest go on
                skipped.append({"model": name, "variant": variant, "reason": str(e)})
                print(f"[quantize] {name} {variant}: skipped, {e}")
                continue
            job.sources[variant] = job.out
            run = ort_runner(ort_session(job.out, cfg.run.threads))
            what = f"{name} {variant} ({_rel(ctx, job.out)})"
            # lossless files must match (a mismatch is a bug and stops the stage); a lossy file below its
            # minimum is recorded as failed with its numbers and the run goes on without it
            check = (max_abs_diff_check(run, ref, inputs, q.lossless_atol, what) if exp.lossless
                     else argmax_check(run, ref, inputs, q.min_argmax_agreement, what, fatal=False))
            sc = scores(predict(run, m.tokenizer, test_texts, m.max_length, cfg.teacher.eval_batch_size),
                        np.array(y), len(labels))
            size = tree_bytes(job.out)
            rows.append({"model": name, "variant": variant, "format": "onnx", "file": _rel(ctx, job.out),
                         "status": "passed" if check["passed"] else "failed",
                         # the file's own: ORT writes the 16-bit QDQ files (w8a16-static) at opset 21
                         "size_bytes": size, "opset": file_opset(job.out), "check": check, **sc,
                         "params": params["params"],
                         "non_embedding_params": params["non_embedding_params"],
                         "accuracy_delta_vs_pytorch": sc["accuracy"] - fp32_acc[name] if name in fp32_acc else None,
                         "size_ratio_vs_fp32": tree_bytes(job.sources["fp32"]) / size if "fp32" in job.sources
                         else None,
                         "details": details})
            acc = {"model": name, "variant": variant, "format": "onnx", **sc, **params, "size_bytes": size,
                   "accuracy_retention": sc["accuracy"] / teacher_acc if teacher_acc else None}
            acc_rows.append({k: acc.get(k) for k in dict.fromkeys([*eval_keys, *acc])})  # eval's row shape
            print(f"[quantize] {name} {variant}: {size:,} bytes, accuracy {sc['accuracy']:.4f}, "
                  f"{check['kind']} {check['value']:.4g}" + ("" if check["passed"] else " FAILED: not exported, "
                                                             "timed or shipped"))
        if m.kind == "npu" and q.npu_variants:  # static per-length files for the NPU providers
            npu += npu_rows(ctx, name, m, test_texts, y, check_texts, calibration, len(labels))
    failed = [{"model": r["model"], "variant": r["variant"], "reason": r["check"]["reason"]}
              for r in failed_rows(rows) + failed_rows(npu)]
    for f in failed:
        log.warning("[quantize] %s", f["reason"])
    (ctx.out / "variants.json").write_text(json.dumps(rows, indent=2))
    (ctx.out / "npu.json").write_text(json.dumps(npu, indent=2))  # [] when no model is an npu student
    all_rows = eval_rows + acc_rows
    (ctx.out / "accuracy.json").write_text(json.dumps(all_rows, indent=2))
    cols = ["model", "variant", "format", "accuracy", "macro_f1", "accuracy_retention", "size_bytes", "check"]
    checks = {(r["model"], r["variant"]): _check_cell(r["check"]) for r in rows}
    md_rows = [{**r, "check": checks.get((r["model"], r["variant"])) if r["format"] == "onnx" else ""}
               for r in all_rows]
    (ctx.out / "accuracy.md").write_text(f"Test split: {len(test_texts)} texts\n\n" + markdown(md_rows, cols))
    return {"rows": rows, "npu_rows": npu, "skipped": skipped, "failed": failed, "test_texts": len(test_texts),
            "check_texts": len(check_texts), "calibration_texts": len(calibration)}


def _check_cell(check: dict) -> str:
    """accuracy.md's check column: 'passed' or 'FAILED' with the numbers."""
    limit = "<=" if check["kind"] == "max_abs_diff" else ">="
    return ("passed" if check["passed"] else "FAILED") + f" ({check['kind']} {check['value']:.4g}, needs {limit} " \
        f"{check['tolerance']:g})"


@reports_truncation
def stage_export(ctx: StageContext) -> dict:
    """ORT mobile-format files, the student's browser variants (<variant>-fastgelu.ort, GELU as FastGelu:
    pipeline/tasks/classification/fast_gelu.py) and Core ML packages, each checked against its source.

    Reads quantize/variants.json and its .onnx files, the student / LSTM folders and data/test.jsonl.
    Writes export/<model>/<variant>.ort, export/student/<variant>-fastgelu.ort,
    export/<model>/<variant>.mlpackage and export/variants.json.
    """
    cfg, e = ctx.cfg, ctx.cfg.export
    threads(cfg)
    from export.checks import failed_rows

    qrows = json.loads((ctx.input("quantize") / "variants.json").read_text())
    # a variant that failed its check in quantize is not converted: no .ort of it exists to time or ship
    bad = {(r["model"], r["variant"]) for r in failed_rows(qrows)}
    skipped = [{"model": m, "variant": v, "format": "ort", "reason": f"{m} {v}.onnx failed its check in the "
                "quantize stage (quantize/variants.json)"} for m, v in sorted(bad) if v in e.ort_variants]
    check_texts = _check_texts(ctx, cfg.quantize.check_samples)
    rows = _export_ort(ctx, [r for r in qrows if (r["model"], r["variant"]) not in bad], check_texts)
    # the browser variants (<variant>-fastgelu.ort): checked here so the bench times what the web bundle ships
    from pipeline.tasks.classification.fast_gelu import export_fast_gelu

    web_rows, web_skips = export_fast_gelu(ctx, qrows, check_texts)
    rows += web_rows + _export_coreml(ctx, check_texts)
    skipped += web_skips
    failed = [{"model": r["model"], "variant": r["variant"], "format": r["format"], "reason": r["check"]["reason"]}
              for r in failed_rows(rows)]
    for f in failed:
        log.warning("[export] %s", f["reason"])
    (ctx.out / "variants.json").write_text(json.dumps(rows, indent=2))
    return {"rows": rows, "skipped": skipped, "failed": failed}


def _export_ort(ctx: StageContext, qrows: list[dict], check_texts: list[str]) -> list[dict]:
    from eval.metrics import scores
    from export.checks import argmax_check, max_abs_diff_check, ort_runner, predict
    from export.ort_format import convert_to_ort
    from export.ort_session import ort_session
    from export.registry import for_variant
    from pipeline.tasks.classification.fast_gelu import ort_row, shipped_tokenizer

    cfg, e = ctx.cfg, ctx.cfg.export
    by_key = {(r["model"], r["variant"]): r for r in qrows}
    models = list(dict.fromkeys(r["model"] for r in qrows))
    jobs = [(m, ctx.run_dir / by_key[(m, v)]["file"], ctx.out / m / f"{v}.ort")
            for m in models for v in e.ort_variants if (m, v) in by_key]  # optimized: transformers only
    convert_to_ort(jobs, e.ort_target_platform, e.ort_disabled_optimizers)
    rows = []
    inputs_for: dict = {}
    labels = read_labels(ctx.input("data"))
    test_texts, y = _xy(ctx.input("data"), "test", labels)
    for model, src, out in jobs:
        if model not in inputs_for:  # the tokenizer copy the quantize stage shipped with the ONNX files
            inputs_for[model] = shipped_tokenizer(ctx, model, check_texts)
        inputs, tok, max_len = inputs_for[model]
        got = ort_runner(ort_session(out, cfg.run.threads))
        want = ort_runner(ort_session(src, cfg.run.threads))
        variant = out.stem
        q = by_key[(model, variant)]
        what = f"{model} {variant} ({_rel(ctx, out)} vs {src.name})"
        if for_variant(variant).lossless:
            check = max_abs_diff_check(got, want, inputs, cfg.quantize.lossless_atol, what)
            sc, acc_from = {"accuracy": q["accuracy"], "macro_f1": q["macro_f1"]}, "onnx"  # same logits, same scores
        else:
            # The .ort graph is fused differently from the .onnx as ORT loads it (export.ort_disabled_optimizers):
            # float differences of 1e-7 flip a few of the activations int8 rounds on the fly, so the file is
            # held to the argmax rule and scored on the test split itself.
            check = argmax_check(got, want, inputs, cfg.quantize.min_argmax_agreement, what, f"its source {src.name}",
                                 fatal=False)
            sc = scores(predict(got, tok, test_texts, max_len, cfg.teacher.eval_batch_size), np.array(y), len(labels))
            acc_from = "ort"
        rows.append(ort_row(q, variant, _rel(ctx, out), tree_bytes(out), check, sc, acc_from, e, {"source": q["file"]}))
        print(f"[export] {model} {variant}.ort: {tree_bytes(out):,} bytes, accuracy {sc['accuracy']:.4f} "
              f"({acc_from}), {check['kind']} {check['value']:.4g}")
    return rows


def _export_coreml(ctx: StageContext, check_texts: list[str]) -> list[dict]:
    from distill.models import count_params
    from export.checks import check_inputs, max_abs_diff_check, torch_runner
    from export.coreml import predict_check, traceable, verify_package
    from export.registry import ExportJob, get_exporter

    cfg, e = ctx.cfg, ctx.cfg.export
    exp = get_exporter("coreml")
    rows = []
    for name in e.coreml_models:
        m = _load(ctx, name, "coreml")
        inputs = check_inputs(m.tokenizer, check_texts, m.max_length, wanted=cfg.quantize.check_samples)
        ref = torch_runner(m.model)
        # the traced module replaces finfo.min with a finite fill (and the RNN's gather by a permutation):
        # it must still compute the PyTorch model's logits
        wrapper = max_abs_diff_check(torch_runner(traceable(m, name)), ref, inputs, cfg.quantize.lossless_atol,
                                     f"{name} -> coreml: traced wrapper vs the PyTorch model")
        params = count_params(m.model)
        job = ExportJob(name, m, ctx.out, cfg.quantize, e)
        for variant in e.coreml_variants:
            job.out, job.variant = ctx.out / name / f"{variant}.mlpackage", variant
            job.out.parent.mkdir(parents=True, exist_ok=True)
            details = exp.fn(job)
            spec = verify_package(job.out, m, variant, name)
            what = f"{name} coreml {variant} ({_rel(ctx, job.out)})"
            check = predict_check(job.out, ref, m.tokenizer, check_texts, m.max_length, list(e.coreml_lengths),
                                  cfg.quantize.min_argmax_agreement, what)
            check.update({"spec": spec, "traced_wrapper": wrapper})
            rows.append({"model": name, "variant": variant, "format": "coreml", "file": _rel(ctx, job.out),
                         "status": "failed" if check.get("passed") is False else
                         "not checked" if check.get("skipped") else "passed",
                         "size_bytes": tree_bytes(job.out), "opset": None, "check": check, "accuracy": None,
                         "macro_f1": None, "params": params["params"],
                         "non_embedding_params": params["non_embedding_params"],
                         "deployment_target": e.coreml_target, "sequence_shapes": details["sequence_shapes"],
                         "details": {k: v for k, v in details.items() if k != "spec"}})
            print(f"[export] {name} coreml {variant}: {rows[-1]['size_bytes']:,} bytes")
    return rows
