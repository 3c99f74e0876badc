"""Reading the bench's rows: one row's p50 on a target at a length, a row by (model, variant, format).
The lowest layer of the results code: results.json, the goals, the report and the plots all read rows so."""
from __future__ import annotations


def p50(row: dict, target: str, length: int | str) -> float | None:
    entry = row.get("latency", {}).get(target, {})
    point = entry.get(str(length)) if isinstance(entry, dict) else None
    return point.get("p50_ms") if isinstance(point, dict) else None


def find(rows: list[dict], model: str, variant: str, fmt: str | None = None) -> dict | None:
    for r in rows:
        if r["model"] == model and r["variant"] == variant and (fmt is None or r["format"] == fmt):
            return r
    return None
