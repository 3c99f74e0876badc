"""Measure every (model, variant, format) row on every configured target. Two workloads:

- the length sweep (classification): reads the rows the earlier stages wrote (eval: PyTorch, quantize:
  ONNX, export: .ort and Core ML, plus the Optimum peer) and returns them with `latency` by target, `npu`
  readiness where it applies and FLOPs, ready for the report. What cannot run is a skip entry with its
  reason, never a missing key.
- prompt + decode (generation): time to first token for a fixed-length prompt and decode tokens/s at
  batch 1 through ONNX Runtime, the KV cache (decoders) or state (LSTM) carried between steps as an app
  would (measure_decode, at the end of this file).
"""
from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eval import latency as L
from eval.browser import is_browser
from eval.browser_bench import measure_browser
from eval.flops import row_flops
from eval.npu import check_onnx, coreml_readiness, fix_shapes, get_device, load_devices, roofline_ms
from eval.peaks import add_gflops, row_peak
from eval.plan import Point, plan_point
from eval.rows import failure, p50, row_key, skip
from eval.targets import TARGETS, Target, coreml_runtime, cuda_backend, get_target, mobile_provider, ort_providers, \
    resolved_threads, unavailable
from pipeline.errors import PipelineError, lookup

log = logging.getLogger("pocketformer")

# desktop-gpu: batch-1 and batch-32 calls of these models are launch-bound on a GPU, and on an H100 VM their
# p50 drifted up to 2x in phases of a few seconds, which a median of fresh sessions did not settle
# (docs/results/2026-11-26-desktop-gpu-h100-recheck.md). So every desktop-gpu point of every row is timed after
# the other targets, in this many interleaved rounds, and a phase hits every file alike (as the head-to-head
# does for the CPU targets, eval/paired.py).
GPU_ROUNDS = 10


NPU_RUNTIME_MISSING = ("no NPU runtime on this machine (NNAPI needs Android, the Core ML Neural Engine needs "
                       "macOS/iOS)")


@dataclass
class Models:
    """Where each model's PyTorch folder and tokenizer live."""

    folders: dict[str, Path]
    tokenizers: dict[str, object]

    def max_positions(self, model: str) -> int | None:
        path = self.folders[model] / "config.json"
        return json.loads(path.read_text()).get("max_position_embeddings") if path.is_file() else None


def _read_rows(path: Path, what: str) -> list[dict]:
    if not path.is_file():
        raise PipelineError(f"{path} is missing: run the {what} stage first")
    rows = json.loads(path.read_text())
    return rows["rows"] if isinstance(rows, dict) else rows


def collect_eval_rows(run_dir: Path) -> list[dict]:
    """The eval stage's rows (the PyTorch models: accuracy, parameter counts), `_path` None."""
    return [dict(r, _path=None) for r in _read_rows(run_dir / "eval" / "accuracy.json", "eval")]


def collect_rows(run_dir: Path) -> list[dict]:
    """Rows of eval (PyTorch), quantize (ONNX) and export (.ort, Core ML), with `_path` set to the file.
    An .ort row without its own accuracy takes its ONNX source's (the export stage scores lossy .ort files
    itself; lossless ones carry their source's, whose logits they match)."""
    rows = collect_eval_rows(run_dir)
    for stage in ("quantize", "export"):
        for r in _read_rows(run_dir / stage / "variants.json", stage):
            rows.append(dict(r, _path=run_dir / r["file"]))
    npu = run_dir / "quantize" / "npu.json"  # static per-length files of an npu student (pipeline/stages_npu.py)
    if npu.is_file():
        rows += [dict(r, _path=run_dir / r["file"], _run_dir=run_dir) for r in json.loads(npu.read_text())]
    onnx = {(r["model"], r["variant"]): r for r in rows if r["format"] == "onnx"}
    # every ONNX / .ort variant of a model derives from its fp32 export: [CLS]-only last layer or not
    cls_only = {m for (m, v), r in onnx.items() if v == "fp32" and (r.get("details") or {}).get("cls_only_last_layer")}
    for r in rows:
        r["_cls_only"] = r["format"] in ("onnx", "ort") and r["model"] in cls_only
        src = onnx.get((r["model"], r["variant"]))
        if r["format"] == "ort" and r.get("accuracy") is None and src and src.get("accuracy") is not None:
            r.update(accuracy=src["accuracy"], macro_f1=src.get("macro_f1"), accuracy_from="onnx")
    return rows


