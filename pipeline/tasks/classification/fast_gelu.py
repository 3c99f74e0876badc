"""The export stage's browser variants: the student's <variant>-fastgelu.ort (export/web_model.py), one per
ONNX variant in export.fast_gelu_variants, each checked against its source .onnx and recorded as a row of
export/variants.json (status failed with its reason when a check fails), so the bench times it on the
browser targets and the web bundle chooses among measured rows."""
from __future__ import annotations

import json
import logging

import numpy as np

from pipeline.errors import PipelineError, write_failure

log = logging.getLogger("pocketformer")


def fast_gelu_jobs(qrows: list[dict], variants: list[str]) -> tuple[list[dict], list[dict]]:
    """(source rows to make a FastGelu file from, skips with their reason). qrows: quantize/variants.json
    (failed rows included: a source that failed its check gets no FastGelu file either)."""
    from eval.rows import find
    from export.web_model import FAST_GELU_MODELS, variant_name

    jobs, skipped = [], []
    for model in FAST_GELU_MODELS:
        for v in variants:
            src = find(qrows, model, v, "onnx")
            why = ("the quantize stage did not make it" if src is None else
                   "it failed its check in the quantize stage" if src.get("status") == "failed" else "")
            if why:
                skipped.append({"model": model, "variant": variant_name(v), "format": "ort",
                                "reason": f"no FastGelu file from {model} {v}.onnx: {why}"})
            else:
                jobs.append(src)
    return jobs, skipped


def check_fast_gelu(got, want, inputs, labels_new: list[int], labels_src: list[int], gold: list[int],
                    src_accuracy: float, window: float, min_agreement: float, what: str, src_name: str) -> dict:
    """The variant's check: argmax agreement with its source on the check inputs (as every lossy .ort) and
    export/web_model.py's gelu_check on the whole test split; `passed` and `reason` cover both."""
    from export.checks import argmax_check
    from export.web_model import gelu_check

    check = argmax_check(got, want, inputs, min_agreement, what, f"its source {src_name}", fatal=False)
    gelu = gelu_check(labels_new, labels_src, gold, src_accuracy, window, min_agreement)
    check["gelu"] = gelu
    if not gelu["passed"]:
        check["passed"] = False
        check["reason"] = "; ".join(filter(None, [check.get("reason"), f"{what}: {gelu['reason']}"]))
    return check


def ort_row(q: dict, variant: str, file: str, size: int, check: dict, sc: dict, accuracy_from: str, e,
            details: dict) -> dict:
    """export/variants.json's row of an .ort file made from the quantize row q (export settings e)."""
    return {"model": q["model"], "variant": variant, "format": "ort", "file": file,
            "status": "passed" if check["passed"] else "failed", "size_bytes": size, "opset": q["opset"],
            "check": check, "accuracy": sc["accuracy"], "macro_f1": sc["macro_f1"], "params": q["params"],
            "non_embedding_params": q.get("non_embedding_params"), "accuracy_from": accuracy_from,
            "details": {**details, "target_platform": e.ort_target_platform, "optimization_style": "Fixed",
                        "disabled_optimizers": list(e.ort_disabled_optimizers)}}


def shipped_tokenizer(ctx, model: str, check_texts: list[str]) -> tuple:
    """(check inputs, tokenizer, max_length) of the tokenizer copy the quantize stage shipped with a model's files."""
    from transformers import AutoTokenizer

    from export.checks import check_inputs

    tok_dir = ctx.input("quantize") / model / "tokenizer"
    max_len = json.loads((tok_dir / "pocketformer.json").read_text())["max_length"]
    tok = AutoTokenizer.from_pretrained(tok_dir)
    return check_inputs(tok, check_texts, max_len, wanted=ctx.cfg.quantize.check_samples), tok, max_len


def export_fast_gelu(ctx, qrows: list[dict], check_texts: list[str]) -> tuple[list[dict], list[dict]]:
    """(rows for export/variants.json, skips). Reads quantize/<model>/<variant>.onnx and its tokenizer copy,
    data/test.jsonl; writes export/<model>/<variant>-fastgelu.ort."""
    from eval.metrics import scores
    from export.checks import ort_runner, predict
    from export.ort_session import ort_session
    from export.registry import ExportJob, get_exporter
    from export.web_model import variant_name
    from pipeline.data import read_labels
    from pipeline.tasks.classification.train import _xy

    cfg, e = ctx.cfg, ctx.cfg.export
    jobs, skipped = fast_gelu_jobs(qrows, e.fast_gelu_variants)
    for s in skipped:
        log.warning("[export] %s", s["reason"])
    if not jobs:
        return [], skipped
    labels = read_labels(ctx.input("data"))
    test_texts, gold = _xy(ctx.input("data"), "test", labels)
    rows = []
    for q in jobs:
        model, source = q["model"], q["variant"]
        variant, src = variant_name(source), ctx.run_dir / q["file"]
        out = ctx.out / model / f"{variant}.ort"
        rel = f"{ctx.name}/{model}/{variant}.ort"
        try:
            details = get_exporter("ort-fastgelu").fn(ExportJob(model, None, out, cfg.quantize, e, variant=source,
                                                                sources={source: src}))
        except Exception as err:  # noqa: BLE001 - ours (e.g. a graph with no GELU) or ORT's own exception types:
            # the other files stand, the skip says why
            last = str(err).strip().splitlines()[-1][:300] if str(err).strip() else type(err).__name__
            if isinstance(err, OSError):
                raise  # a full disk or a folder it may not write: the stage fails (and says so), nothing is kept
            if write_failure(str(err)):
                raise PipelineError(f"{model} -> ort-fastgelu: writing {out} failed ({last}): a full disk or a "
                                    f"folder it may not write, not the model; free space on run.runs_dir's disk "
                                    f"and re-run (nothing of the export stage was kept)") from None
            reason = (str(err) if isinstance(err, PipelineError) else
                      f"{model} -> ort-fastgelu: converting {src.name} failed: {last}")
            log.warning("[export] %s", reason)
            skipped.append({"model": model, "variant": variant, "format": "ort", "reason": reason})
            continue
        inputs, tok, max_len = shipped_tokenizer(ctx, model, check_texts)
        got, want = ort_runner(ort_session(out, cfg.run.threads)), ort_runner(ort_session(src, cfg.run.threads))
        batch = cfg.teacher.eval_batch_size
        new_logits = predict(got, tok, test_texts, max_len, batch)
        labels_new = np.argmax(new_logits, 1).tolist()
        labels_src = np.argmax(predict(want, tok, test_texts, max_len, batch), 1).tolist()
        check = check_fast_gelu(got, want, inputs, labels_new, labels_src, list(gold), q["accuracy"],
                                cfg.bundle.accuracy_window, cfg.quantize.min_argmax_agreement,
                                f"{model} {variant} ({rel} vs {src.name})", src.name)
        size = out.stat().st_size
        sc = scores(new_logits, np.array(gold), len(labels))
        rows.append(ort_row(q, variant, rel, size, check, sc, "ort", e,
                            {**details, "source": q["file"], "source_variant": source, "browser_only": True}))
        g = check["gelu"]
        print(f"[export] {model} {variant}.ort: {size:,} bytes, accuracy {sc['accuracy']:.4f} (source "
              f"{q['accuracy']:.4f}), labels agree with the source on {g['agreement_with_as_trained']:.2%} of "
              f"{g['texts']} test texts" + ("" if check["passed"] else " FAILED: not timed or shipped"))
    return rows, skipped
