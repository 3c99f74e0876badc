"""Generation stages that ship the models: quantize (ONNX with KV cache / LSTM state, int8 dynamic, greedy
token-for-token checks), export (.ort, Core ML) and bench (time to first token, decode tokens/s)."""
from __future__ import annotations

import functools
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from pipeline.errors import PipelineError
from pipeline.tasks.generation import LM_FOLDERS, TASK
from pipeline.tasks.generation.common import check_prompt, held_out_windows, load_lm, ort_lm
from pipeline.tasks.common import threads
from pipeline.task import StageContext

log = logging.getLogger("pocketformer")


def lm_folder(ctx: StageContext, name: str) -> Path:
    """The folder of a model by its LM_FOLDERS name (teacher, student, lstm, lstm_distilled)."""
    stage, sub = LM_FOLDERS[name]
    return ctx.upstream(stage) / sub


def ort_perplexity(runner, lm, windows: np.ndarray) -> dict:
    """Perplexity of an ONNX graph on teacher-id windows, scored exactly as eval scores PyTorch."""
    import math

    total, count = 0.0, 0
    for w in windows:
        x = torch.from_numpy(w[None])  # (1, T + 1)
        logits = torch.from_numpy(runner.window_logits(lm.to_model_ids(x[:, :-1]).numpy()))
        lp = lm.target_logprobs(logits, x[:, 1:])
        total -= lp.double().sum().item()
        count += lp.numel()
    return {"perplexity": math.exp(total / count), "tokens": count}


def reference_continuations(runner, lm, prompts: list[list[int]], n: int) -> list[list[int]]:
    """The pipeline's greedy continuations (teacher ids): its own ONNX Runtime loop over a quantize-stage graph,
    in student ids, exactly as the quantize stage checks it against PyTorch."""
    out = []
    for p in prompts:
        got = runner.generate(lm.to_model_ids(torch.tensor(p)).tolist(), n)
        out.append(got if lm.vmap is None else lm.vmap.to_teacher(got).tolist())
    return out


def stage_quantize(ctx: StageContext) -> dict:
    """ONNX export (KV cache for the decoders, state for the LSTM) and int8 dynamic quantization; every
    fp32 graph must reproduce the PyTorch greedy decode token for token. Writes quantize/<model>/<variant>/
    model.onnx and onnx_rows.json (perplexity of the student and LSTM graphs on the test windows)."""
    from eval.metrics import greedy
    from export.checks import check_greedy
    from export.onnx_export import export_decoder, export_lstm_lm

    cfg, q = ctx.cfg, ctx.cfg.quantize
    threads(cfg)
    eval_rows = {r["model"]: r for r in json.loads((ctx.upstream("eval") / "perplexity.json").read_text())}
    rows, win, skipped = [], None, []
    for name in q.models:
        folder = lm_folder(ctx, name)
        lm, tok = load_lm(folder, name)
        if win is None:
            win = held_out_windows(ctx, tok)
        prompt = check_prompt(ctx, tok)
        ref = greedy(lm, prompt, cfg.lm.check_tokens)  # teacher ids
        fp32 = ctx.out / name / "fp32" / "model.onnx"
        fp32.parent.mkdir(parents=True)
        if lm.kind == "lstm":
            export_lstm_lm(lm.model, fp32, q.opset)
        else:
            export_decoder(folder, fp32.parent, q.opset)
        variants = q.variants  # each a graph the stages build (fp32, int8-dynamic): checked when the config loaded
        if name == "teacher" and not cfg.lm.quantize_teacher:
            skipped += [{"model": name, "variant": v, "reason": "the teacher is the fp32 reference (set "
                         "lm.quantize_teacher = true to build its int8 graph)"} for v in variants if v != "fp32"]
            variants = [v for v in variants if v == "fp32"]
        for variant in variants:
            path = variant_graph(variant, fp32, ctx.out / name / variant, name, q)
            runner = ort_lm(path, lm)
            got = reference_continuations(runner, lm, [prompt], cfg.lm.check_tokens)[0]
            row = {"model": name, "variant": variant, "format": "onnx", "path": str(path.relative_to(ctx.out)),
                   "size_bytes": _onnx_size(path),
                   "greedy_check": check_greedy(ref, got, f"{name} {variant} ONNX", must_match=variant == "fp32"),
                   "params": eval_rows[name]["params"]}
            if name == "teacher" and variant == "fp32":  # 30 layers over the test windows again costs minutes;
                # the graph is greedy-checked against the same PyTorch model eval scored
                row.update(perplexity=eval_rows[name]["perplexity"], perplexity_from="pytorch fp32")
            else:
                row.update(ort_perplexity(runner, lm, win))
            rows.append(row)
    (ctx.out / "onnx_rows.json").write_text(json.dumps(rows, indent=2))
    return {"rows": rows, "skipped": skipped, "opset": q.opset}