def missing_rows(rows: list[dict], models: list[str], targets: list[Target],
                 known_skips: dict[tuple[str, str], str]) -> list[dict]:
    """Rows for what a target expects but no earlier stage made (with the stage's reason when it gave one)."""
    have = {(r["model"], r["format"], r["variant"]) for r in rows}
    out: dict[tuple[str, str, str], dict] = {}
    for t in targets:
        for fmt, variant in t.expects:
            for m in models:
                if (m, fmt, variant) in have:
                    continue
                why = known_skips.get((m, variant)) or "the quantize/export settings did not ask for it"
                row = out.setdefault((m, fmt, variant), {
                    "model": m, "variant": variant, "format": fmt, "file": None, "accuracy": None,
                    "macro_f1": None, "size_bytes": None, "missing": True, "_path": None,
                    "_reason": f"no {fmt} {variant} file for {m}: {why}"})
                row.setdefault("_targets", []).append(t.name)
    return list(out.values())


def _graph_check(path: Path, n: int, formula: int) -> dict:
    """The formula against MatMul/Gemm/LSTM FLOPs counted in the exported graph (the head and a few small
    products make the graph count a little higher)."""
    from eval.flops import graph_flops

    try:
        g = graph_flops(path, n)
    except Exception as e:  # a graph shape inference cannot follow: the formula stands alone
        return {"seq_len": n, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"seq_len": n, "graph_flops": g, "ratio_to_formula": g / formula}


