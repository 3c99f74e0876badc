"""Pairs of model files timed in alternating rounds (eval/paired.alternate) at batch 1 and batch 32, 1 thread: the
wall-clock check beside tools/profile_ops (the profiler adds a little to every kernel).

    python -m tools.pair_batches --run runs/demo [--batch 1 32] [--rounds 9] [--json out.json]

Default pairs, all of a finished run: our optimized vs plain fp32 (is attention fusion with a mask a loss at
batch 32?), our .ort files vs Optimum's .onnx of the same precision (the bench's head to head, mobile-cpu).
Prints the median of the per-round p50 ratios (first / second) and its range.
"""
from __future__ import annotations

import json
from pathlib import Path

from eval import latency as L
from eval.paired import alternate
from tools.cli import ToolParser, need_run, positive_int

PAIRS = [("quantize/student/optimized.onnx", "quantize/student/fp32.onnx"),
         ("export/student/optimized.ort", "export/student/fp32.ort"),
         ("export/student/optimized.ort", "peer/student/fp32/model.onnx"),
         ("export/student/fp32.ort", "peer/student/fp32/model.onnx"),
         ("export/student/int8-dynamic.ort", "peer/student/int8-dynamic/model_quantized.onnx")]


def main(argv: list[str] | None = None) -> None:
    ap = ToolParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--batch", type=positive_int, nargs="+", default=[1, 32])
    ap.add_argument("--length", type=positive_int, default=64)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--rounds", type=positive_int, default=9)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    need_run(a.run)
    from transformers import AutoTokenizer

    from tools.compare_files import _texts

    tok = AutoTokenizer.from_pretrained(a.run / "quantize" / "student" / "tokenizer")
    stream = L.token_stream(tok, _texts(a.run / "data" / "test.jsonl"), a.length * max(a.batch))
    out = []
    for batch in a.batch:
        # batch 1: rounds of 100 calls as the bench's head to head; batch N: a few calls (each is N x the work)
        plan = L.Plan(10, 100, 2.0, 30) if batch == 1 else L.Plan(1, 6, 2.0, 3)
        ids, mask = L.make_batch(stream, a.length, batch, tok.cls_token_id, tok.sep_token_id)
        for first, second in PAIRS:
            if not ((a.run / first).is_file() and (a.run / second).is_file()):
                continue
            calls = [L.ort_runner(L.ort_session(a.run / f, a.threads, ["CPUExecutionProvider"]))(ids, mask)
                     for f in (first, second)]
            r = alternate(calls[0], calls[1], a.rounds, plan)
            out.append({"first": first, "second": second, "batch": batch, **r})
            print(f"batch {batch:2d} {first} / {second}: ratio {r['ratio']:.3f} ({r['ratio_min']:.3f}-"
                  f"{r['ratio_max']:.3f}), p50 {r['ours_p50_ms']:.2f} vs {r['peer_p50_ms']:.2f} ms", flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
