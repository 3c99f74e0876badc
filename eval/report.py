"""report.md and report.html from results.json: one list of blocks (headings, paragraphs, tables,
images) rendered twice, so both say the same; the HTML embeds its plots as base64 PNG and stands alone."""
from __future__ import annotations

import base64
import html
from collections import Counter
from pathlib import Path

from eval.browser_goals import TARGET as BROWSER, node_p50
from eval.machine import is_busy
from eval.metrics import HIGHER_IS_BETTER
from eval.plots import all_plots, off_peers, sig
from eval.qnn import TIE_SPREAD
from eval.rows import decodes, find, p50, rounds_p50, target_skip_reason

Block = tuple  # ("h1"|"h2"|"p", text) | ("list", [str]) | ("table", headers, rows) | ("img", Path, alt)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:,.0f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _g(v: float | None) -> str:
    return "-" if v is None else sig(v)


def _gflops_cell(point: dict) -> str:
    """GFLOP/s (% of the peak of the row's own arithmetic, named: fp32 or int8; eval/peaks.py)."""
    if point.get("peak_fraction") is None:
        return f"{point['gflops']:.1f} (-)"
    # documents from before per-arithmetic peaks divided every row by the fp32 peak
    return f"{point['gflops']:.1f} ({_pct(point['peak_fraction'])} of {point.get('peak', 'fp32')})"


def _num(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:.{digits}f}"


# marks the median of a file's interleaved rounds, shown beside its sweep point where the two disagree
ROUNDS_MARK = "\u2020"
# how far (as a fraction) the rounds' median may sit from the sweep point before the cell shows both: the
# rounds of one file spread by a few percent on a quiet machine; the web bundle's file read 3.73 ms in one
# Chromium sweep and 2.39 ms in its rounds (2026-11-28), host-cpu's rounds once read 1.4-2.1x every sweep point
DISAGREE = 0.15


def _cell(row: dict, target: str, length: int, rounds: bool = False) -> str:
    """row's p50 on target at length: the sweep's point; with rounds, also the median of the file's interleaved
    rounds where it has them and it disagrees with the sweep by more than DISAGREE (marked)."""
    entry = row.get("latency", {}).get(target, {})
    if "status" in entry and str(length) not in entry:
        return "est. " + _ms(entry["estimate"]["by_length"].get(str(length), {}).get("estimate_ms")) + "*" \
            if "estimate" in entry else "-"
    point = entry.get(str(length), {})
    if "p50_ms" not in point:
        return "failed" if point.get("status") == "failed" else "-"
    got = rounds_p50(row, target, length) if rounds else None
    if got and abs(got / point["p50_ms"] - 1) > DISAGREE:
        return f"{_ms(point['p50_ms'])} ({ROUNDS_MARK} {_ms(got)})"
    return _ms(point["p50_ms"])


def _section(*blocks: Block) -> list[Block]:
    """The blocks, or none when the table that ends them has no rows."""
    return list(blocks) if blocks[-1][2] else []


def _name(r: dict) -> list[str]:
    return [r["model"], r["variant"] + (" (Optimum)" if r.get("source") == "optimum" else "")
            + (" (FAILED check)" if r.get("status") == "failed" else ""), r["format"]]


