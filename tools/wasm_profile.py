"""Where a model file's time goes in onnxruntime-web: per-op profiles (ONNX Runtime's profiler) of each file in
headless Chromium (WASM, 1 thread), in Node with the same WASM build, and in onnxruntime-node (native CPU,
1 thread: a cross-check of the op shares), aggregated per op type and per node.

    python -m tools.wasm_profile FILE [FILE ...] [--length 64] [--runs 50] [--warmup 10]
        [--runtimes chromium,node-wasm,node-native] [--top 12] [--json OUT.json]
    python -m tools.wasm_profile FILE [FILE ...] --compare [--rounds 15] [--runs 20]

--compare times the files without the profiler, interleaved (each round times every file in turn, so a
busy machine slows them alike), and prints each file's median round and its ratio to the LAST file (the
baseline, e.g. Optimum's best), per round then median: the web goal's ratio on one page session; and the
same from each round's fastest run (steadier when other processes load the machine).

web/profile.mjs runs the files; this module turns the trace events into tables. Each node's time is its median
over the profiled runs (the warm-up runs, which carry WASM tier-up and first-run allocations, are dropped;
the median drops runs another process preempted); an op type's time is the sum of its nodes' medians.
Per-kernel profiling adds a little time per node, so compare shares and files, not these totals with the
bench's p50s.
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from eval.browser import chromium_path, run_node_script, unavailable_reason
from tools.cli import ToolParser, non_negative_int, positive_int

RUNTIMES = ("chromium", "node-wasm", "node-native")
KERNEL = "_kernel_time"


def input_for(length: int) -> dict:
    """[CLS] ids... [SEP], every position attended: kernel time does not depend on which ids."""
    if length < 2:
        raise ValueError("length must be at least 2 ([CLS] and [SEP])")
    ids = [101] + [1000 + (i * 37) % 5000 for i in range(length - 2)] + [102]
    return {"input_ids": ids, "attention_mask": [1] * length}


def split_runs(events: list[dict], warmup: int) -> list[list[dict]]:
    """The kernel events of each profiled run after the first `warmup` model_run events, one list per run."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    kernels = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith(KERNEL)]
    out = []
    for r in runs[warmup:]:
        lo, hi = r["ts"], r["ts"] + r["dur"]
        out.append([k for k in kernels if lo <= k["ts"] <= hi])
    return out


def aggregate(events: list[dict], warmup: int) -> dict:
    """{runs, run_ms (median model_run), kernel_ms (sum of the node medians), ops: [{op, us, share, count}],
    nodes: [{node, op, us, share}]}: us per run, sorted by time. Each node's time is the median over the
    profiled runs: on a shared machine a run preempted inside one kernel would otherwise lend it milliseconds."""
    runs = split_runs(events, warmup)
    if not runs:
        raise ValueError(f"no profiled run after {warmup} warm-up runs")
    model_runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                        key=lambda e: e["ts"])[warmup:]
    per_node: dict[str, list[float]] = defaultdict(list)
    node_op: dict[str, str] = {}
    for run in runs:
        times: dict[str, float] = defaultdict(float)
        for k in run:
            node = k["name"][: -len(KERNEL)]
            times[node] += k["dur"]
            node_op[node] = k.get("args", {}).get("op_name", "?")
        for node, us in times.items():
            per_node[node].append(us)
    med = {node: statistics.median(v + [0.0] * (len(runs) - len(v))) for node, v in per_node.items()}
    total = sum(med.values())
    by_op: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for node, us in med.items():
        by_op[node_op[node]] += us
        count[node_op[node]] += 1
    share = (lambda us: us / total) if total else (lambda us: 0.0)
    ops = [{"op": op, "us": us, "share": share(us), "count": count[op]}
           for op, us in sorted(by_op.items(), key=lambda x: -x[1])]
    nodes = [{"node": node, "op": node_op[node], "us": us, "share": share(us)}
             for node, us in sorted(med.items(), key=lambda x: -x[1])]
    return {"runs": len(runs), "run_ms": statistics.median(e["dur"] for e in model_runs) / 1e3,
            "kernel_ms": total / 1e3, "kernels_per_run": statistics.median(len(r) for r in runs),
            "ops": ops, "nodes": nodes}


def ratios(rounds: dict[str, list[float]]) -> dict[str, dict]:
    """{key: {median_ms, ratio (median of per-round ratios to the last key), ratios}}: same-round ratios
    cancel the load other processes put on the machine during that round."""
    keys = list(rounds)
    base = rounds[keys[-1]]
    out = {}
    for k in keys:
        r = [a / b for a, b in zip(rounds[k], base)]
        out[k] = {"median_ms": statistics.median(rounds[k]), "ratio": statistics.median(r), "ratios": r}
    return out


def op_table(profiles: dict[str, dict], top: int) -> str:
    """Markdown: one row per op type (the `top` slowest in any file), us per run and share per file."""
    names = list(profiles)
    order: list[str] = []
    for p in profiles.values():
        for o in p["ops"][:top]:
            if o["op"] not in order:
                order.append(o["op"])
    head = "| op | " + " | ".join(f"{n} us (share, count)" for n in names) + " |"
    lines = [head, "|---|" + "---|" * len(names)]
    for op in order:
        cells = []
        for p in profiles.values():
            o = next((x for x in p["ops"] if x["op"] == op), None)
            cells.append(f"{o['us']:.0f} ({o['share']:.0%}, {o['count']})" if o else "-")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines.append("| **kernels, ms per run** | " + " | ".join(f"{p['kernel_ms']:.3f}" for p in profiles.values()) + " |")
    lines.append("| model_run, ms | " + " | ".join(f"{p['run_ms']:.3f}" for p in profiles.values()) + " |")
    return "\n".join(lines)


