"""results.json: the bench's rows plus what the report compares - ratios against the fp32 teacher and
the task's goals checked on this run's numbers. Schema: eval/SCHEMA.md."""
from __future__ import annotations

import operator
from typing import Any, Callable

from eval.browser_goals import browser_goals
from eval.metrics import HIGHER_IS_BETTER
from eval.paired import PAIRS, our_row
from eval.rows import RNN_MODELS, find, goal, p50, point
from eval.workloads import workloads
from pipeline.config import BundleSection

SCHEMA_VERSION = 1


def quality_key(rows: list[dict]) -> str:
    """The quality metric the rows carry: accuracy (classification) or perplexity (generation). Only for bench
    files written before the bench recorded its task's metric ("quality_metric")."""
    ppl_only = all(r.get("accuracy") is None for r in rows) and any(r.get("perplexity") is not None for r in rows)
    return "perplexity" if ppl_only else "accuracy"


def teacher_reference(rows: list[dict], target: str, fmt: str, length: int) -> float | None:
    """p50 of the fp32 teacher on target: the same format when measured there, else any exported one."""
    for f in (fmt, "onnx", "ort", "pytorch"):
        if got := p50(find(rows, "teacher", "fp32", f), target, length):  # p50 of no row: None
            return got
    return None


def _ratios(rows: list[dict], metric: str, targets: list[str], length: int) -> None:
    teacher = find(rows, "teacher", "fp32", "pytorch") or find(rows, "teacher", "fp32") or {}
    t_size, t_q = teacher.get("size_bytes"), teacher.get(metric)
    for r in rows:
        vs: dict[str, Any] = {}
        if t_size and r.get("size_bytes"):
            vs["size_ratio"] = t_size / r["size_bytes"]  # > 1: smaller than the teacher
        if t_q and r.get(metric) is not None:
            # accuracy: share of the teacher's kept; perplexity: teacher / row, so 1.0 = as good either way
            vs["quality_retention"] = r[metric] / t_q if HIGHER_IS_BETTER[metric] else t_q / r[metric]
        speed = {}
        for t in targets:
            ref, mine = teacher_reference(rows, t, r["format"], length), p50(r, t, length)
            if ref and mine:
                speed[t] = ref / mine  # > 1: faster than the fp32 teacher on the same target
        vs["speedup"] = speed
        r["vs_teacher"] = vs


def budget_goal(seconds: dict) -> dict:
    """The bench's own time limit: every task's part of results.json includes it (res["bench_seconds"])."""
    peer = seconds.get("peer_export")
    # the three largest parts (eval/bench.py run_bench), so a miss says where the time went
    parts = sorted((seconds.get("parts") or {}).items(), key=lambda kv: -kv[1])
    return goal("benchmark of the models completes within 5 minutes", seconds.get("total"), 300.0,
                "bench stage seconds"
                + (" (" + ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in parts[:3])
                   + (", ..." if len(parts) > 3 else "") + ")" if parts else "")
                + (f"; Optimum's export and scoring ran before it, in the peer stage: {peer:.0f} s" if peer else ""))


def classification_results(res: dict, accuracy_window: float) -> dict:
    """The classification task's part of results.json (its Task.results): the demo's latency goals (the student
    against the fp32 teacher, against Optimum's export, in the browser) and which file serves which workload
    per target within accuracy_window, as the bundle picks (eval/workloads.py)."""
    rows, length, plan, targets = res["rows"], res["plan"]["headline_length"], res["plan"], list(res["targets"])
    goals = [_teacher_goal(rows, length, res["teacher_rounds"]),
             *_peer_goals(rows, res["head_to_head"], length, plan.get("throughput_batch", 0)),
             budget_goal(res["bench_seconds"]), *browser_goals(rows, length, targets, accuracy_window)]
    return {"goals": goals,
            "workloads": workloads(rows, targets, accuracy_window, length, plan.get("throughput_batch", 1))}


def generation_results(res: dict, accuracy_window: float) -> dict:
    """The generation task's part: its perplexity and decode-speed goals; no workload table (the bundle ships
    its one decoder)."""
    return {"goals": [*_generation_goals(res["rows"]), budget_goal(res["bench_seconds"])], "workloads": {}}


