"""Where the time of a model call goes, per op type, from ONNX Runtime's own profiler (SessionOptions.enable_profiling).

    python -m tools.profile_ops --run runs/demo --batch 1 32 --length 64 --threads 1 [--calls 40] [--json out.json]
    python -m tools.profile_ops FILE.onnx FILE.ort ... --tokenizer runs/demo/quantize/student/tokenizer \
        --texts runs/demo/data/test.jsonl

With --run and no files: our student files (quantize/student/{fp32,optimized,int8-dynamic}.onnx, their .ort
in export/student/) and Optimum's (peer/student/*/model*.onnx). Every file gets the same real test
texts cut to exactly --length tokens (eval/latency.py), at each --batch. The profiler records every kernel;
the calls before the last --calls are warm-up and are dropped (by their model_run window). Printed per file
and batch: ms per call (model_run, profiler on), and ms per call and share of the kernel time per op type.
The profiler adds a little to each kernel, so compare files with each other, not with the bench's p50s.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from eval import latency as L
from pipeline.errors import PipelineError
from tools.cli import ToolParser, need_run, non_negative_int, positive_int


def default_files(run: Path) -> list[Path]:
    """Our student files and Optimum's in a finished run, those that exist."""
    names = [f"quantize/student/{v}.onnx" for v in ("fp32", "optimized", "int8-dynamic")]
    names += [f"export/student/{v}.ort" for v in ("fp32", "optimized", "int8-dynamic")]
    names += ["peer/student/fp32/model.onnx", "peer/student/int8-dynamic/model_quantized.onnx"]
    return [run / n for n in names if (run / n).is_file()]


def op_times(events: list[dict], warmup: int) -> tuple[float, dict[str, float], int]:
    """(ms per call, {op type: ms per call}, timed calls) from a profile's events: kernels inside the
    model_run windows after the first `warmup` ones."""
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    timed = runs[warmup:]
    if not timed:
        raise PipelineError(f"the profile holds {len(runs)} model_run event(s), none after {warmup} warm-up calls")
    start = timed[0][0]
    ops: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] >= start:
            ops[e.get("args", {}).get("op_name", "?")] += e["dur"]
    n = len(timed)
    return sum(b - a for a, b in timed) / n / 1e3, {k: v / n / 1e3 for k, v in ops.items()}, n


def profile_file(path: Path, ids: np.ndarray, mask: np.ndarray, threads: int, calls: int, warmup: int) -> dict:
    """Run path `warmup + calls` times under the profiler; per-op-type times of the last `calls`."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "prof")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        feeds = L.feeds([i.name for i in sess.get_inputs()], ids, mask)
        for _ in range(warmup + calls):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    per_call, ops, n = op_times(events, warmup)
    kernels = sum(ops.values())
    return {"file": str(path), "batch": int(ids.shape[0]), "length": int(ids.shape[1]), "threads": threads,
            "calls": n, "ms_per_call": per_call, "kernel_ms_per_call": kernels,
            "ops": {k: {"ms": v, "share": v / kernels if kernels else 0.0}
                    for k, v in sorted(ops.items(), key=lambda kv: -kv[1])}}


def table(results: list[dict], top: int) -> str:
    """Markdown: one row per file and batch, the top op types' ms (share) as columns."""
    total: dict[str, float] = defaultdict(float)
    for r in results:
        for k, v in r["ops"].items():
            total[k] += v["share"]
    cols = [k for k, _ in sorted(total.items(), key=lambda kv: -kv[1])][:top]
    head = ["file", "batch", "ms/call", "seq/s"] + cols + ["other"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        other = sum(v["ms"] for k, v in r["ops"].items() if k not in cols)
        cells = [f"{r['ops'][k]['ms']:.3f} ({r['ops'][k]['share']:.0%})" if k in r["ops"] else "-" for k in cols]
        lines.append("| " + " | ".join([r["label"], str(r["batch"]), f"{r['ms_per_call']:.3f}",
                                        f"{r['batch'] / r['ms_per_call'] * 1e3:.0f}", *cells,
                                        f"{other:.3f}"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = ToolParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="model files (default: the run's student files and Optimum's)")
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--tokenizer", type=Path, help="default: <run>/quantize/student/tokenizer")
    ap.add_argument("--texts", type=Path, help="default: <run>/data/test.jsonl")
    ap.add_argument("--batch", type=positive_int, nargs="+", default=[1, 32])
    ap.add_argument("--length", type=positive_int, default=64)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--calls", type=positive_int, default=40, help="profiled calls per file at batch 1 (batch N: calls / N * 4, "
                                                          "at least 5)")
    ap.add_argument("--warmup", type=non_negative_int, default=3)
    ap.add_argument("--top", type=positive_int, default=8, help="op types shown as columns")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if not a.files or not (a.tokenizer and a.texts):  # the defaults come from the run
        need_run(a.run)
    from transformers import AutoTokenizer

    from tools.compare_files import _texts

    files = a.files or default_files(a.run)
    if not files:
        raise PipelineError(f"no model files given and none found under {a.run}")
    tok = AutoTokenizer.from_pretrained(a.tokenizer or a.run / "quantize" / "student" / "tokenizer")
    texts = _texts(a.texts or a.run / "data" / "test.jsonl")
    stream = L.token_stream(tok, texts, a.length * max(a.batch))
    results = []
    for batch in a.batch:
        ids, mask = L.make_batch(stream, a.length, batch, tok.cls_token_id, tok.sep_token_id)
        calls = a.calls if batch == 1 else max(5, a.calls * 4 // batch)
        for f in files:
            r = profile_file(f, ids, mask, a.threads, calls, a.warmup)
            r["label"] = f.relative_to(a.run).as_posix() if f.is_relative_to(a.run) else f.name
            results.append(r)
            print(f"{r['label']:55s} batch {batch:3d}: {r['ms_per_call']:.3f} ms/call", flush=True)
    print(table(results, a.top))
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