def variant_graph(variant: str, fp32: Path, folder: Path, model_name: str, q) -> Path:
    """The graph of one quantize variant: fp32 as exported, int8-dynamic through the quantizer every task
    uses (export/quantize.py), honouring quantize.per_channel."""
    if variant == "fp32":
        return fp32
    from export.quantize import quantize_int8_dynamic

    folder.mkdir(parents=True, exist_ok=True)
    quantize_int8_dynamic(fp32, folder / "model.onnx", model_name, q.per_channel)
    return folder / "model.onnx"


def _onnx_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith("model.onnx"))


# what a .ort file that decodes unlike its .onnx can do: the conversion's graph fusions are what differ
ORT_FIX = ("leave this variant out of export.ort_variants, or name the fusion at fault in "
           "export.ort_disabled_optimizers")


def stage_export(ctx: StageContext) -> dict:
    """.ort files for the student and LSTM graphs (checked: same greedy tokens as their .onnx) and Core ML
    packages (student: stateful KV cache for iOS18, else fixed window; LSTM with explicit state).
    Writes export/<model>/<variant>/model.ort, export/coreml/<model>-<variant>.mlpackage, exports.json."""
    from export.checks import check_greedy
    from export.coreml import can_predict
    from export.ort_format import convert_to_ort

    cfg, e = ctx.cfg, ctx.cfg.export  # ort_disabled_optimizers was checked when the config loaded
    threads(cfg)
    qdir = ctx.upstream("quantize")
    onnx_rows = json.loads((qdir / "onnx_rows.json").read_text())
    rows, coreml = [], []
    load = functools.cache(lambda name: load_lm(lm_folder(ctx, name), name))  # each model once
    for r in onnx_rows:
        name, variant = r["model"], r["variant"]
        if name == "teacher" or variant not in e.ort_variants:
            continue  # the teacher is benchmarked from its .onnx (a 650 MB model is not shipped to phones)
        lm, tok = load(name)
        prompt = lm.to_model_ids(torch.tensor(check_prompt(ctx, tok))).tolist()
        ort_path = ctx.out / name / variant / f"{Path(r['path']).stem}.ort"
        convert_to_ort([(name, qdir / r["path"], ort_path)], e.ort_target_platform, e.ort_disabled_optimizers)
        want = ort_lm(qdir / r["path"], lm).generate(prompt, cfg.lm.check_tokens)
        got = ort_lm(ort_path, lm).generate(prompt, cfg.lm.check_tokens)
        rows.append({**{k: r[k] for k in ("model", "variant", "params") if k in r}, "format": "ort",
                     "path": str(ort_path.relative_to(ctx.out)), "size_bytes": ort_path.stat().st_size,
                     "perplexity": r.get("perplexity"),
                     "check_vs_onnx": check_greedy(want, got, f"{name} {variant} .ort", must_match=True,
                                                      sides=(".onnx", ".ort"), fix=ORT_FIX)})
    ok, why = can_predict()
    for name in e.coreml_models:  # student and lstm only: checked when the config loaded
        lm, tok = load(name)
        coreml += _coreml_model(ctx, lm, tok, e, ok, why)
    (ctx.out / "exports.json").write_text(json.dumps({"ort": rows, "coreml": coreml}, indent=2))
    return {"ort": rows, "coreml": coreml}


