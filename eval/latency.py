"""The latency harness: inputs of an exact length, warm-up, timed iterations, percentiles, peak memory.

Inputs are real test texts: their token ids (no special tokens) are concatenated into one stream and
cut into windows of exactly n tokens, wrapped in [CLS] ... [SEP], attention mask all ones. So every
model sees natural token statistics at a length no text padding can blur.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

INPUTS_NOTE = ("real test texts, tokenized without special tokens, concatenated and cut to exactly n tokens "
               "([CLS] ... [SEP] included), attention mask all ones")


def token_stream(tokenizer, texts: Sequence[str], min_tokens: int) -> np.ndarray:
    """Token ids of texts back to back, repeated until at least min_tokens long."""
    ids: list[int] = []
    for t in texts:
        ids.extend(tokenizer(t, add_special_tokens=False)["input_ids"])
        if len(ids) >= min_tokens:
            break
    if not ids:
        ids = [tokenizer.unk_token_id or 0]
    reps = -(-min_tokens // len(ids))
    return np.array((ids * reps)[:max(min_tokens, len(ids))], dtype=np.int64)


def make_batch(stream: np.ndarray, seq_len: int, batch: int, cls_id: int | None, sep_id: int | None
               ) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), each int64 (batch, seq_len); row b is window b of the stream."""
    ends = [i for i in (cls_id, sep_id) if i is not None]
    body = seq_len - len(ends)
    rows = []
    for b in range(batch):
        start = (b * body) % max(1, len(stream) - body)
        chunk = stream[start:start + body]
        if len(chunk) < body:  # stream shorter than a window: wrap around
            chunk = np.resize(stream, body)
        row = ([cls_id] if cls_id is not None else []) + chunk.tolist() + ([sep_id] if sep_id is not None else [])
        rows.append(row)
    ids = np.array(rows, dtype=np.int64)  # (B, T)
    return ids, np.ones_like(ids)


def feeds(input_names: Sequence[str], ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Map a session's inputs by name; Optimum's BERT export also takes token_type_ids (all zero here)."""
    known = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    missing = [n for n in input_names if n not in known]
    if missing:
        raise ValueError(f"model inputs {missing} are not input_ids / attention_mask / token_type_ids")
    return {n: known[n] for n in input_names}


def summarize(samples_ms: Sequence[float]) -> dict[str, float]:
    a = np.asarray(samples_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99), "mean_ms": float(a.mean()),
            "min_ms": float(a.min()), "iterations": int(len(a))}


@dataclass(frozen=True)
class Plan:
    warmup: int
    iterations: int
    max_seconds: float  # per point: slow points stop early, at no fewer than min_iterations
    min_iterations: int = 10


def time_calls(fn: Callable[[], object], plan: Plan) -> list[float]:
    """Milliseconds per call: warm-up calls untimed, then up to plan.iterations timed calls."""
    for _ in range(plan.warmup):
        fn()
    out: list[float] = []
    start = time.perf_counter()
    for i in range(plan.iterations):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
        if i + 1 >= plan.min_iterations and time.perf_counter() - start > plan.max_seconds:
            break
    return out


def time_interleaved(calls: dict, rounds: int) -> tuple[dict, dict]:
    """Milliseconds per call for several calls timed in `rounds` rounds whose order alternates (forward, then
    backward), so drift on the machine hits every call alike. calls: key -> (call, plan). Each call gets its
    plan's warm-up once, then about plan.iterations / rounds timed calls per round, each round capped at
    plan.max_seconds / rounds. Returns (key -> samples, key -> the exception a call raised); a call that
    raises is left out of the rounds after."""
    import math

    out: dict = {k: [] for k in calls}
    failed: dict = {}
    per = {k: Plan(0, math.ceil(plan.iterations / rounds), plan.max_seconds / rounds,
                   math.ceil(plan.min_iterations / rounds)) for k, (_, plan) in calls.items()}
    for k, (fn, plan) in calls.items():
        try:
            for _ in range(plan.warmup):
                fn()
        except Exception as e:  # one broken session must not stop the others' rounds
            failed[k] = e
    keys = [k for k in calls if k not in failed]
    for r in range(rounds):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            if k in failed:
                continue
            try:
                out[k] += time_calls(calls[k][0], per[k])
            except Exception as e:
                failed[k] = e
    return {k: v for k, v in out.items() if k not in failed}, failed


def best_seconds(fn: Callable[[], object], seconds: float, warmup: int = 2) -> float:
    """The fastest of repeated calls over `seconds` (after warm-up calls: thread pool start, page faults)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


class PeakRSS:
    """Samples this process's resident memory in a thread while a session lives (psutil has no peak
    counter per object, and ru_maxrss only ever grows across the whole process)."""

    def __init__(self, interval_s: float = 0.005):
        import psutil

        self._proc = psutil.Process()
        self._interval = interval_s
        self._stop = threading.Event()
        self.baseline = self.peak = self._proc.memory_info().rss

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __enter__(self) -> "PeakRSS":
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)

    def report(self) -> dict[str, float]:
        return {"peak_rss_mb": self.peak / 2**20, "session_rss_mb": (self.peak - self.baseline) / 2**20}


def ort_session(path, threads: int, providers: Sequence[str]):
    """An ORT session with intra-op threads pinned (inter-op 1: these graphs have no parallel branches)."""
    from export.ort_session import ort_session as session

    return session(path, threads, providers, inter_threads=1, fix=None)


def ort_runner(session) -> Callable[[np.ndarray, np.ndarray], Callable[[], object]]:
    """Given inputs, a zero-argument call that runs the session once on them."""
    names = [i.name for i in session.get_inputs()]

    def bind(ids: np.ndarray, mask: np.ndarray) -> Callable[[], object]:
        f = feeds(names, ids, mask)
        return lambda: session.run(None, f)
    return bind


def torch_runner(model, device: str = "cpu", dtype=None) -> Callable[[np.ndarray, np.ndarray], Callable[[], object]]:
    """PyTorch eager. dtype (e.g. torch.float16 on CUDA) runs under autocast rather than casting the
    weights: masks and pooling stay in fp32 where the models compute them so, as on a real GPU deployment."""
    import contextlib

    import torch

    model = model.to(device)

    def bind(ids: np.ndarray, mask: np.ndarray) -> Callable[[], object]:
        x, m = torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)

        def call():
            cast = torch.autocast(device, dtype=dtype) if dtype is not None else contextlib.nullcontext()
            with torch.inference_mode(), cast:
                out = model(x, m)
            if device != "cpu":
                torch.cuda.synchronize()  # CUDA calls return before the kernels finish
            return out
        return call
    return bind
