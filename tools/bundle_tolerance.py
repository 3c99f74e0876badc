"""`python -m tools.bundle_tolerance --run runs/demo`: the figures behind verify-bundle's logit tolerance.

On this CPU, one text per call, over test texts, for the bundled model (runs/<run>/bundle/):
- same model, other graph: the .ort against the .onnx it was converted from (a differently fused graph; a
  CPU with other kernels changes the arithmetic in the same places, so this is the size to cover);
- same file, other threads: each file at 1 thread (how references are stored) against 2 threads;
- same file, other kernels: the .onnx with ORT's graph optimizations off (unfused int8 / fp32 kernels
  in place of the fused ones a CPU-specific build may pick);
- wrong file: the bundled .onnx against the other variants of the same model in quantize/variants.json (the
  nearest file that could be shipped by mistake), which the tolerance must still catch.
Each line: max |a - b|, the largest logit seen, and max |a - b| / (LOGIT_ATOL + LOGIT_RTOL * |b|) (the share
of verify-bundle's bound used; > 1 fails). Timing-free; numbers depend on the CPU (printed first).
"""
from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError
from tools.cli import ToolParser, positive_int


def _line(what: str, a: np.ndarray, b: np.ndarray) -> str:
    from pipeline.tasks.classification.verify import LOGIT_ATOL, LOGIT_RTOL

    diff = np.abs(a - b)  # (N, C)
    ratio = float((diff / (LOGIT_ATOL + LOGIT_RTOL * np.abs(b))).max())
    flips = int((a.argmax(-1) != b.argmax(-1)).sum())
    return (f"{what:58s} max |diff| {diff.max():.4e}  max |logit| {np.abs(b).max():6.3f}  share of bound "
            f"{ratio:8.3f}  label flips {flips}/{len(a)}")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure(run_dir: Path, n_texts: int) -> list[str]:
    from transformers import AutoTokenizer

    from distill.batching import encode
    from export.bundle import io_spec
    from export.ort_session import ort_session
    from pipeline.data import read_split
    from pipeline.tasks.classification.replay import ort_logits

    bundle = run_dir / "bundle"
    if not (bundle / "metadata.json").is_file():
        raise PipelineError(f"{run_dir} has no finished bundle stage; run `make bundle` first")
    meta = json.loads((bundle / "metadata.json").read_text())
    tok = AutoTokenizer.from_pretrained(bundle / "tokenizer")
    texts = [r["text"] for r in read_split(run_dir / "data", "test")][:n_texts]
    ids, _ = encode(tok, texts, meta["max_length"])
    samples = [{"text": t, "token_ids": list(i)} for t, i in zip(texts, ids)]

    def logits(path: Path, spec: dict | None = None, threads: int = 1) -> np.ndarray:
        spec = spec or {"file": str(path), **io_spec(ort_session(path, 1))}
        return np.array(ort_logits(path, spec, samples, threads))  # (N, C)

    m = meta["models"]
    got = {k: logits(bundle / m[k]["file"], m[k]) for k in ("ort", "onnx", "string_onnx") if k in m}
    out = [f"CPU: {_cpu()}; {len(texts)} test texts of run {meta['run']}, one per call, "
           f"model {meta['model']['name']} {meta['model']['variant']}",
           _line(f"{m['ort']['file']} vs its .onnx", got["ort"], got["onnx"])]
    if "string_onnx" in got:  # absent where no in-graph tokenizer matches the model's (string_model_check)
        out.append(_line(f"{m['string_onnx']['file']} vs the .onnx (own tokenizer)", got["string_onnx"], got["onnx"]))
    for k in ("ort", "onnx"):
        out.append(_line(f"{m[k]['file']} at 2 threads vs 1", logits(bundle / m[k]["file"], m[k], 2), got[k]))
    out.append(_line(f"{m['onnx']['file']} unoptimized vs optimized", _unoptimized(bundle / m["onnx"]["file"],
                                                                                   m["onnx"], samples), got["onnx"]))
    rows = json.loads((run_dir / "quantize" / "variants.json").read_text())
    for r in rows:
        if r["model"] == meta["model"]["name"] and r["variant"] != meta["model"]["variant"]:
            out.append(_line(f"wrong file: {r['file']} vs the bundled .onnx", logits(run_dir / r["file"]),
                             got["onnx"]))
    return out


def _unoptimized(path: Path, spec: dict, samples: list[dict]) -> np.ndarray:
    from export.ort_session import ort_session
    from pipeline.tasks.classification.replay import _token_feed

    sess = ort_session(path, 1, optimize=False, quiet=False, fix=None)
    return np.array([sess.run(["logits"], _token_feed(spec, s["token_ids"]))[0][0] for s in samples])  # (N, C)


def main(argv: list[str] | None = None) -> None:
    p = ToolParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="run folder with a finished bundle stage, e.g. runs/demo")
    p.add_argument("--texts", type=positive_int, default=500, help="test texts to run (default 500)")
    args = p.parse_args(argv)
    print("\n".join(measure(Path(args.run), args.texts)))  # a PipelineError: one line, exit 2 (tools.cli.main_exit)


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
