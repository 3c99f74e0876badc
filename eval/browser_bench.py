"""Latency entries for the browser targets, all measured in one Chromium run (eval/browser.py).

Each row gets, per browser target, the same kind of entry the other targets write: p50/p90/p99 per
measured length (plus FLOPs rates against the host's matmul peak: the browser runs on the host CPU), a
skip with its reason per length or for the whole row, or a failure carrying onnxruntime-web's own error
(an op or opset its WASM build lacks, an .ort format version it cannot read) - never a silent gap.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from eval.browser import chromium_path, is_browser, run_job, unavailable_reason
from eval.browser_cross import chromium_rounds, cross_check, round_job
from eval.plan import plan_point
from eval.rows import failure, row_key, skip
from eval.targets import Target, resolved_threads

log = logging.getLogger("pocketformer")


def _plan(bench, t: Target, row: dict):
    """The Point to measure, or the skip entry (same rules and wording as the other targets)."""
    if row.get("missing"):
        return skip(row["_reason"] if t.name in row.get("_targets", []) else
                     f"{t.name} does not take this file (and it was not made)")
    if row.get("status") == "failed":  # recorded with its numbers by its stage; never timed or shipped
        return skip(f"not timed: the file failed its check ({row.get('check', {}).get('reason', 'see its variants.json')})")
    point = plan_point(t, row, bench.b.seq_lengths, bench.b.headline_length, bench.b.sweep_variants,
                       bench.models.max_positions(row["model"]), throughput_targets=())
    if isinstance(point, str):
        return skip(point)
    if row["_path"] is None or not Path(row["_path"]).exists():
        return skip(f"file {row.get('file')} is missing")
    return point


def measure_browser(bench, targets: list[Target], rows: list[dict]) -> dict[tuple[str, tuple], dict]:
    """{(target name, row key): latency entry} for every browser target in targets and every row."""
    targets = [t for t in targets if is_browser(t)]
    out: dict[tuple[str, tuple], dict] = {}
    if not targets:
        return out
    b = bench.b
    why = unavailable_reason(b.browser_executable)
    points: dict[tuple[str, tuple], object] = {}
    files: dict[str, dict] = {}  # one job entry per file, with every length any browser target wants
    for t in targets:
        for row in rows:
            p = skip(why) if why else _plan(bench, t, row)
            if isinstance(p, dict):
                out[(t.name, row_key(row))] = p
                continue
            points[(t.name, row_key(row))] = (t, row, p)
            f = files.setdefault(str(row["_path"]), {"key": "/".join(row_key(row)), "path": str(row["_path"]),
                                                      "inputs": {}})
            for n in p.lengths:
                ids, mask = bench.inputs(row["model"], n, 1)
                f["inputs"][str(n)] = {"input_ids": ids[0].tolist(), "attention_mask": mask[0].tolist()}
    if not points:
        return out
    threads = sorted({resolved_threads(t) for t in targets})
    rounds = round_job(bench, points.values(), files)  # the goal's files again, in rounds, in the same page
    t0 = time.perf_counter()
    try:
        doc = run_job(list(files.values()), threads, b.browser_warmup, b.browser_iterations,
                      b.max_seconds_per_point, b.browser_executable, rounds=rounds)
    except Exception as e:  # the browser itself failed: every row says so, the other targets still stand
        log.warning("[bench] browser run failed: %s", e)
        for k in points:
            out[k] = failure(e)
        return out
    log.info("[bench] browser targets: %d files x %s threads in %.1f s (onnxruntime-web %s, Chromium %s)",
             len(files), threads, time.perf_counter() - t0, doc["versions"].get("onnxruntime-web"),
             doc["versions"].get("chromium"))
    runtime = f"onnxruntime-web {doc['versions'].get('onnxruntime-web')} (WASM), Chromium {doc['versions'].get('chromium')}"
    for k, (t, row, p) in points.items():
        n_threads = resolved_threads(t)
        run = doc["runs"][str(n_threads)]
        key = files[str(row["_path"])]["key"]  # rows sharing one file share its timings
        timed = run["files"].get(key, {"error": "no result came back for this file"})
        if "error" in timed:
            out[k] = {"status": "failed", "reason": f"onnxruntime-web: {timed['error']}"}
            continue
        # the entry the other targets write (Bench.entries): each length's summary with its FLOP rate against the
        # native peak of the row's arithmetic (WASM reaches a fraction of it), then the lengths skipped
        entry = bench.entries(t, row, p, bench.plan_points(p), timed, n_threads)
        entry["session"] = {"provider": "onnxruntime-web wasm", "threads": n_threads, "runtime": runtime,
                            "cross_origin_isolated": run.get("isolated"), "chromium": chromium_path(b.browser_executable),
                            # the V8 flags the page ran with; the seconds the page took to fetch the file and
                            # create its session (the first file's include compiling the WASM module); the untimed
                            # seconds this file ran first
                            "v8_flags": doc.get("js_flags"), "load_s": timed.get("load_s"),
                            "warmup_s": timed.get("warmup_s")}
        out[k] = entry
    chromium_rounds(out, files, [row for (_, row, _) in points.values()], doc, rounds)
    if b.browser_cross_check:  # after the rounds: it times the teacher file they found faster
        cross_check(bench, out, files, [row for (_, row, _) in points.values()])
    return out
