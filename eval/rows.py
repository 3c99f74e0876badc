"""Reading the bench's rows: one row's p50 on a target at a length, a row by (model, variant, format).
The lowest layer of the results code: results.json, the goals, the report and the plots all read rows so."""
from __future__ import annotations

import operator
import statistics
from typing import Sequence


def point(row: dict | None, target: str, key: int | str) -> dict:
    """The part under key (a length, "throughput_b32", or "rounds", "cross_check"...) of row's entry on target;
    {} when none."""
    entry = (row or {}).get("latency", {}).get(target)
    got = entry.get(str(key)) if isinstance(entry, dict) else None
    return got if isinstance(got, dict) else {}


def p50(row: dict | None, target: str, length: int | str) -> float | None:
    return point(row, target, length).get("p50_ms")


def _rounds(row: dict, target: str, length: int | str) -> list[float] | None:
    # native targets: "rounds" (eval/paired.py rounds_onto_rows); browser-wasm: "chromium_rounds"
    rounds = point(row, target, "rounds") or point(row, target, "chromium_rounds")
    return rounds.get("round_p50_ms") if str(rounds.get("length")) == str(length) else None


def _round_levels(rows: Sequence[dict], target: str, length: int | str) -> list[float] | None:
    """Per interleaved round, the median p50 over every file timed in it: the machine's level in that round."""
    series = [got for r in rows if (got := _rounds(r, target, length))]
    if len(series) < 2:
        return None
    return [statistics.median(s[i] for s in series) for i in range(min(map(len, series)))]


def pick_p50(row: dict, target: str, length: int | str, rows: Sequence[dict] = ()) -> float | None:
    """The p50 that chooses between files: where the file was also timed in interleaved rounds at this length
    (mobile-cpu's `rounds`, eval/paired.py; browser-wasm's `chromium_rounds`, eval/browser_cross.py), the
    median over rounds of its p50 over that round's level (the median of every file in `rows` timed in it),
    times the median level; without other files' rounds, the median of its own; else the sweep's p50.
    Why: a sweep point is one stretch of time (on a shared machine one read 4.25 ms for a file whose nine
    rounds read 2.30-2.51 ms), and the machine's speed can switch between rounds: on 2026-11-27 the rounds
    read either 3-4 or 5-7 ms, and a file that was faster in 7 of 9 rounds had the higher median of its own
    rounds (4.59 against 4.48 ms) because more of its rounds fell in the slow phase."""
    got = _rounds(row, target, length)
    if not got:
        return p50(row, target, length)
    levels = _round_levels(rows, target, length)
    if not levels:
        return statistics.median(got)
    return statistics.median(g / level for g, level in zip(got, levels)) * statistics.median(levels)


def rounds_p50(row: dict, target: str, length: int | str) -> float | None:
    """The median of the file's own interleaved-round p50s at length; None where it was not timed in rounds."""
    got = _rounds(row, target, length)
    return statistics.median(got) if got else None


def pick_source(row: dict, target: str, length: int | str) -> str:
    """Which measurement pick_p50 took: "interleaved rounds" or "length sweep" (the bundle records it per file,
    so a choice between files timed both ways says so)."""
    return "interleaved rounds" if _rounds(row, target, length) else "length sweep"


def skip(reason: str) -> dict:
    """A latency entry for what is not measured, with its reason."""
    return {"status": "skipped", "reason": reason}


def target_skip_reason(rows: Sequence[dict], target: str) -> str | None:
    """The one reason every row's entry on target was skipped for (the target could not run here: no GPU), else
    None: some entry was measured, failed, or skipped for reasons of its own."""
    entries = [r.get("latency", {}).get(target, {}) for r in rows]
    reasons = {e.get("reason") for e in entries}
    return reasons.pop() if len(reasons) == 1 and all(e.get("status") == "skipped" for e in entries) else None


def failure(e: Exception) -> dict:
    """A latency entry for what was tried and failed, with the error."""
    return {"status": "failed", "reason": f"{type(e).__name__}: {str(e)[:300]}"}


def goal(text: str, value: float | None, limit: float | None, detail: str, ok=operator.le) -> dict:
    """One entry of results.json's goals: met is ok(value, limit), None when either is unknown."""
    met = None if value is None or limit is None else ok(value, limit)
    return {"goal": text, "value": value, "limit": limit, "met": met, "detail": detail}


def row_key(row: dict) -> tuple[str, str, str]:
    """A row's (model, variant, format): what names it, and the key of its entries in a browser run's results."""
    return row["model"], row["variant"], row["format"]


# the RNN baselines' model names (both tasks): no transformer graph, drawn thinner, one goal reads the better one
RNN_MODELS = ("lstm", "lstm_distilled")


def decodes(results: dict) -> bool:
    """Whether the bench timed a decode workload (its plan has decode steps): then a row's latency is the time to
    the first token of the prompt (eval/bench.py measure_decode), and the report and plots say so."""
    return "decode_tokens" in results["plan"]


def find(rows: list[dict], model: str, variant: str, fmt: str | None = None) -> dict | None:
    return next((r for r in rows if r["model"] == model and r["variant"] == variant
                 and (fmt is None or r["format"] == fmt)), None)