def _teacher_goal(rows: list[dict], length: int, teacher_rounds: list[dict]) -> dict:
    """Our fastest int8 student .ort at most 1/10 of the fp32 teacher's .ort on mobile-cpu: the median of
    same-round ratios where the bench timed them in interleaved rounds (eval/paired.py teacher_rounds), else
    the ratio of the sweep's p50s (timed minutes apart)."""
    text = f"student int8 p50 <= 1/10 of the fp32 teacher on mobile-cpu at {length} tokens"
    entry = next((e for e in teacher_rounds if e.get("target") == "mobile-cpu"
                  and any(s["variant"].startswith("int8") for s in e.get("students", []))), None)
    if entry:  # the rounds hold every student file the bundle chooses among; the goal is about the int8 ones
        best = min((s for s in entry["students"] if s["variant"].startswith("int8")), key=lambda s: s["ratio"])
        return goal(text, best["ratio"], 0.1, f"student {best['variant']} .ort vs teacher fp32 .ort: median of "
                    f"{entry['rounds']} interleaved-round p50 ratios (rounds {best['ratio_min']:.4f}-"
                    f"{best['ratio_max']:.4f}; {best['p50_ms']:.2f} vs {entry['teacher_p50_ms']:.2f} ms)")
    teacher = teacher_reference(rows, "mobile-cpu", "ort", length)
    students = [(r["variant"], t) for r in rows if r["model"] == "student" and r["variant"].startswith("int8")
                and r["format"] == "ort" and (t := p50(r, "mobile-cpu", length))]
    best_sweep = min(students, key=lambda s: s[1]) if students else None
    ratio = best_sweep[1] / teacher if best_sweep and teacher else None
    return goal(text, ratio, 0.1, f"student {best_sweep[0]} .ort vs teacher fp32 .ort (sweep p50s)" if best_sweep
                else "not measured")


def _generation_goals(rows: list[dict]) -> list[dict]:
    """The generation targets: student perplexity within 2x of the teacher's and below the LSTMs' (the better of
    the plain and the distilled one); the student's int8 decode at least 5x the teacher's tokens/s on mobile-cpu."""
    def ppl(model):
        return (find(rows, model, "fp32", "pytorch") or find(rows, model, "fp32") or {}).get("perplexity")

    def decode(model, variant):  # the fastest file of that variant on mobile-cpu (.ort or .onnx)
        return max((r["generation"]["mobile-cpu"].get("decode_tokens_per_s") or 0 for r in rows
                    if (r["model"], r["variant"]) == (model, variant) and "mobile-cpu" in (r.get("generation") or {})),
                   default=None) or None

    t, s = ppl("teacher"), ppl("student")
    lstms = {m: v for m in RNN_MODELS if (v := ppl(m))}
    best = min(lstms, key=lstms.get, default="lstm")
    fast, slow = decode("student", "int8-dynamic"), decode("teacher", "fp32")
    ratio = s / t if s and t else None
    speed = fast / slow if fast and slow else None
    return [goal("student perplexity within 2x of the teacher's", ratio, 2.0,
                 "student / teacher perplexity on the held-out text"),
            goal("student perplexity below the " + ("LSTMs'" if len(lstms) > 1 else "LSTM's"), s, lstms.get(best),
                 f"student perplexity; limit = {best}'s{', the better LSTM' if len(lstms) > 1 else ''}, same held-out "
                 "text", operator.lt),
            goal("student int8 decode >= 5x the teacher's tokens/s on mobile-cpu", speed, 5.0,
                 "best student int8-dynamic vs teacher fp32 decode tokens/s", operator.ge)]


# ours / Optimum's time at most this: a clear win, not a tie within noise (the paired rounds spread ~0.1)
PEER_LIMIT = 0.8


