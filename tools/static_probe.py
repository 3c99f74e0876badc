"""int8-static settings compared on one model of a finished run: argmax agreement with the fp32 ONNX file and
accuracy on test texts, for each setting of quantize.static_float / reduce_range / calibration_samples /
per_channel, built with the pipeline's own quantizer.

    .venv/bin/python -m tools.static_probe --config configs/demo.toml [--model teacher] [--texts 400]
        [--setting '{"static_float": []}' --setting '{}' ...]

A setting is a JSON object of [quantize] keys over the run's config; '{}' is the config as it is. Reads the
model folder, data/{train,test}.jsonl; writes nothing into the run. The README's int8-static figures come
from it; the quantize stage's check (quantize.check_samples texts) is the per-run guard.
"""
from __future__ import annotations

import dataclasses
import json
import random
import tempfile
from pathlib import Path

import numpy as np
from tools.cli import ToolParser, non_negative_int

DEFAULT_SETTINGS = ['{"static_float": []}', "{}"]  # everything quantized (the earlier rule), the config's own


def probe(cfg, model: str, n_texts: int, settings: list[dict], work: Path, log=print) -> list[dict]:
    """One row per setting: agreement with the fp32 ONNX file and accuracy on the first n_texts test texts."""
    from export.checks import ort_runner, predict
    from export.onnx_export import export_onnx
    from export.ort_session import ort_session
    from export.quantize import TextCalibration, quantize_int8_static
    from export.registry import load_source
    from pipeline.data import read_labels, read_split
    from pipeline.errors import PipelineError
    from pipeline.tasks.classification import MODEL_FOLDERS

    stage, sub = MODEL_FOLDERS[model]
    run_dir = cfg.run_dir
    for need in (run_dir / stage / sub, run_dir / "data" / "test.jsonl"):
        if not need.exists():
            raise PipelineError(f"{need} is missing: run `python -m pipeline {stage} --config {cfg.source}` first")
    m = load_source(run_dir / stage / sub, model, "onnx")
    fp32 = work / "fp32.onnx"
    export_onnx(m.model, fp32, cfg.quantize.opset, model, m.pad_id, cfg.quantize.cls_only_last_layer)
    labels = read_labels(run_dir / "data")
    test = read_split(run_dir / "data", "test")[: n_texts or None]
    texts, gold = [r["text"] for r in test], np.array([labels.index(r["label"]) for r in test])
    train = [r["text"] for r in read_split(run_dir / "data", "train")]
    random.Random(cfg.run.seed).shuffle(train)  # the quantize stage's calibration sample
    ref = predict(ort_runner(ort_session(fp32, cfg.run.threads)), m.tokenizer, texts, m.max_length, 16).argmax(-1)
    rows = [{"setting": "fp32 ONNX", "agreement": 1.0, "accuracy": float((ref == gold).mean())}]
    log(f"fp32: accuracy {rows[0]['accuracy']:.4f} on {len(texts)} test texts")
    for s in settings:
        q = dataclasses.replace(cfg.quantize, **s)
        out = work / "int8-static.onnx"
        calib = TextCalibration(m.tokenizer, train[: q.calibration_samples], m.max_length)
        quantize_int8_static(fp32, out, calib, q.activation_type, q.per_channel, model, q.static_float, q.reduce_range)
        got = predict(ort_runner(ort_session(out, cfg.run.threads)), m.tokenizer, texts, m.max_length, 16).argmax(-1)
        rows.append({"setting": json.dumps(s) if s else "the config's own", "agreement": float((got == ref).mean()),
                     "accuracy": float((got == gold).mean())})
        log(f"{rows[-1]['setting']}: agreement {rows[-1]['agreement']:.4f}, accuracy {rows[-1]['accuracy']:.4f}")
    return rows


def main(argv: list[str] | None = None) -> None:
    from pipeline.config import load_config
    from pipeline.errors import PipelineError

    ap = ToolParser(prog="python -m tools.static_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/demo.toml")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    from pipeline.tasks.classification import MODEL_FOLDERS

    ap.add_argument("--model", default="teacher", choices=list(MODEL_FOLDERS))
    ap.add_argument("--texts", type=non_negative_int, default=400, help="test texts to compare on (0 = all)")
    ap.add_argument("--setting", action="append", default=None, help="JSON object of [quantize] keys (repeatable)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        settings = [json.loads(s) for s in (args.setting or DEFAULT_SETTINGS)]
        for s in settings:  # each setting through the config's own checks: a bad value is one error naming it
            if not isinstance(s, dict):
                raise PipelineError(f"--setting {json.dumps(s)} is not a JSON object of [quantize] keys")
            load_config(args.config, args.overrides + [f"quantize.{k}={json.dumps(v)}" for k, v in s.items()])
        with tempfile.TemporaryDirectory() as tmp:
            rows = probe(cfg, args.model, args.texts, settings, Path(tmp))
    except json.JSONDecodeError as e:  # a --setting that is not JSON: one error: line (main_exit), exit 2
        raise PipelineError(str(e)) from None
    print(f"\n{args.model} int8-static, {cfg.run.name}\n")
    print("| setting | argmax agreement with fp32 | accuracy |\n|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['agreement']:.2%} | {r['accuracy']:.4f} |")


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
