"""Stage wiring for peer (Optimum's files of the same models, eval/peer.py) and bench (latency of every model
variant on every target, eval/bench.py)."""
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
from pipeline.tasks.skips import PEER_ROWS, QNN_JSON, skip_peer

log = logging.getLogger("pocketformer")


@reports_truncation
def stage_peer(ctx: StageContext) -> dict:
    """Optimum's export and dynamic int8 quantization of the teacher and student, scored on the test split: the
    files the bench times ours against. A stage of its own so that re-timing (any other bench.* key, a `bench
    --force`) keeps them: they depend on the models, the opset and the texts they are scored on, not on timing.

    Reads the data split, the teacher and student folders and eval/accuracy.json (parameter counts); writes
    peer/<model>/{fp32,int8-dynamic}/ and peer/rows.json (rows with `file` relative to the run folder)."""
    from eval.bench import collect_eval_rows
    from eval.peer import peer_rows

    cfg, b = ctx.cfg, ctx.cfg.bench
    t0 = time.time()
    if not b.optimum_peer:
        return skip_peer(ctx, "bench.optimum_peer = false")
    labels = read_labels(ctx.input("data"))
    texts, y = _xy(ctx.input("data"), "test", labels)
    n = b.peer_eval_texts or len(texts)
    folders = {name: ctx.input(stage) / sub for name, (stage, sub) in MODEL_FOLDERS.items()
               if name in ("teacher", "student")}
    reference = {r["model"]: r for r in collect_eval_rows(ctx.run_dir)}
    # scored with every core (run.threads), as the quantize stage scores ours
    rows = peer_rows(folders, ctx.out, ctx.name, cfg.quantize.opset, texts[:n], np.array(y[:n]), len(labels),
                     cfg.run.threads, reference)
    doc = {"rows": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
           "seconds": round(time.time() - t0, 1)}
    (ctx.out / PEER_ROWS).write_text(json.dumps(doc, indent=2))
    return {"rows": len(rows), "seconds": doc["seconds"],
            "accuracy": {f"{r['model']} {r['variant']}": r.get("accuracy") for r in rows}}


def read_peer(folder, run_dir) -> tuple[list[dict], float]:
    """(the peer stage's rows (its folder) with `_path` set, its seconds)."""
    doc = json.loads((folder / PEER_ROWS).read_text())
    return [dict(r, _path=run_dir / r["file"]) for r in doc["rows"]], float(doc.get("seconds", 0.0))


@reports_truncation
def stage_bench(ctx: StageContext) -> dict:
    """Latency, memory and FLOPs of every model variant on every target, Optimum's files (the peer stage's)
    among them.

    Reads eval/accuracy.json, quantize/variants.json, export/variants.json, peer/rows.json, the model folders
    and the test split; writes bench/latency.json (machine, versions, threads, plan, rows).
    """
    import shutil

    from transformers import AutoTokenizer

    from eval.bench import GPU_ROUNDS, Models, collect_rows, run_bench
    from eval.browser import FILE_WARMUP_S, V8_FLAGS
    from eval.latency import INPUTS_NOTE
    from eval.machine import OtherLoad, is_busy, machine_info, record_load
    from eval.targets import get_target, resolved_threads
    from pipeline.manifest import library_versions

    cfg, b = ctx.cfg, ctx.cfg.bench
    t0, others = time.time(), OtherLoad()
    targets = [get_target(name) for name in b.targets]
    if b.headline_length > cfg.student.max_length:
        log.warning("WARNING: bench.headline_length = %d is past student.max_length (%d): the bundle's tokenizer "
                    "cuts texts at %d tokens, so the headline latencies are for inputs an app never sends; set "
                    "bench.headline_length to one of bench.seq_lengths at or below %d", b.headline_length,
                    cfg.student.max_length, cfg.student.max_length, cfg.student.max_length)
    texts, _ = _xy(ctx.input("data"), "test", read_labels(ctx.input("data")))
    folders = {name: ctx.input(stage) / sub for name, (stage, sub) in MODEL_FOLDERS.items()}
    models = Models(folders, {name: AutoTokenizer.from_pretrained(f) for name, f in folders.items()})
    peer, peer_seconds = read_peer(ctx.input("peer"), ctx.run_dir)
    rows = collect_rows(ctx.run_dir) + peer
    threads = {t.name: resolved_threads(t) for t in targets}
    machine = machine_info(list(threads.values()))
    if is_busy(machine):
        log.warning("[bench] the machine is busy (other processes use %s%% of %s cores): latencies will be noisy, "
                    "multi-threaded ones most", machine["cpu_busy_percent"], machine["usable_cores"])
    # why the quantize stage left a (model, variant) out, so a missing file is reported with its reason
    qman = json.loads((ctx.input("quantize") / "manifest.json").read_text())
    known_skips = {(s["model"], s["variant"]): s["reason"] for s in qman.get("summary", {}).get("skipped", [])
                   if isinstance(s, dict) and {"model", "variant", "reason"} <= s.keys()}
    # a variant that failed its check has no .ort (the export stage does not convert it): say why
    known_skips.update({(f["model"], f["variant"]): f"it failed its check in the quantize stage ({f['reason']})"
                        for f in qman.get("summary", {}).get("failed", [])})
    results, paired, vs_teacher, parts = run_bench(cfg, rows, models, texts, machine, ctx.out / "scratch",
                                                   known_skips)
    shutil.rmtree(ctx.out / "scratch", ignore_errors=True)  # fixed-shape copies: reproducible, not results
    record_load(machine, others)

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
        # peer_export: the peer stage's seconds (Optimum's export, quantization and scoring), not part of total;
        # parts: where total went (eval/bench.py run_bench), so a missed 5-minute goal says what to cut
        "seconds": {"peer_export": peer_seconds, "total": round(time.time() - t0, 1), "parts": parts},
        "rows": results,
        "head_to_head": paired,
        "teacher_rounds": vs_teacher,
        # the qnn-htp target's rows: Qualcomm's HTP compiler per chip (compile/qnn.json), verdicts, no latency
        "qnn_htp": _qnn_htp(ctx),
    }
    (ctx.out / "latency.json").write_text(json.dumps(doc, indent=2))
    return {"rows": len(results), "seconds": doc["seconds"], "threads": threads,
            "head_to_head": {f"{p['ours']['variant']} {p['target']}": p.get("ratio") for p in paired},
            "peak_gflops_fp32": machine["peak_gflops_fp32"]}


def _qnn_htp(ctx) -> dict:
    """compile/qnn.json as the bench document carries it to the report ({"skipped": why} where it did not run)."""
    path = ctx.input("compile") / QNN_JSON
    return json.loads(path.read_text()) if path.is_file() else {"skipped": "the compile stage wrote no qnn.json"}