def _coreml_model(ctx, lm, tok, e, can_predict: bool, why: str) -> list[dict]:
    from eval.metrics import greedy
    from export import coreml, coreml_stateful
    from export.checks import check_greedy

    cfg = ctx.cfg
    prompt_t = check_prompt(ctx, tok)
    cut = lm.vmap.other_id if lm.vmap is not None and lm.vmap.has_other else None
    try:
        if lm.kind == "lstm":
            with coreml.quiet():
                ml, how = coreml_stateful.convert_lstm_lm(lm.model, cfg.lm.max_cache, e.coreml_target)
            check = {"converted_module": "the LSTM LM itself"}
        else:
            with coreml.quiet():
                ml, how = coreml_stateful.convert_student(lm.model, cfg.lm.max_cache, e.coreml_target)
            # the stateful module is our re-implementation of the cache: it must decode like transformers
            ref = lm.to_model_ids(torch.tensor(greedy(lm, prompt_t, cfg.lm.check_tokens))).tolist()
            mod = coreml_stateful.StatefulLlama(lm.model, cfg.lm.max_cache)
            got = coreml_stateful.stateful_greedy(mod, lm.to_model_ids(torch.tensor(prompt_t)).tolist(),
                                                  cfg.lm.check_tokens, cut)
            check = check_greedy(ref, got, f"{lm.name} Core ML stateful module", must_match=True,
                                 sides=("PyTorch", "stateful module"),
                                 fix=f"leave {lm.name} out of export.coreml_models (its decoder layout differs "
                                     f"from the Llama cache the module re-implements)")
    except PipelineError:
        raise
    except Exception as ex:  # coremltools raises many types; name the model, format and the failing op
        raise PipelineError(f"Core ML conversion of {lm.name} (target {e.coreml_target}) failed: "
                            f"{type(ex).__name__}: {str(ex)[:300]}") from None
    out = []
    for variant in e.coreml_variants:
        path = ctx.out / "coreml" / f"{lm.name}-{variant}.mlpackage"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = coreml.save(coreml.compress(ml, variant, e.coreml_min_weight_elements), path, {
            "model": lm.name, "variant": variant, "design": how, "tokenizer": "teacher tokenizer + vocab_map.json",
            "max_positions": cfg.lm.max_cache})
        out.append({"model": lm.name, "variant": variant, "format": "coreml", "design": how, "size_bytes": size,
                    "path": str(path.relative_to(ctx.out)), "torch_check": check,
                    "coreml_predict": "ran" if can_predict else f"skipped: {why}"})
    return out


