"""Head to head: our student against Optimum's file of the same precision, timed in alternating rounds.

Two latencies within a few percent of each other, measured one after the other on a shared machine,
differ by the machine's drift (another process, clock frequency, caches) as much as by the files: the
sweep times each file once, minutes apart. Here both files are loaded side by side and timed in short
rounds whose order alternates (ours first, then Optimum first, ...), so drift hits both alike. The ratio
is the median of the per-round p50 ratios; its min and max over the rounds show how far to trust it.
"""
from __future__ import annotations

import logging
import statistics

from eval import latency as L
from eval.rows import failure
from eval.targets import Target, resolved_threads, unavailable

log = logging.getLogger("pocketformer")

# (our variants, first found wins; Optimum's variant; targets). At fp32 ours is the "optimized" file, the
# graph pocketformer ships at that precision (export/optimize.py): the plain "fp32" file is the same
# torch.onnx export Optimum writes (373 against 371 nodes, the same 205-206 after ORT's load-time fusions),
# so timing it against Optimum's measures the machine's noise, not the export; it stands in only when a
# config leaves "optimized" out. The report's goals read the same table.
PAIRS = ((("optimized", "fp32"), "optimum-fp32", ("host-cpu", "mobile-cpu")),
         (("int8-dynamic",), "optimum-int8-dynamic", ("host-cpu", "mobile-cpu")))


def our_row(rows: list[dict], variants: tuple[str, ...], target: str, model: str = "student",
            usable=lambda r: True) -> dict | None:
    """Our file for target: the first of variants that has one (optimized is transformer-only and
    optional). The bench passes usable = "the file is on disk"; the report's goals take any row. On mobile-cpu
    ours is the .ort file (what ships to a phone); Optimum writes no .ort, so its .onnx runs there."""
    fmt = "ort" if target == "mobile-cpu" else "onnx"
    return next((r for v in variants for r in rows
                 if (r["model"], r["variant"], r["format"]) == (model, v, fmt) and usable(r)), None)


def _on_disk(r: dict) -> bool:
    # a file that failed its check is never timed (eval/bench.py), head to head included
    return not r.get("missing") and bool(r.get("_path")) and r.get("status") != "failed"


def pair_rows(rows: list[dict], target: str, model: str = "student") -> list[tuple[dict, dict]]:
    """(our row, Optimum's row) for every pair that has both files on target."""
    out = []
    for ours, peer, targets in PAIRS:
        if target not in targets:
            continue
        a = our_row(rows, ours, target, model, _on_disk)
        b = next((r for r in rows if (r["model"], r["variant"], r["format"]) == (model, peer, "onnx")
                  and _on_disk(r)), None)
        if a is not None and b is not None:
            out.append((a, b))
    return out


def alternate(call_a, call_b, rounds: int, plan: L.Plan) -> dict:
    """Time call_a and call_b in `rounds` rounds, swapping which goes first each round."""
    pa, pb, ratios = [], [], []
    for r in range(rounds):
        first, second = (call_a, call_b) if r % 2 == 0 else (call_b, call_a)
        t1 = L.summarize(L.time_calls(first, plan))["p50_ms"]
        t2 = L.summarize(L.time_calls(second, plan))["p50_ms"]
        a, b = (t1, t2) if r % 2 == 0 else (t2, t1)
        pa.append(a)
        pb.append(b)
        ratios.append(a / b)
    return {"rounds": rounds, "ours_p50_ms": statistics.median(pa), "peer_p50_ms": statistics.median(pb),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "round_ratios": ratios}


def workload_plans(b) -> list[tuple[int, L.Plan]]:
    """(batch, plan per round) for the two workloads the head to head times: batch 1 in rounds of at least
    100 calls (a millisecond model's p50 over 30 calls moves by a few percent), and bench.throughput_batch in
    rounds of a few calls (each is 32x the work), both capped by bench.max_seconds_per_point per round."""
    one = L.Plan(b.warmup, max(100, b.iterations), b.max_seconds_per_point, b.min_iterations)
    many = L.Plan(1, max(5, b.iterations // 5), b.max_seconds_per_point, 3)
    return [(1, one)] + ([(b.throughput_batch, many)] if b.throughput_batch > 1 else [])


def head_to_head(bench, rows: list[dict], targets: list[Target], rounds: int, model: str = "student") -> list[dict]:
    """Alternating-round comparisons of our student files with Optimum's at the headline length, at batch 1
    and at bench.throughput_batch (entries carry "batch")."""
    if rounds <= 0:
        return []
    n = bench.b.headline_length
    out = []
    for t in targets:
        if unavailable(t):
            continue
        for a, b in pair_rows(rows, t.name, model):
            calls = None
            for batch, plan in workload_plans(bench.b):
                entry = {"model": model, "target": t.name, "seq_len": n, "batch": batch, "threads": resolved_threads(t),
                         "ours": {"variant": a["variant"], "format": a["format"], "file": a.get("file")},
                         "peer": {"variant": b["variant"], "format": b["format"], "file": b.get("file")},
                         "iterations_per_round": plan.iterations}
                try:
                    if calls is None:  # one session per file, both workloads
                        calls = (bench.runner(t, a, resolved_threads(t))[0], bench.runner(t, b, resolved_threads(t))[0])
                    inputs = bench.inputs(model, n, batch)
                    entry.update(alternate(calls[0](*inputs), calls[1](*inputs), rounds, plan))
                    log.info("[bench] head to head %s %s %s vs %s on %s, batch %d: ratio %.3f (rounds %.3f-%.3f)",
                             model, a["variant"], a["format"], b["variant"], t.name, batch, entry["ratio"],
                             entry["ratio_min"], entry["ratio_max"])
                except Exception as e:  # one broken file must not hide the other comparisons
                    entry.update(failure(e))
                out.append(entry)
    return out
