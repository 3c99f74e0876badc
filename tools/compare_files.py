"""Two model files timed side by side on this machine, in alternating rounds (eval/paired.py says why).

    python -m tools.compare_files OLD.ort NEW.ort --tokenizer runs/demo/distill/student \
        --texts runs/demo/data/test.jsonl --length 64 --threads 1

For "is the new model slower than the old one": two runs' students, an NPU student's static file against
the student it replaces, a config change. Each file gets the same real test texts at exactly --length
tokens (eval/latency.py); a file with fixed input shapes (an NPU file) is fed its own length, padded,
and int32 inputs where it declares them. Prints each file's p50 and the median of the per-round ratios
(second / first) with its range; --json writes them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from eval import latency as L
from eval.paired import alternate
from pipeline.errors import PipelineError
from tools.cli import ToolParser, positive_int


def _feeds(session, ids: np.ndarray, pad_id: int) -> dict[str, np.ndarray]:
    """input_ids / attention_mask (/ token_type_ids) in the file's own dtype, padded to its fixed length."""
    out = {}
    n = ids.shape[1]
    for i in session.get_inputs():
        fixed = i.shape[1] if len(i.shape) > 1 and isinstance(i.shape[1], int) else n
        if fixed < n:
            raise PipelineError(f"{i.name} of this file is fixed at {fixed} tokens, shorter than --length {n}")
        x = np.full((1, fixed), pad_id, np.int64)
        m = np.zeros((1, fixed), np.int64)
        x[:, :n], m[:, :n] = ids, 1
        value = {"input_ids": x, "attention_mask": m, "token_type_ids": np.zeros_like(x)}.get(i.name)
        if value is None:
            raise PipelineError(f"model input {i.name!r} is not input_ids / attention_mask / token_type_ids")
        out[i.name] = value.astype(np.int32) if i.type == "tensor(int32)" else value
    return out


def _session(path: Path, threads: int):
    try:
        return L.ort_session(path, threads, ["CPUExecutionProvider"])
    except Exception as e:  # ONNX Runtime raises its own types; its first line names the problem
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise PipelineError(f"{path} is not a model ONNX Runtime can load ({first})") from None


def _texts(path: Path) -> list[str]:
    """The 'text' field of every JSONL line; one error for a malformed file or one without texts."""
    texts = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            texts.append(str(json.loads(line)["text"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise PipelineError(f"{path} line {i} is not a JSON object with a 'text' field "
                                f"(use a run's data/test.jsonl)") from None
    if not texts:
        raise PipelineError(f"{path} has no texts; use a run's data/test.jsonl")
    return texts


def compare(files: list[Path], ids: np.ndarray, pad_id: int, threads: int, rounds: int, calls: int) -> dict:
    sessions = [_session(f, threads) for f in files]
    runs = [(lambda s=s, f=_feeds(s, ids, pad_id): s.run(None, f)) for s in sessions]
    plan = L.Plan(warmup=10, iterations=calls, max_seconds=1e9, min_iterations=calls)
    res = alternate(runs[1], runs[0], rounds, plan)  # second / first
    return {"files": [str(f) for f in files], "length": int(ids.shape[1]), "threads": threads, "rounds": rounds,
            "calls_per_round": calls, "p50_ms": [res["peer_p50_ms"], res["ours_p50_ms"]],
            "ratio_second_to_first": res["ratio"], "ratio_range": [res["ratio_min"], res["ratio_max"]]}


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoTokenizer

    ap = ToolParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("--tokenizer", type=Path, required=True, help="a model folder with tokenizer files")
    ap.add_argument("--texts", type=Path, required=True, help="JSONL with a 'text' field (a run's data/test.jsonl)")
    ap.add_argument("--length", type=positive_int, default=64)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--rounds", type=positive_int, default=9)
    ap.add_argument("--calls", type=positive_int, default=100, help="timed calls per file per round")
    ap.add_argument("--json", type=Path, help="also write the result here")
    a = ap.parse_args(argv)
    for p in (a.first, a.second, a.texts, a.tokenizer):
        if not p.exists():
            raise PipelineError(f"{p} does not exist")
    texts = _texts(a.texts)
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    stream = L.token_stream(tok, texts, a.length * 4)
    ids, _ = L.make_batch(stream, a.length, 1, tok.cls_token_id, tok.sep_token_id)
    res = compare([a.first, a.second], ids, tok.pad_token_id or 0, a.threads, a.rounds, a.calls)
    for f, p in zip(res["files"], res["p50_ms"]):
        print(f"{p:8.3f} ms  {f}")
    lo, hi = res["ratio_range"]
    print(f"second / first: {res['ratio_second_to_first']:.3f} (rounds {lo:.3f}-{hi:.3f}), {a.length} tokens, "
          f"{a.threads} thread(s), {a.rounds} alternating rounds of {a.calls} calls")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