def stage_bench(ctx: StageContext) -> dict:
    """Time to first token (lm.bench_prompt_tokens prompt) and decode tokens/s at batch 1 for teacher,
    student and LSTM on each target; writes bench/results.json (shared schema) and bench.md."""
    from eval.bench import decode_targets, decode_threads, measure_decode, measure_decodes
    from eval.machine import OtherLoad, machine_info, record_load
    from eval.rows import skip
    from eval.table import markdown
    from pipeline.manifest import library_versions

    cfg, lmc = ctx.cfg, ctx.cfg.lm
    started, others = time.time(), OtherLoad()
    targets, skipped = decode_targets(cfg.bench.targets)
    qdir, edir = ctx.upstream("quantize"), ctx.upstream("export")
    files = {(r["model"], r["variant"], "onnx"): (qdir / r["path"], r)
             for r in json.loads((qdir / "onnx_rows.json").read_text())}
    files |= {(r["model"], r["variant"], "ort"): (edir / r["path"], r)
              for r in json.loads((edir / "exports.json").read_text())["ort"]}
    load = functools.cache(lambda name: load_lm(lm_folder(ctx, name), name))  # each model once
    rows = []
    # desktop-gpu's generations are timed after the other targets, every file's in the same alternating rounds:
    # one GPU file after another, drift on the machine lands on one file alone (eval/bench.py GPU_ROUNDS)
    gpu_jobs: dict[tuple[int, str], tuple] = {}
    for r in json.loads((ctx.upstream("eval") / "perplexity.json").read_text()):  # the PyTorch checkpoints
        lm = load(r["model"])[0]
        why = "generation is benchmarked through ONNX Runtime (.onnx / .ort rows)"
        rows.append({**{k: r[k] for k in ("model", "variant", "format", "perplexity", "params",
                                          "non_embedding_params", "size_bytes")},
                     "flops_per_seq": _flops(lm, lmc.bench_prompt_tokens),
                     "latency": {t: skip(why) for t in [*(t.name for t in targets), *skipped]},
                     "generation": {t: skip(why) for t in [*(t.name for t in targets), *skipped]}})
    @functools.cache  # per model, not per file: its files share the prompt, and the test split is tokenized once
    def prompt_of(name: str) -> list[int]:
        lm, tok = load(name)
        # prompt + decode tokens fit the students' lm.max_cache positions: checked when the config loaded
        # from the test windows run together (as the search's from validation's): one window holds only
        # lm.context_length + 1 tokens, and a longer lm.bench_prompt_tokens was timed on that silently
        prompt_t = np.concatenate(list(held_out_windows(ctx, tok)))[: lmc.bench_prompt_tokens].tolist()
        if len(prompt_t) < lmc.bench_prompt_tokens:  # a test split with fewer windows than lm.eval_windows
            raise PipelineError(f"the bench times a prompt of lm.bench_prompt_tokens = {lmc.bench_prompt_tokens} "
                                f"tokens, but the test split's held-out windows hold {len(prompt_t)}: set "
                                f"lm.bench_prompt_tokens <= {len(prompt_t)}, or give a larger test split")
        return lm.to_model_ids(torch.tensor(prompt_t)).tolist()

    for (name, variant, fmt), (path, src) in files.items():
        lm, prompt = load(name)[0], prompt_of(name)
        row = {"model": name, "variant": variant, "format": fmt, "file": str(path.relative_to(ctx.run_dir)),
               "perplexity": src.get("perplexity"), "params": src.get("params"), "size_bytes": src["size_bytes"],
               "flops_per_seq": _flops(lm, lmc.bench_prompt_tokens), "latency": {}, "generation": {}}
        if "greedy_check" in src or "check_vs_onnx" in src:
            row["check"] = src.get("greedy_check") or src.get("check_vs_onnx")
        for t in targets:
            chosen = next((f for f in t.formats if (name, variant, f) in files), None)
            why = (f"{t.name} runs the .{chosen} file of this model" if chosen != fmt
                   else t.why_not if t.variants and variant not in t.variants else None)
            if why is not None:
                row["generation"][t.name], row["latency"][t.name] = skip(why), skip(why)
                continue
            try:
                runner = ort_lm(path, lm, decode_threads(t), t.providers, t.bind_device)
                if t.name == "desktop-gpu":  # timed with the other GPU files, in alternating rounds (below)
                    gpu_jobs[(len(rows), t.name)] = (runner, prompt)
                    row["generation"][t.name], row["latency"][t.name] = {"status": "pending"}, {"status": "pending"}
                    continue
                stats = measure_decode(runner, prompt, lmc.bench_decode_tokens, lmc.bench_iterations)
            except Exception as e:  # e.g. a CUDA provider that lists itself but finds no GPU: say so in the row
                _failed(row, t.name, e)
                continue
            _timed(row, t.name, stats, len(prompt))
        for name_t, reason in skipped.items():
            row["generation"][name_t], row["latency"][name_t] = skip(reason), skip(reason)
        rows.append(row)
    if gpu_jobs:
        t0 = time.perf_counter()
        stats, errors = measure_decodes(gpu_jobs, lmc.bench_decode_tokens, lmc.bench_iterations)
        log.info("[bench] desktop-gpu: %d files decoded in %d alternating rounds (%.1f s)", len(gpu_jobs),
                 lmc.bench_iterations, time.perf_counter() - t0)
        for (i, target), job in gpu_jobs.items():
            if (i, target) in errors:
                _failed(rows[i], target, errors[(i, target)])
            else:
                _timed(rows[i], target, stats[(i, target)], len(job[1]))
        gpu_jobs.clear()  # the GPU sessions go before the machine's peaks are probed
    machine = machine_info(sorted({decode_threads(t) for t in targets}))
    record_load(machine, others)
    result = {"machine": machine,
              "versions": library_versions(), "task": TASK.name, "quality_metric": TASK.quality,
              "threads": {t.name: decode_threads(t) for t in targets},
              "targets": {t.name: {"runtime": "onnxruntime", "provider": t.providers[0],
                                   "threads": decode_threads(t), "precision": "as the file (fp32 / int8)",
                                   "formats": list(t.formats), "proxy": t.proxy, "description": t.note}
                          for t in targets},
              # the report's plan keys; generation times whole generations, so no per-point time limit
              "plan": {"headline_length": lmc.bench_prompt_tokens, "seq_lengths": [lmc.bench_prompt_tokens],
                       "decode_tokens": lmc.bench_decode_tokens, "warmup": 1, "iterations": lmc.bench_iterations,
                       "min_iterations": lmc.bench_iterations, "max_seconds_per_point": None, "throughput_batch": 1,
                       "sweep_variants": [], "npu_device": cfg.bench.npu_device,
                       # desktop-gpu: one generation of every file per round, in alternating order
                       "gpu_rounds": lmc.bench_iterations,
                       "inputs": f"the first {lmc.bench_prompt_tokens} tokens of the held-out test windows "
                                 f"(latency = time to first token), then {lmc.bench_decode_tokens} greedy decode "
                                 f"steps with the KV cache / LSTM state, batch 1"},
              "seconds": {"total": round(time.time() - started, 1)}, "rows": rows}
    for fname in ("results.json", "latency.json"):  # latency.json: what the report stage reads
        (ctx.out / fname).write_text(json.dumps(result, indent=2))
    flat = [{"model": r["model"], "variant": r["variant"], "format": r["format"], "perplexity": r["perplexity"],
             "size_bytes": r["size_bytes"], "target": t, **{k: g.get(k) for k in ("ttft_ms", "decode_tokens_per_s")}}
            for r in rows for t, g in r["generation"].items() if "ttft_ms" in g]
    table = markdown(flat, ["model", "variant", "format", "target", "perplexity", "ttft_ms", "decode_tokens_per_s",
                            "size_bytes"])
    (ctx.out / "bench.md").write_text(table)
    print("\n" + table)
    return {"rows": len(rows), "decode_speedup_vs_teacher": _speedups(rows)}