def node_table(name: str, profile: dict, top: int) -> str:
    lines = [f"| {name}: node | op | us | share |", "|---|---|---|---|"]
    lines += [f"| {n['node']} | {n['op']} | {n['us']:.0f} | {n['share']:.1%} |" for n in profile["nodes"][:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = ToolParser(prog="python -m tools.wasm_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--length", type=positive_int, default=64)
    ap.add_argument("--runs", type=positive_int, default=50)
    ap.add_argument("--warmup", type=non_negative_int, default=10)
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--chromium", default="", help="Chromium executable (default: the first on PATH)")
    ap.add_argument("--top", type=positive_int, default=12)
    ap.add_argument("--json", type=Path, help="write the aggregated profiles here")
    ap.add_argument("--compare", action="store_true", help="interleaved timing, ratios to the last file")
    ap.add_argument("--rounds", type=positive_int, default=15)
    a = ap.parse_args(argv)
    if a.length < 2:  # input_for's [CLS] and [SEP]; caught here, not as a traceback
        ap.error(f"argument --length: must be at least 2 ([CLS] and [SEP]), got {a.length}")
    runtimes = [r for r in a.runtimes.split(",") if r]
    bad = [r for r in runtimes if r not in RUNTIMES]
    if bad:
        ap.error(f"unknown runtime(s) {bad}: choose from {', '.join(RUNTIMES)}")
    missing = [str(f) for f in a.files if not f.is_file()]
    if missing:
        ap.error(f"no such file(s): {', '.join(missing)}")
    if "chromium" in runtimes and unavailable_reason(a.chromium):
        ap.error(unavailable_reason(a.chromium))
    keys = [f.name if [g.name for g in a.files].count(f.name) == 1 else str(f) for f in a.files]
    job = {"chromium": chromium_path(a.chromium) or "", "runtimes": runtimes, "warmup": a.warmup, "runs": a.runs,
           "mode": "compare" if a.compare else "profile", "rounds": a.rounds,
           "files": [{"key": k, "path": str(f.resolve()), "input": input_for(a.length)} for k, f in zip(keys, a.files)]}
    doc = run_node_script("profile.mjs", job, timeout_s=1800)
    if a.compare:
        return print_compare(doc, runtimes, keys, a)
    result: dict = {"versions": doc["versions"], "length": a.length, "runs": a.runs, "warmup": a.warmup, "runtimes": {}}
    for rt in runtimes:
        run = doc["runtimes"][rt]
        print(f"\n## {rt} ({a.length} tokens, 1 thread, {a.runs} profiled runs after {a.warmup} warm-up)\n")
        if "error" in run:
            print(f"failed: {run['error']}")
            result["runtimes"][rt] = {"error": run["error"]}
            continue
        profiles = {}
        for k in keys:
            f = run["files"][k]
            if "error" in f:
                print(f"{k}: failed: {f['error']}")
                continue
            profiles[k] = aggregate(f["events"], a.warmup)
        result["runtimes"][rt] = profiles
        if profiles:
            print(op_table(profiles, a.top) + "\n")
            for k, p in profiles.items():
                print(node_table(k, p, a.top) + "\n")
    print(f"versions: {json.dumps(doc['versions'])}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return _exit(result)


def print_compare(doc: dict, runtimes: list[str], keys: list[str], a) -> int:
    result: dict = {"versions": doc["versions"], "length": a.length, "rounds": a.rounds, "runs": a.runs, "runtimes": {}}
    for rt in runtimes:
        run = doc["runtimes"][rt]
        print(f"\n## {rt}: {a.rounds} interleaved rounds x {a.runs} runs, {a.length} tokens, 1 thread; "
              f"ratio = median of same-round ratios to {keys[-1]}\n")
        failed = {k: f["error"] for k, f in run.get("files", {}).items() if "error" in f}
        if "error" in run or failed:
            print(f"failed: {run.get('error') or failed}")
            result["runtimes"][rt] = {"error": run.get("error") or failed}
            continue
        r = ratios({k: run["files"][k]["rounds"] for k in keys})
        # each round's fastest run: the one nothing preempted, steadier than the median on a loaded machine
        fast = ratios({k: run["files"][k]["mins"] for k in keys}) if all("mins" in run["files"][k] for k in keys) else {}
        result["runtimes"][rt] = {k: dict(v, fastest=fast.get(k)) for k, v in r.items()}
        print("| file | median ms | ratio | ratio range | fastest-run ms | fastest-run ratio |\n|---|---|---|---|---|---|")
        for k, v in r.items():
            f = fast.get(k)
            tail = f"{f['median_ms']:.3f} | {f['ratio']:.3f}" if f else "- | -"
            print(f"| {k} | {v['median_ms']:.3f} | {v['ratio']:.3f} | {min(v['ratios']):.3f}-{max(v['ratios']):.3f} | {tail} |")
    print(f"\nversions: {json.dumps(doc['versions'])}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return _exit(result)


def _exit(result: dict) -> int:
    """1 when no runtime measured any file (the failures are printed above), so a script sees it; else 0."""
    if any(r and "error" not in r for r in result["runtimes"].values()):
        return 0
    print("error: no file was measured in any runtime (the failures are above)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