def _peer_goals(rows: list[dict], head_to_head: list[dict], length: int, batch: int = 0) -> list[dict]:
    """Our student at most PEER_LIMIT of the time of Optimum's file of the same precision, at batch 1 and (batch > 1) at the
    throughput batch: the alternating-round ratio (eval/paired.py) where the bench made one, else the ratio
    of the two rows' sweep p50s (batch 1) or of their sequences/s (the throughput batch)."""
    goals = []
    paired = {(p["ours"]["variant"], p["target"], p.get("batch", 1)): p for p in head_to_head}
    for B in [1] + ([batch] if batch > 1 else []):
        for ours, peer, targets in PAIRS:
            b = find(rows, "student", peer, "onnx")
            for target in targets:
                a = our_row(rows, ours, target)
                variant = a["variant"] if a else ours[0]  # none: the goal still shows, unmeasured
                h = paired.get((variant, target, B))
                if h and h.get("ratio") is not None:
                    ratio = h["ratio"]
                    detail = (f"ours {h['ours']['format']} / Optimum {h['peer']['format']}: median of {h['rounds']} "
                              f"alternating-round p50 ratios (rounds {h['ratio_min']:.3f}-{h['ratio_max']:.3f})")
                elif B == 1:
                    fa, fb = p50(a, target, length), p50(b, target, length)
                    ratio = fa / fb if fa and fb else None
                    detail = "p50 ratio ours / Optimum (sweep)"
                else:  # time per batch ours / Optimum = Optimum's sequences/s / ours
                    sa, sb = (point(r, target, f"throughput_b{B}").get("sequences_per_s") for r in (a, b))
                    ratio = sb / sa if sa and sb else None
                    detail = "sequences/s ratio Optimum / ours (throughput rows)"
                where = f"{target} at {length} tokens" + (f", batch {B}" if B > 1 else "")
                goals.append(goal(f"our student {variant} at most {PEER_LIMIT:g}x Optimum's time on {where}", ratio,
                                  PEER_LIMIT, detail))
    return goals


def build_results(doc: dict, part: Callable[[dict, float], dict] | None = None,
                  accuracy_window: float = BundleSection.accuracy_window) -> dict:
    """bench/latency.json -> results.json: the vs_teacher ratios and the quality metric every task has, then the
    task's own part (its Task.results: classification_results, generation_results): its goals and sections.
    part None: the shared goal (the bench's time) alone."""
    if part is not None and not callable(part):  # build_results(doc, window) before the task's part existed
        raise TypeError(f"build_results(doc, part, accuracy_window): part is the task's Task.results, got {part!r}")
    rows = [dict(r) for r in doc["rows"]]
    length = doc["plan"]["headline_length"]
    metric = doc.get("quality_metric") or quality_key(rows)  # the task's metric (pipeline/tasks/<task>/)
    targets = list(doc.get("targets", {}))
    _ratios(rows, metric, targets, length)
    res = {
        "schema_version": SCHEMA_VERSION,
        "machine": doc["machine"],
        "versions": doc["versions"],
        "threads": doc["threads"],
        "targets": doc.get("targets", {}),
        "plan": doc["plan"],
        "bench_seconds": doc.get("seconds", {}),
        "quality_metric": metric,
        "goals": [],  # the task's part fills these two in place, so results.json keeps its key order
        "head_to_head": doc.get("head_to_head", []),
        "teacher_rounds": doc.get("teacher_rounds", []),
        "workloads": {},
        # Qualcomm's HTP compiler per chip (compile/qnn.json through the bench): the NPU section leads with it
        "qnn_htp": doc.get("qnn_htp"),
        "rows": rows,
    }
    res.update(part(res, accuracy_window) if part else {"goals": [budget_goal(res["bench_seconds"])]})
    return res


ROW_KEYS = {"model": str, "variant": str, "format": str, "latency": dict}
STATUSES = ("skipped", "failed", "not measured here")


def _check_point(where: str, point: dict, problems: list[str]) -> None:
    if "status" in point:
        if point["status"] not in STATUSES or not point.get("reason"):
            problems.append(f"{where}: a status entry needs status in {STATUSES} and a reason")
        return
    need = ("p50_ms", "p90_ms", "p99_ms", "mean_ms")
    if any(not isinstance(point.get(k), (int, float)) for k in need):
        problems.append(f"{where}: a measurement needs {', '.join(need)}")
    elif not point["p50_ms"] <= point["p90_ms"] <= point["p99_ms"]:
        problems.append(f"{where}: percentiles out of order")