def _failed(row: dict, target: str, e: Exception) -> None:
    from eval.bench import failed_entry

    failed = failed_entry(row, target, e)
    row["generation"][target], row["latency"][target] = failed, dict(failed)


def _timed(row: dict, target: str, stats: dict, prompt_tokens: int) -> None:
    row["generation"][target] = stats
    row["latency"][target] = {str(prompt_tokens): {
        "p50_ms": stats["ttft_p50_ms"], "p90_ms": stats["ttft_p90_ms"], "p99_ms": stats["ttft_p99_ms"],
        "mean_ms": stats["ttft_mean_ms"], "iterations": stats["iterations"], "what": "time to first token"}}


def _flops(lm, n: int) -> int:
    from eval.flops import decoder_flops, lstm_lm_flops

    return lstm_lm_flops(lm.model.config, n) if lm.kind == "lstm" else decoder_flops(lm.model, n)


def _speedups(rows: list[dict]) -> dict:
    """Decode tokens/s of each row over the fp32 teacher's, per target."""
    base = {t: g["decode_tokens_per_s"] for r in rows if r["model"] == "teacher" and r["variant"] == "fp32"
            for t, g in r["generation"].items() if "decode_tokens_per_s" in g}
    return {f"{r['model']}/{r['variant']}/{r['format']}@{t}": g["decode_tokens_per_s"] / base[t]
            for r in rows for t, g in r["generation"].items() if "decode_tokens_per_s" in g and t in base}
