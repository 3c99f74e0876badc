"""Stage wiring for bench (latency of every model variant on every target) and report (tables, plots,
results.json). The measuring lives in eval/bench.py, the rendering in eval/report.py."""
from __future__ import annotations

import json
import logging
import time

import numpy as np

from pipeline.data import read_labels
from pipeline.task import StageContext
from pipeline.tasks.classification import MODEL_FOLDERS, TASK
from pipeline.tasks.classification.train import _xy
from pipeline.tasks.common import reports_truncation

log = logging.getLogger("pocketformer")


@reports_truncation
def stage_bench(ctx: StageContext) -> dict:
    """Latency, memory and FLOPs of every model variant on every target (plus the Optimum peer).

    Reads eval/accuracy.json, quantize/variants.json, export/variants.json, the model folders and the test
    split; writes bench/latency.json (machine, versions, threads, plan, rows) and bench/peer/ (Optimum's files).
    """
    import shutil

    from transformers import AutoTokenizer

    from eval.bench import GPU_ROUNDS, Models, collect_rows, run_bench
    from eval.browser import FILE_WARMUP_S, V8_FLAGS
    from eval.latency import INPUTS_NOTE
    from eval.machine import is_busy, machine_info
    from eval.peer import peer_rows
    from eval.targets import get_target, resolved_threads
    from pipeline.manifest import library_versions

    cfg, b = ctx.cfg, ctx.cfg.bench
    t0 = time.time()
    targets = [get_target(name) for name in b.targets]
    if b.headline_length > cfg.student.max_length:
        log.warning("WARNING: bench.headline_length = %d is past student.max_length (%d): the bundle's tokenizer "
                    "cuts texts at %d tokens, so the headline latencies are for inputs an app never sends; set "
                    "bench.headline_length to one of bench.seq_lengths at or below %d", b.headline_length,
                    cfg.student.max_length, cfg.student.max_length, cfg.student.max_length)
    labels = read_labels(ctx.input("data"))
    texts, y = _xy(ctx.input("data"), "test", labels)
    folders = {name: ctx.input(stage) / sub for name, (stage, sub) in MODEL_FOLDERS.items()}
    models = Models(folders, {name: AutoTokenizer.from_pretrained(f) for name, f in folders.items()})
    rows = collect_rows(ctx.run_dir)
    threads = {t.name: resolved_threads(t) for t in targets}
    machine = machine_info(list(threads.values()))
    if is_busy(machine):
        log.warning("[bench] the machine is busy (other processes use %s%% of %s cores): latencies will be noisy, "
                    "multi-threaded ones most", machine["cpu_busy_percent"], machine["usable_cores"])
    peer_seconds = 0.0
    if b.optimum_peer:
        tp = time.time()
        n = b.peer_eval_texts or len(texts)
        gold = np.array(y[:n])
        reference = {r["model"]: r for r in rows if r["format"] == "pytorch"}
        hf = {m: f for m, f in folders.items() if m in ("teacher", "student")}
        # scored with every core (run.threads), as the quantize stage scores ours: a bench without host-cpu
        # among its targets (desktop-gpu alone) scored them on one thread, 59-65 s on a 16-core machine
        rows += peer_rows(hf, ctx.out / "peer", "bench/peer", cfg.quantize.opset, texts[:n], gold, len(labels),
                          cfg.run.threads, reference)
        peer_seconds = time.time() - tp
    # why the quantize stage left a (model, variant) out, so a missing file is reported with its reason
    qman = json.loads((ctx.input("quantize") / "manifest.json").read_text())
    known_skips = {(s["model"], s["variant"]): s["reason"] for s in qman.get("summary", {}).get("skipped", [])
                   if isinstance(s, dict) and {"model", "variant", "reason"} <= s.keys()}
    # a variant that failed its check has no .ort (the export stage does not convert it): say why
    known_skips.update({(f["model"], f["variant"]): f"it failed its check in the quantize stage ({f['reason']})"
                        for f in qman.get("summary", {}).get("failed", [])})
    results, paired = run_bench(cfg, rows, models, texts, machine, ctx.out / "scratch", known_skips)
    shutil.rmtree(ctx.out / "scratch", ignore_errors=True)  # fixed-shape copies: reproducible, not results

    doc = {
        "task": TASK.name, "quality_metric": TASK.quality, "machine": machine, "versions": library_versions(),
        "threads": threads,
        "plan": {"seq_lengths": b.seq_lengths, "headline_length": b.headline_length, "warmup": b.warmup,
                 "iterations": b.iterations, "min_iterations": b.min_iterations,
                 "max_seconds_per_point": b.max_seconds_per_point, "throughput_batch": b.throughput_batch,
                 "sweep_variants": b.sweep_variants, "inputs": INPUTS_NOTE, "npu_device": b.npu_device,
                 "head_to_head_rounds": b.head_to_head_rounds, "gpu_rounds": GPU_ROUNDS,
                 # the browser targets' own counts (timed in the page with performance.now(), eval/browser.py)
                 "browser_warmup": b.browser_warmup, "browser_iterations": b.browser_iterations,
                 "browser_v8_flags": V8_FLAGS, "browser_file_warmup_s": FILE_WARMUP_S},
        "targets": {t.name: {"runtime": t.runtime, "provider": t.provider, "threads": threads[t.name],
                             "precision": t.precision, "formats": list(t.formats), "proxy": t.proxy,
                             "description": t.description} for t in targets},
        "seconds": {"peer_export": round(peer_seconds, 1), "total": round(time.time() - t0, 1)},
        "rows": results,
        "head_to_head": paired,
        # the qnn-htp target's rows: Qualcomm's HTP compiler per chip (compile/qnn.json), verdicts, no latency
        "qnn_htp": _qnn_htp(ctx),
    }
    (ctx.out / "latency.json").write_text(json.dumps(doc, indent=2))
    return {"rows": len(results), "seconds": doc["seconds"], "threads": threads,
            "head_to_head": {f"{p['ours']['variant']} {p['target']}": p.get("ratio") for p in paired},
            "peak_gflops_fp32": machine["peak_gflops_fp32"]}


def _qnn_htp(ctx) -> dict:
    """compile/qnn.json as the bench document carries it to the report ({"skipped": why} where it did not run)."""
    path = ctx.input("compile") / "qnn.json"
    return json.loads(path.read_text()) if path.is_file() else {"skipped": "the compile stage wrote no qnn.json"}
