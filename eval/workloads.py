"""Which file serves which workload, from the measured rows: per target, the student file for
answering one text at a time (batch 1: the fastest p50 at the headline length) and the one for batches
(bench.throughput_batch: the most sequences/s), each among the files whose test accuracy is within the
accuracy window of the best. The report prints the table; the app bundle's metadata names the same files.

Pure functions on results rows: no timing here, so the rule is unit-tested with synthetic rows.
"""
from __future__ import annotations

from eval.rows import pick_p50, pick_source, point, target_skip_reason

# the targets that time both workloads (eval/plan.py THROUGHPUT_TARGETS) and the file format each runs:
# a server (CPU or GPU) runs the .onnx, a phone the .ort (the Optimum peer, not ours, never serves)
FORMATS = {"host-cpu": "onnx", "mobile-cpu": "ort", "desktop-gpu": "onnx"}


def _point(row: dict, target: str, key: str) -> dict | None:
    got = point(row, target, key)
    return got if "p50_ms" in got else None


def candidates(rows: list[dict], target: str, model: str = "student") -> list[dict]:
    """Our files of model that target runs, with an accuracy, neither missing nor failed."""
    fmt = FORMATS[target]
    return [r for r in rows if r["model"] == model and r["format"] == fmt and r.get("source") != "optimum"
            and not r["variant"].startswith("optimum-") and not r.get("missing") and r.get("status") != "failed"
            and r.get("accuracy") is not None]


def _runner_up(ranked: list[tuple[float, dict]], lead, number: str) -> dict:
    """{"runner_up": the second file of ranked (best first), its number and the winner's lead over it as a
    fraction} - or {} with one file. A pick that leads by a few percent can flip when the bench runs again
    (desktop-gpu's launch-bound files moved by up to 25% against each other between runs), so the report
    prints the lead beside it."""
    if len(ranked) < 2:
        return {}
    value, r = ranked[1]
    return {"runner_up": {"variant": r["variant"], "format": r["format"], number: value, "lead": lead(value)}}


def choose_workloads(rows: list[dict], target: str, window: float, length: int, batch: int,
                     model: str = "student") -> dict:
    """{"batch1": pick, f"batch{batch}": pick} for target. A pick names variant, format, file, accuracy and
    the number it won on (p50_ms, or sequences_per_s with its batch), plus the rule; a workload nothing was
    measured for is {"status": "not measured", "reason": ...}."""
    timed_rows, rows = rows, candidates(rows, target, model)
    fmt = FORMATS[target]
    out: dict = {}
    if not rows:
        why = f"no {model} .{fmt} row with an accuracy in this run"
        return {key: {"status": "not measured", "reason": why} for key in ("batch1", f"batch{batch}")}
    # the target could not run here (no GPU, say): its reason, not "no time for the files" as if they had failed
    if (reason := target_skip_reason(rows, target)) is not None:
        why = f"{target} did not run here: {reason}"
        return {key: {"status": "not measured", "reason": why} for key in ("batch1", f"batch{batch}")}
    best = max(r["accuracy"] for r in rows)
    within = [r for r in rows if r["accuracy"] >= best - window - 1e-12]
    scope = (f"{model} .{fmt} files on {target} whose test accuracy is within {window:.3f} of the best "
             f"({best:.4f})")

    def pick(r: dict, **measured) -> dict:
        return {"target": target, "model": model, "variant": r["variant"], "format": r["format"], "file": r.get("file"),
                "accuracy": r["accuracy"], **measured}

    # batch 1: the p50 the app bundle chooses by (interleaved rounds where the bench ran them, eval/rows.py)
    one = sorted(((pick_p50(r, target, length, timed_rows), r) for r in within if _point(r, target, str(length))),
                 key=lambda t: (t[0], -t[1]["accuracy"], t[1].get("size_bytes") or 0))
    if one:
        p, r = one[0]
        out["batch1"] = pick(r, batch=1, seq_len=length, p50_ms=p, p50_from=pick_source(r, target, length),
                             rule=f"batch 1 latency: fastest p50 at {length} tokens among {scope}",
                             **_runner_up(one, lambda q: q / p - 1, "p50_ms"))
    else:
        out["batch1"] = {"status": "not measured", "reason": f"no batch-1 time at {length} tokens for the {scope}"}
    many = sorted(((p["sequences_per_s"], r) for r in within
                   if (p := _point(r, target, f"throughput_b{batch}")) and p.get("sequences_per_s")),
                  key=lambda t: (-t[0], -t[1]["accuracy"], t[1].get("size_bytes") or 0))
    if many:
        s, r = many[0]
        out[f"batch{batch}"] = pick(r, batch=batch, seq_len=length, sequences_per_s=s,
                                    p50_ms=_point(r, target, f"throughput_b{batch}")["p50_ms"],
                                    rule=f"batch {batch} throughput: most sequences/s at {length} tokens among {scope}",
                                    **_runner_up(many, lambda q: s / q - 1, "sequences_per_s"))
    else:
        out[f"batch{batch}"] = {"status": "not measured",
                                "reason": f"no batch-{batch} time at {length} tokens for the {scope}"}
    return out


def workloads(rows: list[dict], targets: list[str], window: float, length: int, batch: int,
              model: str = "student") -> dict:
    """{target: choose_workloads(...)} for the targets in FORMATS that the run benchmarked."""
    return {t: choose_workloads(rows, t, window, length, batch, model) for t in targets if t in FORMATS}
