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
import time

from eval import latency as L
from eval.plan import Point, plan_point
from eval.rows import failure, row_key
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
    return next((r for v in variants for r in rows if row_key(r) == (model, v, fmt) and usable(r)), None)


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
        b = next((r for r in rows if row_key(r) == (model, peer, "onnx") and _on_disk(r)), None)
        if a is not None and b is not None:
            out.append((a, b))
    return out


# A session run on more than one thread leaves its ONNX Runtime workers spinning for a while after its last call
# (intra-op spinning, on by default): on the 2-core host the next file's first calls share a core with them. On
# the Zen 4 host (2026-11-28; two int8 files, batch 32, 2 threads) the first call after the switch read 1.5-1.7x
# its steady time with 0-20 ms between the files and its steady time from 50 ms on. Without a pause the file
# timed second in a round was the slow one: the batch-32 int8 pair's same-round ratios alternated about 0.6 and
# 1.0 with the order, and their median moved the goal across its limit from run to run.
SETTLE_S = 0.05


def settle_for(threads: int) -> float:
    """The pause before each file's turn in a round: only multi-threaded sessions leave spinning workers."""
    return SETTLE_S if threads > 1 else 0.0


def round_p50s(calls: list, rounds: int, plans: list[L.Plan], settle_s: float = 0.0) -> list[list[float]]:
    """Each call's p50 in each of `rounds` rounds, the order forward one round and backward the next (for two
    calls: swapping which goes first), so drift on the machine hits every call alike; settle_s of idle before
    each call's turn (settle_for)."""
    out: list[list[float]] = [[] for _ in calls]
    for r in range(rounds):
        order = range(len(calls)) if r % 2 == 0 else reversed(range(len(calls)))
        for i in order:
            if settle_s:
                time.sleep(settle_s)
            out[i].append(L.summarize(L.time_calls(calls[i], plans[i]))["p50_ms"])
    return out