class Bench:
    def __init__(self, cfg, models: Models, texts: list[str], machine: dict, work: Path):
        self.b = cfg.bench
        self.models = models
        self.texts = texts
        self.machine = machine
        self.work = work  # scratch files (fixed-shape copies) go here
        self.plan = L.Plan(self.b.warmup, self.b.iterations, self.b.max_seconds_per_point, self.b.min_iterations)
        # a batch-32 call is 32x the work: fewer calls, same time cap
        self.tplan = L.Plan(1, max(3, self.b.iterations // 5), self.b.max_seconds_per_point, 3)
        self.device = get_device(load_devices(self.b.devices_file), self.b.npu_device)
        self._streams: dict[str, np.ndarray] = {}
        self.browser: dict = {}  # browser targets' entries, all measured in one Chromium run (eval/browser_bench.py)
        # desktop-gpu entries handed out before they are timed (time_deferred fills them in place)
        self.deferred: list[tuple[dict, Target, dict, Point]] = []

    def _stream(self, model: str) -> np.ndarray:
        if model not in self._streams:
            need = max(self.b.seq_lengths) * self.b.throughput_batch
            self._streams[model] = L.token_stream(self.models.tokenizers[model], self.texts, need)
        return self._streams[model]

    def inputs(self, model: str, n: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
        tok = self.models.tokenizers[model]
        return L.make_batch(self._stream(model), n, batch, tok.cls_token_id, tok.sep_token_id)

    def runner(self, t: Target, row: dict, threads: int):
        """(bind(ids, mask) -> call, provider used)."""
        if row["format"] == "pytorch":
            import torch

            from distill.models import load_model

            torch.set_num_threads(threads)
            m = load_model(self.models.folders[row["model"]], row["model"])
            if t.name == "desktop-gpu":
                return L.torch_runner(m.model, "cuda", torch.float16), "pytorch cuda fp16"
            return L.torch_runner(m.model), f"pytorch eager cpu ({threads} threads)"
        providers = {"desktop-gpu": ["CUDAExecutionProvider"],
                     "mobile-cpu": list(dict.fromkeys([mobile_provider(), "CPUExecutionProvider"]))
                     }.get(t.name, ["CPUExecutionProvider"])
        sess = L.ort_session(row["_path"], threads, providers)
        if t.name == "desktop-gpu":
            from export.ort_session import refuse_fallback

            refuse_fallback(sess, "CUDAExecutionProvider")
        return L.ort_runner(sess), sess.get_providers()[0]

    def measure(self, t: Target, row: dict, point: Point) -> dict:
        if t.name == "desktop-gpu":  # timed with every other row's GPU points, in rounds (GPU_ROUNDS)
            entry = {"status": "pending", "reason": "timed after the other targets, in interleaved rounds"}
            self.deferred.append((entry, t, row, point))
            return entry
        threads, points = resolved_threads(t), self.plan_points(point)
        with L.PeakRSS() as rss:
            bind, provider = self.runner(t, row, threads)
            samples = {key: L.time_calls(bind(*self.inputs(row["model"], n, batch)), plan)
                       for key, (n, batch, plan) in points.items()}
        return {**self.entries(t, row, point, points, samples, threads),
                "session": {"provider": provider, "threads": threads, **rss.report()}}

    def plan_points(self, point: Point) -> dict[str, tuple[int, int, L.Plan]]:
        """key -> (tokens, batch, plan) for one row's points on a target."""
        out = {str(n): (n, 1, self.plan) for n in point.lengths}
        if point.throughput:
            out[f"throughput_b{self.b.throughput_batch}"] = (self.b.headline_length, self.b.throughput_batch,
                                                             self.tplan)
        return out

    def entries(self, t: Target, row: dict, point: Point, points: dict, samples: dict, threads: int) -> dict:
        """One row's entries on a target: each point's summary of its timed calls (samples: key -> call times),
        with its FLOP rate against the machine's peak, then the lengths skipped and why."""
        peak = row_peak(row["variant"], row["format"], t.name, self.machine, threads)
        out: dict = {}
        for key, (n, batch, _) in points.items():
            e = L.summarize(samples[key])
            if key.startswith("throughput"):
                e.update(batch=batch, seq_len=n, sequences_per_s=batch / (e["p50_ms"] / 1e3))
            add_gflops(e, row_flops(self.models.folders, row, n), batch, peak)
            out[key] = e
        return {**out, **{n: skip(why) for n, why in point.skipped_lengths.items()}}

    def time_deferred(self) -> None:
        """Every deferred desktop-gpu entry: its sessions opened one at a time (memory counted for each), then
        all their points timed together in GPU_ROUNDS interleaved rounds."""
        if not self.deferred:
            return
        t0 = time.perf_counter()
        calls, jobs = {}, []
        for entry, t, row, point in self.deferred:
            threads, points = resolved_threads(t), self.plan_points(point)
            mine = {}
            try:
                with L.PeakRSS() as rss:
                    bind, provider = self.runner(t, row, threads)
                    for key, (n, batch, plan) in points.items():
                        fn = bind(*self.inputs(row["model"], n, batch))
                        fn()  # the first call allocates the session's buffers: counted with it
                        mine[(id(entry), key)] = (fn, plan)
            except Exception as e:  # one broken file must not hide every other row's numbers
                _fail(entry, row, t, e)
                continue
            calls.update(mine)
            jobs.append((entry, t, row, point, points, {"provider": provider, "threads": threads, **rss.report(),
                                                         "rounds": GPU_ROUNDS}))
        samples, failed = L.time_interleaved(calls, GPU_ROUNDS)
        for entry, t, row, point, points, session in jobs:
            errors = [failed[(id(entry), k)] for k in points if (id(entry), k) in failed]
            if errors:
                _fail(entry, row, t, errors[0])
                continue
            timed = {key: samples[(id(entry), key)] for key in points}
            out = self.entries(t, row, point, points, timed, session["threads"])
            entry.clear()
            entry.update(out, session=session)
        log.info("[bench] desktop-gpu: %d files timed in %d interleaved rounds (%.1f s)", len(jobs), GPU_ROUNDS,
                 time.perf_counter() - t0)
        self.deferred.clear()

    def readiness(self, row: dict) -> dict:
        """ORT's usability checker on an ONNX row at [1, headline length]: the static NPU files as written
        (the quantize stage checked them already), any other file on a fixed-shape copy."""
        L = self.b.headline_length
        if row["format"] == "onnx-npu":
            stored = row.get("readiness", {}).get(str(L))
            if stored is None:
                return {"onnx": {"error": f"no NPU file at the headline length {L} (quantize.npu_lengths = "
                                          f"{row.get('lengths')})"}}
            return {"onnx": stored}
        fixed = fix_shapes(row["_path"], self.work / "fixed" / f"{row['model']}-{row['variant']}.onnx", 1, L)
        return {"onnx": {"fixed_shape": [1, L], **check_onnx(fixed)}}

    def npu_entry(self, row: dict, point: Point) -> tuple[dict, dict]:
        """(latency entry, readiness) for a row on edge-npu."""
        if row["format"] == "coreml":
            readiness = {"coreml": coreml_readiness(row["_path"])}
            precision = "fp16"  # int8 / 4-bit Core ML variants compress weights; compute stays fp16
            runtime = coreml_runtime()
        else:
            readiness = self.readiness(row)
            precision = "int8"
            runtime = bool({"NnapiExecutionProvider", "CoreMLExecutionProvider"} & set(ort_providers()))
        if runtime:  # the static NPU files, fixed-shape copies of an .onnx, or Core ML on macOS
            measure = {"onnx-npu": self._measure_npu_files, "onnx": self._measure_npu_onnx,
                       "coreml": self._measure_coreml}
            return measure[row["format"]](row, point), readiness
        d = self.device
        # an estimate costs nothing: every length the model takes, not only the measured ones
        limit = self.models.max_positions(row["model"])
        lengths = [n for n in self.b.seq_lengths if limit is None or n <= limit]
        est = {str(n): roofline_ms(row_flops(self.models.folders, row, n) or 0, row.get("size_bytes") or 0, d, precision)
               for n in lengths}
        entry = {"status": "not measured here", "reason": NPU_RUNTIME_MISSING,
                 "estimate": {"kind": "roofline lower bound (ESTIMATE, not a measurement)", "device": d["id"],
                              "device_name": d["name"], "precision": precision, "source": d["source"],
                              "by_length": est}}
        return entry, readiness

    def _measure_npu_onnx(self, row: dict, point: Point) -> dict:
        """NPU providers want fixed shapes: one fixed-shape copy and session per length."""
        available = ort_providers()
        provider = "NnapiExecutionProvider" if "NnapiExecutionProvider" in available else "CoreMLExecutionProvider"
        out: dict = {}
        for n in point.lengths:
            path = fix_shapes(row["_path"], self.work / "fixed" / f"{row['model']}-{row['variant']}-{n}.onnx", 1, n)
            sess = L.ort_session(path, 1, [provider, "CPUExecutionProvider"])
            out[str(n)] = L.summarize(L.time_calls(L.ort_runner(sess)(*self.inputs(row["model"], n, 1)), self.plan))
        out["session"] = {"provider": provider, "threads": 1}
        return out

    def _measure_npu_files(self, row: dict, point: Point) -> dict:
        """The static NPU files, each on the provider it was made for (the token lookup of an
        embeddings-in file runs on the CPU before the timed call, as the app does it)."""
        from export.npu import get_npu_variant

        v = get_npu_variant(row["variant"].removeprefix("npu-"))
        provider = {"nnapi": "NnapiExecutionProvider"}.get(v.provider, "CoreMLExecutionProvider")
        if provider not in ort_providers():
            return skip(f"{provider} is not in this onnxruntime build")
        run_dir = row["_run_dir"]
        lookup = L.ort_session(run_dir / row["lookup"], 1, ["CPUExecutionProvider"]) if row.get("lookup") else None
        out: dict = {}
        for n in point.lengths:
            sess = L.ort_session(run_dir / row["files"][str(n)], 1, [provider, "CPUExecutionProvider"])
            ids, mask = (a.astype(np.int32) for a in self.inputs(row["model"], n, 1))
            feed = {"input_ids": ids, "attention_mask": mask} if lookup is None else \
                {"embeddings": lookup.run(["embeddings"], {"input_ids": ids})[0], "attention_mask": mask}
            out[str(n)] = L.summarize(L.time_calls(lambda: sess.run(["logits"], feed), self.plan))
        out["session"] = {"provider": provider, "threads": 1}
        return out

    def _measure_coreml(self, row: dict, point: Point) -> dict:
        """macOS only (not exercised on Linux): Core ML with the Neural Engine allowed."""
        import coremltools as ct

        ml = ct.models.MLModel(str(row["_path"]), compute_units=ct.ComputeUnit.CPU_AND_NE)
        out: dict = {}
        for n in point.lengths:
            ids, mask = self.inputs(row["model"], n, 1)
            x = {"input_ids": ids.astype(np.int32), "attention_mask": mask.astype(np.int32)}
            try:
                out[str(n)] = L.summarize(L.time_calls(lambda: ml.predict(x), self.plan))
            except Exception as e:  # a length outside the package's enumerated shapes
                out[str(n)] = {"status": "failed", "reason": f"{type(e).__name__}: {str(e)[:200]}"}
        out["session"] = {"provider": "coreml CPU_AND_NE", "threads": 0}
        return out

    def row_target(self, t: Target, row: dict) -> tuple[dict, dict | None]:
        """(latency[target] for row, npu readiness or None)."""
        if is_browser(t):
            return self.browser[(t.name, row_key(row))], None
        if row.get("missing"):
            return skip(row["_reason"] if t.name in row["_targets"] else
                        f"{t.name} does not take this file (and it was not made)"), None
        if row.get("status") == "failed":  # recorded with its numbers by its stage; never timed or shipped
            return skip(f"not timed: the file failed its check ({_check_numbers(row)})"), None
        if why := unavailable(t):
            return skip(why), None
        if t.name == "qnn-htp":  # the compile stage's verdicts (compile/qnn.json) are its rows, in the NPU section
            return {"status": "not measured here", "reason": "compiled for each chip and run on QAIRT's x86 HTP "
                    "emulator (the compile stage): verdicts and numerics, no phone latency"}, None
        point = plan_point(t, row, self.b.seq_lengths, self.b.headline_length, self.b.sweep_variants,
                           self.models.max_positions(row["model"]))
        if isinstance(point, str):
            if t.name == "edge-npu" and row["format"] == "onnx" and not row["variant"].startswith("optimum-") \
                    and row["_path"]:
                # not timed there, but the report's NPU table shows every variant's readiness
                try:
                    return skip(point), self.readiness(row)
                except Exception as e:  # a file the checker cannot read: say so in its row, keep the others
                    return skip(point), {"onnx": {"error": f"{type(e).__name__}: {e}"[:300]}}
            return skip(point), None
        if row["format"] != "pytorch" and (row["_path"] is None or not Path(row["_path"]).exists()):
            return skip(f"file {row.get('file')} is missing"), None
        if t.name == "desktop-gpu" and row["format"] == "onnx" and cuda_backend() != "ort-cuda":
            return skip("onnxruntime-gpu is not installed; the GPU runs PyTorch"), None
        try:
            if t.name == "edge-npu":
                return self.npu_entry(row, point)
            return self.measure(t, row, point), None
        except Exception as e:  # one broken file must not hide every other row's numbers
            return failed_entry(row, t.name, e), None


def failed_entry(row: dict, target: str, e: Exception) -> dict:
    """The entry of a row that failed on a target, logged as a warning (the other rows go on)."""
    log.warning("[bench] %s %s %s on %s failed: %s", row["model"], row["variant"], row["format"], target, e)
    return failure(e)


def _fail(entry: dict, row: dict, t: Target, e: Exception) -> None:
    """failed_entry in place of an entry already handed out (desktop-gpu's, timed after the other targets)."""
    entry.clear()
    entry.update(failed_entry(row, t.name, e))


def _check_numbers(row: dict) -> str:
    c = row.get("check") or {}
    if c.get("kind") == "argmax_agreement" and c.get("value") is not None:
        return f"argmax agreement {c['value']:.1%} < {c['tolerance']:.1%}"
    return c.get("reason", "see its variants.json")


def _log_line(r: dict, targets: list[str], length: int) -> str:
    """The bench log's word on a row: its host-cpu (else mobile-cpu) p50, else the first target that timed it,
    else why the first target did not (the report has every target's reason)."""
    cpu = [t for t in ("host-cpu", "mobile-cpu") if t in targets]
    order = cpu + [t for t in targets if t not in cpu]
    for t in order:
        if (ms := p50(r, t, length)) is not None:
            return f"p50 {ms:.2f} ms at {length}" + ("" if t in cpu else f" on {t}")
    if not order:
        return "-"
    entry = r["latency"].get(order[0]) or {}
    why = entry.get("reason") or entry.get("error") or entry.get("status") or "no entry"
    return f"not timed on {order[0]}: {why.split('; ')[0]}"


def run_bench(cfg, rows: list[dict], models: Models, texts: list[str], machine: dict, work: Path,
              known_skips: dict[tuple[str, str], str] | None = None
              ) -> tuple[list[dict], list[dict], list[dict], dict[str, float]]:
    """(every row with latency (by target), npu readiness and FLOPs filled in; the head-to-head
    comparisons of our student with Optimum's; the int8 students against the fp32 teacher in interleaved
    rounds: eval/paired.py; the seconds each part took: "browser" (the Chromium page and the Node cross-check
    for every browser target), each other target's name (its sweep; desktop-gpu's interleaved rounds), "flops"
    (FLOP counts and graph checks), "head_to_head" and "teacher_rounds"; parts under 0.05 s left out)."""
    from eval.paired import head_to_head, rounds_onto_rows, teacher_rounds

    b = cfg.bench
    targets = [get_target(name) for name in b.targets]
    bench = Bench(cfg, models, texts, machine, work)
    rows = rows + missing_rows(rows, list(models.folders), targets, known_skips or {})
    spent: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(phase: str) -> None:  # the seconds since the last lap go to phase
        nonlocal clock
        now = time.perf_counter()
        spent[phase] = spent.get(phase, 0.0) + now - clock
        clock = now

    bench.browser = measure_browser(bench, targets, rows)
    lap("browser")
    out = []
    for row in rows:
        t0 = time.perf_counter()
        r = {k: v for k, v in row.items() if not k.startswith("_")}
        folder = models.folders.get(row["model"])
        r["flops_by_length"] = {str(n): row_flops(models.folders, row, n) for n in b.seq_lengths} if folder else {}
        r["flops_per_seq"] = r["flops_by_length"].get(str(b.headline_length))
        if row["format"] == "onnx" and row["variant"] == "fp32" and row["_path"] and r["flops_per_seq"]:
            r["flops_graph_check"] = _graph_check(row["_path"], b.headline_length, r["flops_per_seq"])
        r["latency"] = {}
        lap("flops")  # since the last target's lap: the row's FLOP counts and graph check
        for t in targets:
            entry, npu = bench.row_target(t, row)
            lap(t.name)
            r["latency"][t.name] = entry
            if npu is not None:
                r["npu"] = npu
        log.info("[bench] %-15s %-21s %-7s %s (%.1f s)", r["model"], r["variant"], r["format"],
                 _log_line(r, [t.name for t in targets], b.headline_length), time.perf_counter() - t0)
        out.append(r)
    bench.time_deferred()
    lap("desktop-gpu")
    paired = head_to_head(bench, rows, targets, b.head_to_head_rounds)
    lap("head_to_head")
    vs_teacher = teacher_rounds(bench, rows, targets, b.head_to_head_rounds)
    for entry in vs_teacher:
        rounds_onto_rows(out, entry)
    lap("teacher_rounds")
    return out, paired, vs_teacher, {k: round(v, 1) for k, v in spent.items() if v >= 0.05}


# --- the prompt + decode workload (generation models) ------------------------------------------------
# Targets: host-cpu (ONNX graphs, every core), mobile-cpu (the .ort files, 1 thread: on this machine a
# host proxy for a phone's big core; ORT's PyPI wheel has no XNNPACK) and desktop-gpu (ONNX Runtime's CUDA
# provider, where onnxruntime-gpu and a GPU are present), with the threads of the shared registry
# (eval/targets.py). The NPU and browser targets are skipped for generation with a reason.

@dataclass(frozen=True)
class DecodeTarget:
    name: str  # a key of eval.targets.TARGETS (its threads are used)
    formats: tuple[str, ...]  # preferred first: a model without the first is run from the next
    note: str
    proxy: str = ""  # non-empty: measured here as a stand-in for another device, and why
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    bind_device: str | None = None  # IO binding: the KV cache / LSTM state stays on this device between steps
    variants: tuple[str, ...] = ()  # only these variants run (() = all); the others are skipped with why_not
    why_not: str = ""


DECODE_TARGETS = {
    "host-cpu": DecodeTarget("host-cpu", ("onnx",), "ONNX Runtime CPU, all cores"),
    "mobile-cpu": DecodeTarget("mobile-cpu", ("ort", "onnx"), "ONNX Runtime CPU, 1 thread, .ort files "
                               "(the teacher, which has no .ort, from its .onnx)",
                               "host x86 core standing in for a phone CPU core (no XNNPACK in this wheel)"),
    "desktop-gpu": DecodeTarget("desktop-gpu", ("onnx",), "ONNX Runtime CUDA provider, fp32 .onnx files, the KV "
                                "cache kept on the GPU between steps (IO binding)",
                                providers=("CUDAExecutionProvider",), bind_device="cuda", variants=("fp32",),
                                why_not="int8 ONNX kernels are CPU kernels: desktop-gpu runs the fp32 files"),
}
DECODE_SKIPPED = {
    "edge-npu": "generation with a growing KV cache has dynamic shapes that NPU providers reject; not measured",
    **dict.fromkeys(("browser-wasm", "browser-wasm-mt"),
                    "the browser targets time the classifier files; decoding in the browser is not benchmarked"),
}


def decode_missing(name: str) -> str | None:
    """Why a decode target cannot run on this machine (None: it can). desktop-gpu decodes through ONNX
    Runtime only: a GPU that only PyTorch can reach is not enough."""
    if name != "desktop-gpu" or (backend := cuda_backend()) == "ort-cuda":
        return None
    if backend == "torch-cuda":
        return ("onnxruntime-gpu is not installed (PyTorch sees a GPU, but generation is timed through ONNX "
                "Runtime: install onnxruntime-gpu in place of onnxruntime); not measured")
    return f"{unavailable(TARGETS[name])}; not measured"


def decode_targets(names: list[str]) -> tuple[list[DecodeTarget], dict[str, str]]:
    """(targets the decode workload runs on, {target: why it is skipped}) for bench.targets."""
    run, skip = [], {}
    for n in names:
        lookup({**DECODE_TARGETS, **DECODE_SKIPPED}, n, f"bench target '{n}'")
        why = DECODE_SKIPPED.get(n) or decode_missing(n)
        if why:
            skip[n] = why
        else:
            run.append(DECODE_TARGETS[n])
    return run, skip


def decode_threads(t: DecodeTarget) -> int:
    return resolved_threads(TARGETS[t.name])


def measure_decode(runner, prompt: list[int], decode_tokens: int, iterations: int) -> dict:
    """Warm-up once, then `iterations` generations: TTFT (prefill + first token) and decode rate.
    runner.generate(prompt, n, timings=dict) fills ttft_s and decode_s."""
    stats, failed = measure_decodes({0: (runner, prompt)}, decode_tokens, iterations)
    if failed:
        raise failed[0]
    return stats[0]


def measure_decodes(jobs: dict, decode_tokens: int, iterations: int) -> tuple[dict, dict]:
    """measure_decode for several (runner, prompt) jobs at once: each warmed up once, then `iterations`
    rounds of one generation each, in alternating order, so drift on the machine hits every file alike (the
    desktop-gpu target; GPU_ROUNDS). Returns (key -> stats, key -> the exception a job raised)."""
    ttft: dict = {k: [] for k in jobs}
    rate: dict = {k: [] for k in jobs}
    failed: dict = {}

    def once(k, timings=None):
        try:
            runner, prompt = jobs[k]
            runner.generate(prompt, decode_tokens + 1, timings=timings)
        except Exception as e:  # one broken session must not stop the others
            failed[k] = e
    for k in jobs:
        once(k)
    keys = list(jobs)
    for i in range(iterations):
        for k in (keys if i % 2 == 0 else keys[::-1]):
            if k in failed:
                continue
            t: dict = {}
            once(k, t)
            if k not in failed:
                ttft[k].append(t["ttft_s"] * 1e3)
                rate[k].append(decode_tokens / t["decode_s"])
    out = {}
    for k in jobs:
        if k in failed:
            continue
        s = L.summarize(ttft[k])
        out[k] = {"ttft_ms": s["p50_ms"], "decode_tokens_per_s": statistics.median(rate[k]),
                  "prompt_tokens": len(jobs[k][1]), "decode_tokens": decode_tokens, "iterations": iterations,
                  **{f"ttft_{key}": s[key] for key in ("p50_ms", "p90_ms", "p99_ms", "mean_ms")}}
    return out, failed