def validate_results(doc: dict) -> list[str]:
    """Problems with a results.json document against eval/SCHEMA.md (empty list = valid)."""
    problems = [f"top level: missing '{k}'" for k in ("machine", "versions", "threads", "plan", "rows")
                if k not in doc]
    for i, r in enumerate(doc.get("rows", [])):
        name = f"rows[{i}] ({r.get('model')} {r.get('variant')} {r.get('format')})"
        problems += [f"{name}: '{k}' missing or not {t.__name__}" for k, t in ROW_KEYS.items()
                     if not isinstance(r.get(k), t)]
        if not any(k in r for k in ("accuracy", "perplexity")):
            problems.append(f"{name}: needs 'accuracy' or 'perplexity' (null when unknown)")
        problems += [f"{name}: missing '{k}' (null when unknown)" for k in ("size_bytes", "flops_per_seq")
                     if k not in r]
        if r.get("status") == "failed":  # kept for its numbers, never timed (eval/bench.py)
            if not isinstance(r.get("check"), dict) or r["check"].get("passed") is not False:
                problems.append(f"{name}: a failed row needs its check, with passed false")
            if any(isinstance(p, dict) and "p50_ms" in p for e in r.get("latency", {}).values()
                   if isinstance(e, dict) for p in e.values()):
                problems.append(f"{name}: a row that failed its check must not be timed")
        for target in doc.get("threads", {}):
            if target not in r.get("latency", {}):
                problems.append(f"{name}: no latency entry for target '{target}' (a skip needs its reason)")
        for target, entry in r.get("latency", {}).items():
            where = f"{name} latency.{target}"
            if "status" in entry:
                _check_point(where, entry, problems)
                continue
            for key, at in entry.items():
                if key in ("session", "cross_check", "chromium_rounds", "rounds"):
                    continue
                if not (key.isdigit() or key.startswith("throughput_b")):
                    problems.append(f"{where}: unexpected key '{key}'")
                else:
                    _check_point(f"{where}.{key}", at, problems)
    for i, h in enumerate(doc.get("head_to_head", [])):
        where = f"head_to_head[{i}]"
        if not {"model", "target", "seq_len", "ours", "peer"} <= h.keys():
            problems.append(f"{where}: needs model, target, seq_len, ours and peer")
        elif h.get("status") == "failed":
            if not h.get("reason"):
                problems.append(f"{where}: a failed comparison needs its reason")
        elif not all(isinstance(h.get(k), (int, float)) for k in ("ratio", "ratio_min", "ratio_max", "rounds")):
            problems.append(f"{where}: a comparison needs ratio, ratio_min, ratio_max and rounds")
        elif not h["ratio_min"] <= h["ratio"] <= h["ratio_max"]:
            problems.append(f"{where}: ratio outside its rounds' range")
    for i, e in enumerate(doc.get("teacher_rounds", [])):
        where = f"teacher_rounds[{i}]"
        if not {"target", "seq_len", "rounds", "teacher"} <= e.keys():
            problems.append(f"{where}: needs target, seq_len, rounds and teacher")
        elif e.get("status") == "failed":
            if not e.get("reason"):
                problems.append(f"{where}: a failed timing needs its reason")
        elif not isinstance(e.get("teacher_p50_ms"), (int, float)) or not e.get("students"):
            problems.append(f"{where}: needs teacher_p50_ms and students")
        else:
            for s in e["students"]:
                if not all(isinstance(s.get(k), (int, float)) for k in ("ratio", "ratio_min", "ratio_max", "p50_ms")):
                    problems.append(f"{where} {s.get('variant')}: needs ratio, ratio_min, ratio_max and p50_ms")
                elif not s["ratio_min"] <= s["ratio"] <= s["ratio_max"]:
                    problems.append(f"{where} {s.get('variant')}: ratio outside its rounds' range")
    return problems