def ratios_of(mine: list[float], ref: list[float]) -> dict:
    """Same-round ratios mine / ref: their median, min, max and the list."""
    ratios = [a / b for a, b in zip(mine, ref)]
    return {"ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "round_ratios": ratios}


def alternate(call_a, call_b, rounds: int, plan: L.Plan, settle_s: float = 0.0) -> dict:
    """Time call_a and call_b in `rounds` rounds, swapping which goes first each round."""
    pa, pb = round_p50s([call_a, call_b], rounds, [plan, plan], settle_s)
    return {"rounds": rounds, "ours_p50_ms": statistics.median(pa), "peer_p50_ms": statistics.median(pb),
            **ratios_of(pa, pb)}


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
                    entry.update(alternate(calls[0](*inputs), calls[1](*inputs), rounds, plan,
                                           settle_for(resolved_threads(t))))
                    log.info("[bench] head to head %s %s %s vs %s on %s, batch %d: ratio %.3f (rounds %.3f-%.3f)",
                             model, a["variant"], a["format"], b["variant"], t.name, batch, entry["ratio"],
                             entry["ratio_min"], entry["ratio_max"])
                except Exception as e:  # one broken file must not hide the other comparisons
                    entry.update(failure(e))
                out.append(entry)
    return out


# --- the student's files against the fp32 teacher on one target, in the same rounds -------------------------
# The "student int8 <= 1/10 of the fp32 teacher" goal divides two files' p50s. Read from the sweep, they were
# timed minutes apart, and on the 2-core EPYC the speed moves in phases of seconds: the student's int8 .ort read
# 1.1 and 1.7 ms in back-to-back blocks of 30 calls, four open sessions alike, and the goal's ratio read 0.057,
# 0.093 and 0.11 in three runs. Timed in 9 interleaved rounds (four runs back to back), the same-round ratios
# spanned 0.055-0.099 and their medians 0.058-0.075: a phase lands on the files of the same round.
# The same rounds choose the app bundle's file (export/bundle.py, through the rows' "rounds"): every student .ort
# the target times at the headline length is in them. On the Zen 4 host (2026-11-28) the sweep read 0.89 ms for the
# int8-dynamic .ort against 0.83 for int8-static, so the bundle shipped int8-static; in the rounds the same files
# read 0.61 and 0.83 ms (tight over 9 rounds; 0.60 and 0.85 re-timed on the idle machine): a slow phase had
# landed on one file's sweep.
# host-cpu's .onnx files get the same rounds (since 2026-11-28): its batch-1 workload pick had read the sweep, where
# two files 0.1% apart could swap between runs. The teacher goal reads mobile-cpu's entry only.
ROUNDS_FORMATS = {"mobile-cpu": "ort", "host-cpu": "onnx"}  # the format each runs (eval/workloads.py FORMATS)


def teacher_rounds(bench, rows: list[dict], targets: list[Target], rounds: int) -> list[dict]:
    """Per target of ROUNDS_FORMATS that is benched: the teacher's fp32 file and every student file of the
    target's format that it times at the headline length (the files the app bundle and the batch-1 workload
    pick choose among), batch 1, timed in `rounds` interleaved rounds: per student, the median of the
    same-round ratios student / teacher, and every file's p50 per round (round_p50_ms, teacher_round_p50_ms).
    No entry for a target whose teacher or student files are missing; none at all with rounds <= 0."""
    return [e for t in targets if t.name in ROUNDS_FORMATS and not unavailable(t) and rounds > 0
            if (e := _target_rounds(bench, rows, t, ROUNDS_FORMATS[t.name], rounds))]


def _target_rounds(bench, rows: list[dict], t: Target, fmt: str, rounds: int) -> dict | None:
    b, n = bench.b, bench.b.headline_length
    teacher = next((r for r in rows if row_key(r) == ("teacher", "fp32", fmt) and _on_disk(r)), None)
    # our files the target times (not the browser-only FastGelu ones; Optimum's .onnx files have the head to head)
    students = [r for r in rows if r["model"] == "student" and r["format"] == fmt and r.get("source") != "optimum"
                and _on_disk(r) and isinstance(plan_point(t, r, [n], n, list(b.sweep_variants), None), Point)]
    if teacher is None or not students:
        return None
    # about a third of a point's time per file and round: ~25 teacher calls, 100 of the student's
    plan = L.Plan(b.warmup, max(100, b.iterations), b.max_seconds_per_point / 3, b.min_iterations)
    entry = {"target": t.name, "seq_len": n, "batch": 1, "threads": resolved_threads(t), "rounds": rounds,
             "teacher": {"variant": "fp32", "format": fmt, "file": teacher.get("file")}}
    try:
        calls = [bench.runner(t, r, resolved_threads(t))[0](*bench.inputs(r["model"], n, 1))
                 for r in (teacher, *students)]
        p50s = round_p50s(calls, rounds, [plan] * len(calls), settle_for(resolved_threads(t)))
    except Exception as e:  # the goal and the picks fall back to the sweep's p50s
        return {**entry, **failure(e)}
    entry["teacher_p50_ms"], entry["teacher_round_p50_ms"] = statistics.median(p50s[0]), p50s[0]
    entry["students"] = [{"variant": r["variant"], "format": r["format"], "file": r.get("file"),
                          "p50_ms": statistics.median(mine), "round_p50_ms": mine, **ratios_of(mine, p50s[0])}
                         for r, mine in zip(students, p50s[1:])]
    for s in entry["students"]:
        log.info("[bench] student %s %s vs teacher fp32 on %s in %d interleaved rounds: ratio %.4f (rounds %.4f-%.4f)",
                 s["variant"], fmt, t.name, rounds, s["ratio"], s["ratio_min"], s["ratio_max"])
    return entry


def rounds_onto_rows(rows: list[dict], entry: dict) -> None:
    """Each file's round p50s of a teacher_rounds entry onto its row's latency entry for the target, as
    {"rounds": {"length", "round_p50_ms"}}: eval/rows.py pick_p50 reads them where it chooses between files."""
    if "students" not in entry:
        return
    got = {("teacher", entry["teacher"]["variant"], entry["teacher"]["format"]): entry["teacher_round_p50_ms"],
           **{("student", s["variant"], s["format"]): s["round_p50_ms"] for s in entry["students"]}}
    for r in rows:
        lat = r.get("latency", {}).get(entry["target"])
        if (key := row_key(r)) in got and isinstance(lat, dict) and "status" not in lat:
            lat["rounds"] = {"length": entry["seq_len"], "round_p50_ms": got[key]}