def _header(res: dict) -> list[Block]:
    m = res["machine"]
    peaks = ", ".join(f"{t} thread(s): {g} GFLOP/s" for t, g in m["peak_gflops_fp32"].items())
    if m.get("peak_gops_int8"):
        k = m.get("int8_kernels", {})
        peaks += (f". int8 peak ({m['peak_probe_int8']}): "
                  + ", ".join(f"{t} thread(s): {g} GOP/s" for t, g in m["peak_gops_int8"].items())
                  + f"; kernels: {', '.join(k.get('ort_ops', [])) or '?'} on MLAS {k.get('mlas', '?')} "
                    f"({'with' if k.get('vnni') else 'no'} VNNI; {k.get('mlas_source', '')})")
    elif m.get("peak_probe_int8"):
        peaks += f". int8 peak: {m['peak_probe_int8']}"
    v = res["versions"]
    plan = res["plan"]
    proxies = [t for t, d in res["targets"].items() if d.get("proxy")]
    cores = m.get("usable_cores") or 1
    during = m.get("cpu_busy_during_percent")
    busy = [("p", f"WARNING: the machine was busy (other processes used {m.get('cpu_busy_percent')}% of {cores} "
                  f"cores when the bench started"
                  + (f", {during}% while it ran" if during is not None else "")
                  + f"; load average {m.get('load_average_1m')}). "
                  f"Multi-threaded numbers (host-cpu) suffer most, because every parallel region waits "
                  f"for a descheduled thread; re-run `make bench` on an idle machine before quoting them.")] \
        if is_busy(m) else []
    return [
        ("h1", "pocketformer benchmark report"), *busy,
        ("p", f"Machine: {m['cpu']} ({m['machine']}, {m['usable_cores']} usable of {m['logical_cores']} logical "
              f"cores; {', '.join(m['cpu_flags']) or 'no SIMD flags read'}), {m['system']}. Matrix-multiply peak "
              f"measured in this run ({m['peak_probe']}): {peaks}." + gpu_line(m.get("gpu"))),
        ("p", "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + "."),
        ("p", f"Latency: batch 1, {plan['warmup']} warm-up calls, up to {plan['iterations']} timed calls per point"
              + (f" (at least {plan['min_iterations']}, stopping after {plan['max_seconds_per_point']} s)"
                 if plan.get("max_seconds_per_point") else "") + "; inputs: "
              f"{plan['inputs']}. Threads are pinned per target (intra-op): "
              + ", ".join(f"{t} {n}" for t, n in res["threads"].items()) + "."
              + (f" desktop-gpu: every row's points are timed together in {plan['gpu_rounds']} interleaved rounds "
                 f"(the same calls per point, spread over the rounds), so a phase of drift during the bench moves "
                 f"every file alike." if plan.get("gpu_rounds") and _measured_on(res, "desktop-gpu") else "")
              + (f" Browser targets: Chromium with V8 flags {plan['browser_v8_flags']} (V8 compiles the WASM "
                 f"module optimized when it loads; left to tier it up while files were timed, files read up to 3x "
                 f"slow), each file run untimed for {plan['browser_file_warmup_s']} s, then {plan['browser_warmup']} "
                 f"warm-up calls per length and up to {plan['browser_iterations']} timed calls."
                 if "browser_v8_flags" in plan and
                 any(_measured_on(res, t) for t in ("browser-wasm", "browser-wasm-mt")) else "")),
        ("p", ("Host proxies: " + ", ".join(proxies) + " - measured on this machine as a stand-in; their ratios "
               "between models carry over, their absolute times do not." if proxies else
               "Host proxies: none - every target was measured on the hardware it names.")
              + " Numbers marked 'est.' and '*' are roofline ESTIMATES, not measurements."),
    ]


def _measured_on(res: dict, target: str) -> int:
    """How many rows have a measurement on target (at any length)."""
    return sum(any(isinstance(p, dict) and "p50_ms" in p for p in (r["latency"].get(target) or {}).values())
               for r in res["rows"])


def gpu_line(gpu: dict | None) -> str:
    """The card the desktop-gpu rows ran on ('' where the bench saw none)."""
    if not gpu:
        return ""
    more = [f"{gpu['memory_mib']:,} MiB", f"compute capability {gpu['compute_capability']}"]
    more += [f"driver {gpu['driver']}"] if gpu.get("driver") else []
    more += [f"CUDA {gpu['cuda_runtime']} (PyTorch's)"] if gpu.get("cuda_runtime") else []
    count = f", device 0 of {gpu['count']}" if gpu.get("count", 1) > 1 else ""
    return f" GPU: {gpu['name']} ({', '.join(more)}{count})."


def _targets(res: dict) -> list[Block]:
    rows = []
    for t, d in res["targets"].items():
        measured = _measured_on(res, t)
        present = [r for r in res["rows"] if not r.get("missing")]
        entries = [r["latency"].get(t, {}) for r in present]
        notes = [d.get("proxy", "")]
        if not measured and (reason := target_skip_reason(present, t)) is not None:
            notes.append(f"not run: {reason}")  # the whole target was unavailable here
        if any("estimate" in e for e in entries):
            notes.append("latency not measured here; roofline ESTIMATES shown")
        note = "; ".join(n for n in notes if n)
        rows.append([t, d["runtime"], d["provider"], str(d["threads"]), d["precision"], ", ".join(d["formats"]),
                     str(measured), note])
    dropped: list[Block] = [("p", f"Phone measurement {note}") for note in res.get("phone_dropped", [])]
    return [("h2", "Targets"), ("table", ["target", "runtime", "provider", "threads", "precision", "formats",
                                          "rows measured", "note"], rows), *dropped]


def _beside(v: float | None, limit: float | None) -> str:
    """_g, with as many more digits as it takes to tell a value from its limit: a missed goal of 0.8005 against
    0.8 reads "0.8005 | 0.8 | NO", not "0.8 | 0.8 | NO"."""
    if v is None or limit is None or v == limit:
        return _g(v)
    return next((sig(v, n) for n in range(3, 10) if sig(v, n) != sig(limit, n)), _g(v))


def _goals(res: dict) -> list[Block]:
    met = {True: "yes", False: "NO", None: "not measured"}
    rows = [[g["goal"], _beside(g["value"], g["limit"]), _g(g["limit"]), met[g["met"]], g["detail"]]
            for g in res["goals"]]
    return [("h2", "Goals, checked on this run"),
            ("table", ["goal", "value", "limit", "met", "how"], rows)]


def _failed(res: dict) -> list[Block]:
    """Files that failed their check against their source: kept with their numbers, never timed or shipped."""
    rows = []
    for r in res["rows"]:
        if r.get("status") != "failed":
            continue
        c = r.get("check") or {}
        show = _pct if c.get("kind") == "argmax_agreement" else _g
        rows.append(_name(r)[:1] + [r["variant"], r["format"], c.get("kind", "-"), show(c.get("value")),
                                    show(c.get("tolerance")),
                                    _num(r.get("accuracy")), _num(c.get("max_abs_diff"))])
    return _section(("h2", "Variants that failed their check (not timed, not shipped)"),
                    ("p", "Each lossy file is compared with its source on the check texts; below the minimum "
                          "(quantize.min_argmax_agreement) it is recorded here and in its stage's variants.json, "
                          "the run goes on, and the file is not converted further, timed or put in the bundle."),
                    ("table", ["model", "variant", "format", "check", "value", "minimum", "test accuracy",
                               "max abs logit diff"], rows))


def _table_bits_note(rows: list[dict]) -> str:
    """Why our int8-dynamic student can score below Optimum's: its word table in 4 bits (quantize.embedding_bits),
    where Optimum's int8 file keeps the table in fp32; "" when that is not the case or a number is missing."""
    def one(variant: str, optimum: bool) -> dict | None:
        return next((r for r in rows if r["model"] == "student" and r["variant"] == variant and r["format"] == "onnx"
                     and (r.get("source") == "optimum") == optimum and r.get("accuracy") is not None), None)

    ours, peer = one("int8-dynamic", False), one("optimum-int8-dynamic", True)
    bits = ((ours or {}).get("details") or {}).get("embedding_4bit")
    if not (ours and peer and isinstance(bits, dict) and bits.get("bits") == 4):
        return ""
    mib = lambda r: f"{r['size_bytes'] / 2**20:.2f} MiB"  # noqa: E731
    return (f" Our int8-dynamic file keeps its word table in 4 bits (quantize.embedding_bits = 4): {mib(ours)} at "
            f"accuracy {ours['accuracy']:.4f}, against Optimum's {mib(peer)} at {peer['accuracy']:.4f}, whose table "
            "stays fp32.")


def _head_to_head(res: dict) -> list[Block]:
    pairs = res.get("head_to_head") or []
    if not pairs:
        return []
    rows = []
    for h in pairs:
        ours, peer = f"{h['ours']['variant']} {h['ours']['format']}", f"{h['peer']['variant']} {h['peer']['format']}"
        nums = ["-", "-", "failed", h["reason"]] if h.get("status") == "failed" else \
            [f"{h['ours_p50_ms']:.3f}", f"{h['peer_p50_ms']:.3f}", f"{h['ratio']:.3f}",
             f"{h['ratio_min']:.3f}-{h['ratio_max']:.3f}"]
        rows.append([h["target"], str(h.get("batch", 1)), ours, peer, *nums])
    first = pairs[0]
    per_round = ", ".join(sorted({f"batch {h.get('batch', 1)}: {h.get('iterations_per_round', '?')}" for h in pairs}))
    note = (" At fp32 ours is the optimized file (attention fused, layer norms left to ONNX Runtime's faster "
            "unfused kernels): the plain fp32 file is the same torch.onnx export Optimum writes, so it is timed "
            "in the summary table, not paired here."
            if any(h["ours"]["variant"] == "optimized" for h in pairs) else "")
    # quantize.cls_only_last_layer: our files skip most of the last layer, which Optimum's export computes in full
    if any((r.get("details") or {}).get("cls_only_last_layer") for r in res.get("rows", []) if r["model"] == "student"):
        note = note.replace("the plain fp32 file is the same torch.onnx export Optimum writes",
                            "the plain fp32 file is Optimum's torch.onnx export but for its last layer")
        note += (" Our files' last layer computes the [CLS] position only (quantize.cls_only_last_layer: the "
                 "classifier reads nothing else), so part of each ratio is that work saved, not faster kernels.")
    rows_ = res.get("rows", [])
    trim = ((find(rows_, "student", "optimized", "onnx") or {}).get("details") or {}).get("graph_trim") or {}
    if "nodes_after" in trim:  # export/web_graph.trim_bookkeeping: same function, fewer nodes per call
        int8 = find(rows_, "student", "int8-dynamic", "onnx") or {}
        derived = (int8.get("details") or {}).get("source") == "optimized"
        note += (f" After the fusions, the bookkeeping only that last layer reads (its expanded attention mask, "
                 f"reshape shapes computed per call) is trimmed from the optimized file"
                 f"{', which int8-dynamic is quantized from' if derived else ''}: {trim['nodes_before']} -> "
                 f"{trim['nodes_after']} nodes, the same outputs (max relative difference "
                 f"{trim['max_relative_difference']:.1g}).")
    if any(r.get("folded_embedding") for r in res.get("rows", []) if r["model"] == "student"):
        note += (" Optimum cannot load our compact input embedding (restricted rows, factorized), so its export was "
                 "given the same embedding folded into a stock table of every tokenizer id (eval/peer.py "
                 "plain_folder): the same function in the layout Optimum knows.")
    note += _table_bits_note(res.get("rows", []))
    return [("h2", "Our student against Optimum's, head to head"),
            ("p", f"Both files loaded side by side and timed at {first['seq_len']} tokens, at batch 1 and at the "
                  f"throughput batch, in {first.get('rounds', '?')} rounds whose order alternates (calls per round: "
                  f"{per_round}), so machine drift hits both alike. ratio = median of the per-round p50 ratios "
                  "(ours / Optimum; below 1 = ours faster); the range is the lowest and highest round." + note),
            ("table", ["target", "batch", "ours", "Optimum", "ours p50 ms", "Optimum p50 ms", "ratio", "rounds range"],
             rows)]


def _teacher_rounds(res: dict) -> list[Block]:
    """The student's files against the fp32 teacher in interleaved rounds (eval/paired.py teacher_rounds): what
    the app bundle's choice, the batch-1 workload picks and the 1/10 goal read, which a sweep table (one
    stretch of calls per file) can contradict when a slow phase of the machine lands on one file."""
    done = [e for e in res.get("teacher_rounds") or [] if e.get("students")]
    if not done:
        return []

    def sweep(e: dict, model: str, f: dict) -> str:  # the same file's point in the length sweep
        return _ms(p50(find(res["rows"], model, f["variant"], f["format"]), e["target"], e["seq_len"]))

    rows = [[e["target"], f"{s['variant']} {s['format']}", _ms(s["p50_ms"]), f"{s['ratio']:.4f}",
             f"{s['ratio_min']:.4f}-{s['ratio_max']:.4f}", sweep(e, "student", s)]
            for e in done for s in sorted(e["students"], key=lambda s: s["ratio"])]
    teachers = "; ".join(f"{e['target']}: the teacher's fp32 .{e['teacher']['format']} {_ms(e['teacher_p50_ms'])} "
                         f"ms, {sweep(e, 'teacher', e['teacher'])} ms in the sweep" for e in done)
    e = done[0]
    return [("h2", "Student files against the fp32 teacher, in interleaved rounds"),
            ("p", f"Per target, the teacher's fp32 file and every student file in the format the target runs, timed "
                  f"at {e['seq_len']} tokens, batch 1, in {e['rounds']} interleaved rounds ({teachers}): p50 = the "
                  "median over rounds; ratio = the median of the same-round p50 ratios student / teacher. The "
                  "batch-1 workload picks and the app bundle's file (mobile-cpu) are chosen by these rounds. Where "
                  "the sweep point (last column) or the rounds landed in a slow phase of the machine, the two "
                  "disagree, and the summary below shows both."),
            ("table", ["target", "student file", "p50 ms (rounds)", "/ teacher fp32", "rounds range",
                       "sweep p50 ms"], rows)]


def _workloads(res: dict) -> list[Block]:
    """Which file for which workload, per target (eval/workloads.py; the app bundle names the same files)."""
    rows, rules = [], {}
    for target, picks in (res.get("workloads") or {}).items():
        for key, w in picks.items():
            label = "batch 1 latency" if key == "batch1" else f"batch {key.removeprefix('batch')} throughput"
            if "variant" not in w:
                rows.append([target, label, "-", "-", "-", w.get("reason", ""), "-"])
                continue
            # pick_p50: each round's level divided out, so not quite the median of the rounds table below
            rounds = " (interleaved rounds, drift-adjusted)" if w.get("p50_from") == "interleaved rounds" else ""
            measured = (f"{w['p50_ms']:.3f} ms p50{rounds}" if key == "batch1" else
                        f"{w['sequences_per_s']:.1f} seq/s ({w['p50_ms']:.1f} ms per batch)")
            second = w.get("runner_up")
            lead = "-" if not second else (
                f"{second['variant']} {second['format']}: " +
                (f"{second['p50_ms']:.3f} ms" if key == "batch1" else f"{second['sequences_per_s']:.1f} seq/s") +
                f" ({second['lead']:+.1%})")
            rows.append([target, label, f"{w['variant']} {w['format']}", w.get("file") or "-",
                         f"{w['accuracy']:.4f}", measured, lead])
            rules[key] = w["rule"].split(" among ")[0]
    return _section(("h2", "Which file for which workload"),
                    ("p", "Per target, among our student files whose test accuracy is within the accuracy window "
                          "(bundle.accuracy_window) of the best: for answering one text at a time, the fastest p50 "
                          "at batch 1; for batches, the most sequences/s at the throughput batch. The app bundle's "
                          "metadata.json names the same files under \"workloads\". Rules: "
                          + "; ".join(rules.values()) + ". The runner-up column names the next file and the "
                          "pick's lead over it: a lead of a few percent can flip when the bench runs again, so "
                          "read such a pick as a tie."),
                    ("table", ["target", "workload", "file", "path", "accuracy", "measured", "runner-up (lead)"],
                     rows))


def _peer_caveat(res: dict) -> list[Block]:
    """Peer rows whose quality is far from ours (eval.plots.off_peers): timed, but not a working model."""
    metric = res["quality_metric"]
    off = off_peers(res["rows"], metric)
    if not off:
        return []
    ours = {r["model"]: r[metric] for r in res["rows"] if r.get("source") != "optimum" and r.get(metric) is not None
            and r["variant"] == "fp32"}
    vals = sorted({f"{r[metric]:.3f}" for r in off})
    models = sorted({r["model"] for r in off})
    ref = ", ".join(f"{m} {ours[m]:.3f}" for m in models if m in ours)
    return [("p", f"Caveat on Optimum's rows: their {metric} is {' / '.join(vals)} ({', '.join(models)}; ours: "
                  f"{ref or 'see the summary'}), so their files do not compute what ours do: check that Optimum's "
                  "exporter loads every weight of the folder (a layout transformers does not know comes up with "
                  "random weights). Their timings are of the same architecture; their quality is not comparable, "
                  "and the plots draw them off scale.")]


def _browser_cross(res: dict) -> list[Block]:
    """The browser-wasm rows timed again in Node (eval/browser_cross.py)."""
    L = res["plan"]["headline_length"]
    rows, versions = [], {}
    for r, t, check in _entries(res, "cross_check"):
        if t != BROWSER:
            continue
        versions = check.get("versions", versions)
        # Node times its files in rounds: read Chromium's rounds too where the file has them, like with like
        got = rounds_p50(r, BROWSER, L)
        chrome, wasm, native = got or p50(r, BROWSER, L), node_p50(r), node_p50(r, "node-native")
        err = next((check[k]["error"] for k in ("node-wasm", "node-native") if "error" in check.get(k, {})), "")
        shown = f"{_ms(got)} {ROUNDS_MARK} (sweep {_ms(p50(r, BROWSER, L))})" if got else _cell(r, BROWSER, L)
        rows.append(_name(r)[:1] + [r["variant"], r["format"], shown, _ms(wasm),
                                    f"{wasm / chrome:.2f}" if wasm and chrome else "-", _ms(native), err[:120]])
    used = ", ".join(f"{k} {v}" for k, v in versions.items())
    return _section(("h2", f"Browser rows cross-checked outside the browser ({L} tokens, 1 thread)"),
                    ("p", "The files the browser goals compare, timed again in Node: the same onnxruntime-web WASM "
                          "build without Chromium, and onnxruntime-node (ONNX Runtime's native CPU build, what a "
                          "desktop or Electron app runs), the files interleaved in rounds. Chromium and Node-WASM "
                          "should agree to within the machine's noise; the goals above also give their ratio in "
                          "Node-WASM (the median of the same-round ratios). Node / Chromium divides two processes "
                          "timed minutes apart: a shared machine's slower phase moves every file of one run "
                          "together, so the ratios between files, each timed in one process, are what should "
                          "agree most closely (docs/browser.md). Chromium's column is the median of the "
                          f"file's interleaved rounds where its page timed it in them ({ROUNDS_MARK}, its sweep point "
                          f"beside it), else its sweep point. Versions: {used or 'n/a'}."),
                    ("table", ["model", "variant", "format", "Chromium WASM p50 ms", "Node WASM p50 ms",
                               "Node / Chromium", "onnxruntime-node p50 ms", "error"], rows))


def _shown_targets(res: dict, length: int) -> list[tuple[str, bool]]:
    """(target, measured?) for targets with a measurement or an estimate at length; the rest are only
    in the Targets and Skipped tables."""
    measured = {t: any(p50(r, t, length) for r in res["rows"]) for t in res["targets"]}
    return [(t, m) for t, m in measured.items() if m or any("estimate" in r["latency"].get(t, {}) for r in res["rows"])]


def _summary(res: dict) -> list[Block]:
    metric, L = res["quality_metric"], res["plan"]["headline_length"]
    higher = HIGHER_IS_BETTER[metric]
    f1 = any(r.get("macro_f1") is not None for r in res["rows"])  # a second score beside accuracy, where eval has it
    targets = _shown_targets(res, L)
    # lower is better: the row's metric over the teacher's (1.32x), as the goals and perplexity.json read it
    head = ["model", "variant", "format", metric, "retention" if higher else f"{metric} / teacher",
            *(["macro-F1"] if f1 else []), "params", "size MiB", "smaller"]
    # a decode workload's latency is the time to first token of a prompt: the header says so, not just "p50"
    first = "first-token " if decodes(res) else ""
    for t, measured in targets:
        head += [f"{t} {first}p50 ms", "faster"] if measured else [f"{t} ms (est.*)"]
    point = lambda r: r["latency"].get("host-cpu", {}).get(str(L), {})  # noqa: E731
    rates = any("gflops" in point(r) for r in res["rows"])  # none for generation: no column of dashes
    head += ["host GFLOP/s (% peak)"] if rates else []
    rows = []
    for r in res["rows"]:
        vs = r.get("vs_teacher", {})
        kept = vs.get("quality_retention")
        cells = _name(r) + [_num(r.get(metric)), _pct(kept) if higher else "-" if not kept else f"{1 / kept:.2f}x",
                            *([_num(r.get("macro_f1"))] if f1 else []), _num(r.get("params")),
                            f"{r['size_bytes'] / 2**20:.2f}" if r.get("size_bytes") else "-", _x(vs.get("size_ratio"))]
        for t, measured in targets:
            cells += [_cell(r, t, L, rounds=True), _x(vs.get("speedup", {}).get(t))] if measured else [_cell(r, t, L)]
        cells += [_gflops_cell(point(r)) if "gflops" in point(r) else "-"] if rates else []
        rows.append(cells)
    return [("h2", f"Summary at {L} tokens, batch 1"),
            ("p", "'smaller' and 'faster' are ratios against the fp32 teacher (size: its PyTorch checkpoint; speed: "
                  "the fp32 teacher in the same format on the same target). "
                  + (f"Retention = {metric} / the teacher's. " if higher else
                     f"{metric} / teacher = the row's {metric} over the fp32 teacher's (lower is better). ")
                  + "'-' = not run on that target "
                  "(reasons under Skipped). "
                  + (f"p50 and 'faster' are the length sweep's (one stretch of calls per file); '({ROUNDS_MARK} x)' = "
                     "the median of the same file's interleaved rounds (timed again after the sweep, "
                     "alternating with the other files; what the goals and the bundles' picks read), shown where "
                     f"it differs from the sweep point by more than {DISAGREE:.0%}: one of the two landed in a "
                     "slow phase of the machine (the rounds tables above give the ratios between files, timed in "
                     "the same phases). " if any(ROUNDS_MARK in c for cells in rows for c in cells)
                     else "")
                  + ("GFLOP/s = formula FLOPs / p50 (GOP/s for int8 rows), as a share of the matmul peak of the "
                     "row's own arithmetic, named in the cell: fp32 and fp16 rows (no fp16 units) against the fp32 "
                     "peak, int8 rows against the int8 peak (both under Machine); '-' = no peak measured for it. "
                     if rates else "")
                  + "Targets with nothing measured or estimated are left out of this table."),
            ("table", head, rows)] + _flops_check(res)


def _flops_check(res: dict) -> list[Block]:
    checks = [f"{r['model']} {r['flops_graph_check']['ratio_to_formula']:.3f}" for r in res["rows"]
              if "ratio_to_formula" in r.get("flops_graph_check", {})]
    return [("p", "FLOPs cross-check (MatMul/Gemm/LSTM FLOPs counted in the exported fp32 graph / the formula, "
                  "1.0 = agree): " + ", ".join(checks) + ".")] if checks else []


def _entries(res: dict, key: str):
    """(row, target, part) for every row's latency entry holding a non-empty `key` part."""
    for r in res["rows"]:
        for t, entry in r["latency"].items():
            if isinstance(entry, dict) and entry.get(key):
                yield r, t, entry[key]


def _sweeps(res: dict) -> list[Block]:
    lengths = res["plan"]["seq_lengths"]
    out: list[Block] = []  # no heading when nothing was swept (generation times one prompt length)
    for t in res["targets"]:
        rows = [_name(r) + [_cell(r, t, n) for n in lengths] for r in res["rows"]
                if sum(1 for n in lengths if p50(r, t, n)) >= 2]
        if rows:
            out += [("p", f"{t}:"), ("table", ["model", "variant", "format"] + [str(n) for n in lengths], rows)]
    out = ([("h2", "Latency vs sequence length (p50 ms, batch 1)")] + out) if out else []
    B = res["plan"]["throughput_batch"]
    rows = [_name(r) + [t, _ms(tp["p50_ms"]), f"{tp['sequences_per_s']:.1f}",
                        _gflops_cell(tp) if "gflops" in tp else "-"]
            for r, t, tp in _entries(res, f"throughput_b{B}") if "p50_ms" in tp]
    out += _section(("h2", f"Throughput: batch {B} at {res['plan']['headline_length']} tokens"),
                    ("table", ["model", "variant", "format", "target", "p50 ms / batch", "sequences/s",
                               "GFLOP/s (% peak)"], rows))
    rows = [_name(r) + [t, s["provider"], str(s["threads"]), f"{s['peak_rss_mb']:.0f}", f"{s['session_rss_mb']:.0f}"]
            for r, t, s in _entries(res, "session") if "peak_rss_mb" in s]
    return out + _section(("h2", "Memory per session"),
                          ("p", "Peak resident memory of the benchmark process while the session lived (sampled "
                                "every 5 ms), and how much of it the session added."),
                          ("table", ["model", "variant", "format", "target", "provider", "threads", "peak RSS MiB",
                                     "added MiB"], rows))


# the usability checker's provider sections (eval/npu.py), in the table's column order
_PROVIDER_NAMES = {"nnapi": "NNAPI", "coreml_mlprogram": "CoreML MLProgram", "coreml_neuralnetwork": "CoreML NeuralNetwork"}


def _npu(res: dict) -> list[Block]:
    L = res["plan"]["headline_length"]
    onnx_rows, cm_rows, source = [], [], None
    for r in res["rows"]:
        npu = r.get("npu", {})
        entry = r["latency"].get("edge-npu", {})
        est = entry.get("estimate")
        source = source or (est and f"{est['device_name']}: {est['source']}")
        est_cell = _cell(r, "edge-npu", L)
        if "onnx" in npu:
            c = npu["onnx"]
            made_for = _PROVIDER_NAMES.get(r.get("provider"), "any (fixed-shape copy)")
            if "error" in c:
                onnx_rows.append(_name(r)[:2] + [made_for, "checker failed: " + c["error"], "", "", "", est_cell])
                continue

            as_is = [c.get(k, {}).get("as_is", {}) for k in _PROVIDER_NAMES]
            cov = [f"{a.get('supported_nodes', '?')}/{a.get('total_nodes', '?')} in {a.get('partitions', '?')}"
                   + (" (recommended)" if a.get("recommended") else "") for a in as_is]
            ops = sorted({o for a in as_is for o in a.get("unsupported_ops", [])})
            onnx_rows.append(_name(r)[:2] + [made_for, *cov, ", ".join(ops) or "none", est_cell])
        if "coreml" in npu:
            c = npu["coreml"]
            cm_rows.append(_name(r)[:2] + [str(c["ops"]), "yes" if c["ane_ready"] else "no",
                                           "; ".join(c["ane_blockers"]) or "none", est_cell])
    out: list[Block] = [("h2", "Edge NPU readiness")] + _qnn_htp(res)
    out += _section(("p", "HEURISTIC (ONNX Runtime's mobile usability checker, op lists, nothing compiled): every "
                          f"ONNX variant at [1, {L}] tokens (a fixed-shape copy; the npu-* rows are the npu "
                          "student's static files as written, each made for one provider), checked by ONNX "
                          "Runtime's mobile usability checker: nodes the provider takes / all nodes, in how many "
                          "partitions (each partition boundary is a CPU hand-over; unsupported ops run on the CPU). "
                          "Only the int8-static and npu-* rows are edge-npu's files; the others show what keeps them "
                          "off."),
                    ("table", ["model", "variant", "made for", *(f"{n} nodes" for n in _PROVIDER_NAMES.values()),
                               "ops a provider rejects", f"latency at {L} (ms)"], onnx_rows))
    out += _section(("p", "Core ML packages, read from their spec: ops and input shapes that keep them off the "
                          "Neural Engine."),
                    ("table", ["model", "variant", "ops", "Neural Engine ready", "blockers", f"latency at {L} (ms)"],
                     cm_rows))
    if source:
        out.append(("p", "* ESTIMATE, not a measurement (latency column above): roofline lower bound max(FLOPs / peak ops, weight bytes "
                         f"/ memory bandwidth) for {source} Real NPUs reach a fraction of peak, so expect more."))
    return out if len(out) > 1 else []


def _worst_agreement(emu: list[dict]) -> str:
    """The lowest emulator argmax agreement over a file's chips and lengths, with its near ties (eval/qnn.py)."""
    if not emu:
        return ""
    worst = min(emu, key=lambda e: (e["argmax_agreement"], -e.get("near_ties", 0)))
    ties = worst.get("near_ties", 0)
    return (f"{worst['argmax_agreement']:.1%} (of {emu[0]['samples']} each"
            + (f"; {ties} near tie{'s' if ties > 1 else ''}, counted as agreeing)" if ties else ")"))


def _qnn_htp(res: dict) -> list[Block]:
    """Qualcomm's HTP compiler per chip (compile/qnn.json via the bench): the verdict that leads the section.
    One row per model and variant; per chip the lengths that compiled whole and agreed on the emulator."""
    doc = res.get("qnn_htp")
    if not doc:
        return []
    if doc.get("skipped"):
        return [("p", f"Qualcomm HTP compiler: not run ({doc['skipped']}).")]
    chips = list(doc.get("chips") or dict.fromkeys(r["chip"] for r in doc["rows"]))
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in doc["rows"]:
        groups.setdefault((r["model"], r["variant"]), []).append(r)
    rows, notes = [], []
    for (model, variant), rs in groups.items():
        # a variant none of whose files ran (it failed its quantize check): its row says "no", the reason goes under
        if all(r["status"] == "skipped" for r in rs) and len(reasons := {r.get("reason") for r in rs}) == 1 \
                and None not in reasons:
            notes.append(("p", f"{model} {variant}: {reasons.pop()}"))
        cells = []
        for c in chips:
            mine = [r for r in rs if r["chip"] == c]
            ok = [str(r["length"]) for r in mine if r["status"] == "passed"]
            bad = sorted({r["status"] for r in mine if r["status"] != "passed"})
            cells.append((", ".join(ok) if ok else "no") + (f" ({'; '.join(bad)} at the others)" if ok and bad else ""))
        refused = Counter({u["name"]: u["type"] for r in rs for u in r.get("unsupported") or []}.values())
        ops = ", ".join(f"{t} x{n}" if n > 1 else t for t, n in sorted(refused.items()))
        # the longest length that has node counts (a length past the model's maximum is a skip without them)
        top = max((r for r in rs if r.get("nodes_total")), key=lambda r: r["length"], default={})
        sizes = [r["context_bytes"] for r in rs if r.get("context_bytes")]
        emu = [r["emulator"] for r in rs if "argmax_agreement" in (r.get("emulator") or {})]
        rows.append([model, variant, *cells,
                     f"{top['nodes_on_htp']}/{top['nodes_total']}" if top.get("nodes_total") else "",
                     ops or "none",
                     (f"{min(sizes):,}-{max(sizes):,}" if min(sizes) != max(sizes) else f"{sizes[0]:,}") if sizes else "",
                     _worst_agreement(emu),
                     f"{max(e['max_abs_diff'] for e in emu):.3g}" if emu else ""])
    names = [(doc.get("chips") or {}).get(c, c) for c in chips]
    versions = ", ".join(f"{k} {v}" for k, v in (doc.get("compiler") or {}).items() if v)
    return [("p", f"COMPILER VERDICT: Qualcomm's HTP compiler ({versions}) on every static QDQ file, for each "
                  f"chip and length: a length is listed when the whole graph compiled for that chip (CPU fallback "
                  f"disabled: every node on the Hexagon NPU) and its logits on QAIRT's x86 HTP emulator agreed "
                  f"with the same file on the CPU ({doc.get('numerics', '')}; below "
                  f"{doc.get('min_argmax_agreement', 0):.0%} argmax agreement it fails and is never shipped; a flip "
                  f"where the CPU's top two logits are closer than twice the emulator's difference on that text, "
                  f"itself under {TIE_SPREAD:.0%} of the logits' spread, is a near tie and counts as agreeing). Nodes "
                  f"on the HTP / all come from a session allowed to fall back, at the longest length compiled; refused ops "
                  f"are the compiler's, with every node named in compile/qnn.json. Emulator: "
                  f"{doc.get('emulator_note', '')}."),
            ("table", ["model", "variant", *[f"{n}: lengths" for n in names], "nodes on HTP / all", "refused ops",
                       "context bytes", "worst emulator agreement", "max abs diff"], rows), *notes]


def _generation(res: dict) -> list[Block]:
    rows = []
    for r in res["rows"]:
        for t, g in (r.get("generation") or {}).items():
            if "status" in g:  # skips are listed with the latency ones
                continue
            rows.append(_name(r) + [t, _ms(g.get("ttft_ms")), _num(g.get("decode_tokens_per_s"), 1)])
    return _section(("h2", "Generation"), ("table", ["model", "variant", "format", "target",
                                                     "time to first token ms", "decode tokens/s"], rows))


def _skipped(res: dict) -> list[Block]:
    """Every combination not measured, grouped by target and reason; per-length skips name the lengths."""
    by_reason: dict[str, dict[str, list[str]]] = {}
    for r in res["rows"]:
        label = " ".join(_name(r))
        for t, entry in r["latency"].items():
            if not isinstance(entry, dict):
                continue
            if entry.get("status") in ("skipped", "failed", "not measured here"):
                by_reason.setdefault(f"{t}: {entry['status']}: {entry['reason']}", {}).setdefault(label, [])
            for n, point in entry.items():
                if isinstance(point, dict) and point.get("status") in ("skipped", "failed"):
                    by_reason.setdefault(f"{t}: {point['status']}: {point['reason']}", {}).setdefault(label, [])\
                        .append(n)
    for s in res.get("not_made", []):  # the quantize stage made no file: every target
        label = f"{s.get('model', 'every model')} {s['variant']}"
        by_reason.setdefault(f"all targets: not made: {s['reason']}", {}).setdefault(label, [])
    rows = [[reason, "; ".join(lab + (f" (at {', '.join(ns)})" if ns else "") for lab, ns in labels.items())]
            for reason, labels in sorted(by_reason.items())]
    return _section(("h2", "Skipped and not measured, with reasons"), ("table", ["target: reason", "rows"], rows))


def _search(res: dict, out: Path | None) -> list[Block]:
    """A finished student search (results["search"], from runs/<run>/search/): its request, best trial, the
    trained trials best first, and its Pareto plot."""
    s = res.get("search")
    if not s:
        return []
    metric, lower = s["metric"], s["lower_is_better"]
    trained = sorted((t for t in s["trials"] if t.get(metric) is not None),
                     key=lambda t: t[metric] if lower else -t[metric])
    label = metric.replace("_", " ")
    best = s.get("best")
    text = (f"{len(s['trials'])} trials on {s['target']} under {s['budget_ms']:g} ms"
            + (f" and {s['max_mb']:g} MB" if s.get("max_mb") else "") + f" (space '{s['space']}', "
            f"{len(trained)} trained on the short schedule; scores are {label}, the test split is never read).")
    full = f"{metric}_full"
    survivors = [t for t in trained if t.get(full) is not None]
    if survivors:
        text += (f" The best {len(survivors)} were trained again on the full schedule (search.survivors); the best "
                 f"of those is the result.")
    if best:
        score = (f"{best[full]:.4f} after the full schedule ({best[metric]:.4f} short)" if best.get(full) is not None
                 else f"{best[metric]:.4f}")
        text += (f" Best: trial #{best['number']}, {label} {score} at {best['latency_ms']:.3f} ms; "
                 f"its config: {s['config']} (make all CONFIG=runs/<run>/{s['config']}).")
    if s.get("verdict"):  # against the config's own student, trained in full alike (search.reference)
        text += f" Against the config's own student: {s['verdict']}."
    if s.get("stale"):
        text = (f"NOTE: this search ran under other settings than this run's ({s['stale']}): its \"config's own "
                f"student\" is that config's. Run `python -m pipeline search` again to search for this one. " + text)

    def line(label: str, t: dict, params: dict, score: str) -> list[str]:
        return [label, ", ".join(f"{k}={v}" for k, v in sorted(params.items())), t.get("variant", "int8-dynamic"),
                _ms(t["latency_ms"]), f"{t['size_bytes'] / 1e6:.2f}", score]

    rows = [line(f"#{t['number']}", t, t["params"], _num(t[metric])) + ([_num(t.get(full))] if survivors else [])
            for t in trained[:10]]
    ref = s.get("reference")
    if ref and survivors:
        rows.append(line("config's own", ref, ref["student"], "") + [_num(ref.get(full))])
    head = ["trial", "shape", "file", "p50 ms", "MB", f"{label} (short)" if survivors else label]
    bl: list[Block] = [("h2", "Student search"), ("p", text),
                       ("table", head + (["full schedule"] if survivors else []), rows)]
    if s.get("plot") and out is not None and (out / s["plot"]).is_file():
        bl.append(("img", out / s["plot"], f"Student search: {label} against p50 latency on {s['target']}; "
                                           "every trial in results.json (search.trials)."))
    return bl


def blocks(res: dict, plots: dict[str, Path], out: Path | None = None) -> list[Block]:
    caveat = " Optimum's rows sit off scale in a grey band: see the caveat above." \
        if off_peers(res["rows"], res["quality_metric"]) else ""
    captions = {"quality_vs_latency": "Quality vs latency per target; the Pareto front is circled and numbered."
                + caveat,
                "latency_vs_length": "Latency vs sequence length: transformers vs LSTMs.",
                "size_vs_quality": "File size vs quality, every model and variant." + caveat}
    imgs: list[Block] = [("h2", "Plots")] + [("img", p, captions[k]) for k, p in plots.items()]
    return (_header(res) + _targets(res) + _goals(res) + _failed(res) + _workloads(res) + _head_to_head(res) + _teacher_rounds(res)
            + _peer_caveat(res) + _browser_cross(res) + _summary(res) + _sweeps(res) + _npu(res) + _generation(res)
            + (imgs if plots else []) + _search(res, out) + _skipped(res))


def to_markdown(bl: list[Block]) -> str:
    out = []
    for b in bl:
        if b[0] in ("h1", "h2"):
            out.append("#" * int(b[0][1]) + f" {b[1]}\n")
        elif b[0] == "p":
            out.append(b[1] + "\n")
        elif b[0] == "table":
            esc = lambda s: str(s).replace("|", "/").replace("\n", " ")  # noqa: E731
            out.append("| " + " | ".join(map(esc, b[1])) + " |\n|" + "|".join("---" for _ in b[1]) + "|")
            out += ["| " + " | ".join(map(esc, row)) + " |" for row in b[2]]
            out.append("")
        elif b[0] == "img":
            out.append(f"![{b[2]}]({b[1].name})\n\n*{b[2]}*\n")
    return "\n".join(out)


CSS = ("body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}"
       "table{border-collapse:collapse;font-size:12px;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;"
       "padding:3px 6px;text-align:left}th{background:#f0f0f0}tr:nth-child(even){background:#fafafa}"
       "img{max-width:100%;border:1px solid #ddd}figcaption{font-style:italic;font-size:13px}"
       ".wide{overflow-x:auto}p{max-width:1100px}")


def to_html(bl: list[Block]) -> str:
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>pocketformer report</title>",
           f"<style>{CSS}</style></head><body>"]
    for b in bl:
        if b[0] in ("h1", "h2"):
            out.append(f"<{b[0]}>{html.escape(b[1])}</{b[0]}>")
        elif b[0] == "p":
            out.append(f"<p>{html.escape(b[1])}</p>")
        elif b[0] == "table":
            out.append("<div class='wide'><table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in b[1])
                       + "</tr>")
            out += ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in b[2]]
            out.append("</table></div>")
        elif b[0] == "img":
            data = base64.b64encode(Path(b[1]).read_bytes()).decode()
            out.append(f"<figure><img alt='{html.escape(b[2])}' src='data:image/png;base64,{data}'>"
                       f"<figcaption>{html.escape(b[2])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(results: dict, out: Path) -> list[Path]:
    """Plots (PNG), report.md (links them) and report.html (embeds them) under out."""
    plots = all_plots(results, out)
    bl = blocks(results, plots, out)
    md, page = out / "report.md", out / "report.html"
    md.write_text(to_markdown(bl))
    page.write_text(to_html(bl))
    return [md, page, *plots.values()]
