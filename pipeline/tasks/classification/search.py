"""The classification side of the student search (pipeline/search.py runs the study): measuring one candidate
(a transformer student or a distilled LSTM / GRU) on a target before any training, and distilling a feasible
one from the cached teacher logits on a short schedule with its validation accuracy reported per rung. Reads
data/, teacher/model and logits/ of a finished run; never the test split.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import tempfile
from collections import Counter
from functools import cached_property
from pathlib import Path

import numpy as np

from distill import search_space
from distill.search_space import RNN_CELLS, config_keys
from pipeline.config import BaselineSection, StudentSection
from pipeline.data import read_labels
from pipeline.errors import PipelineError
from pipeline.search import MeasurementCache, measurement_basis, rungs
from pipeline.search_checks import check_target

log = logging.getLogger("pocketformer")
VARIANT = "int8-dynamic"  # the file a phone app ships by default; search.variants may add others
STATIC, NPU_FILE = "int8-static", "nnapi-int8"  # search.npu_compile: the files the compile stage compiles
Candidate = StudentSection | BaselineSection  # a [baseline] section: a distilled RNN (distill/search_space.py)


def searcher() -> type:
    """Task.search: the classification candidates class (the interface: pipeline/search.py's docstring)."""
    return Candidates


class Candidates(MeasurementCache):
    """The finished run's teacher, texts and cached logits, loaded once for every trial of a search."""

    METRIC, DIRECTION = "validation_accuracy", "maximize"
    METRIC_NOTE = "validation accuracy (the test split is never read)"
    COST_NOTE = "p50 latency on {target}, ms (batch 1, int8-dynamic)"
    COST_SHORT = "ms p50 on {target}"
    BUDGET_UNIT = "ms"
    MEASURED = ("latency_ms", "size_bytes")

    # --- the task's side of the search (pipeline/search.py) -----------------------------------------
    space = staticmethod(search_space.get_space)  # the classification spaces: get_space's default task
    shape_of = staticmethod(search_space.shape_of)

    @staticmethod
    def check_init(student, teacher_config) -> None:
        """The teacher stage's check that student.init fits the teacher (distill/student.py)."""
        from distill.student import check_init

        check_init(student, teacher_config)

    @staticmethod
    def basis(cfg) -> dict:
        return {}  # the shared basis in pipeline/search.py's study_name is classification's whole one

    @staticmethod
    def over_budget(m: dict, budget_ms: float) -> str:
        return f"latency {m['latency_ms']:.3f} ms > {budget_ms:g} ms"

    @staticmethod
    def apply_best(data: dict, shape: dict, variant: str | None = None) -> None:
        """The best shape into the config dict: [student], or for an LSTM / GRU its [baseline] and
        bundle.model = "lstm_distilled" (the baseline stage trains it; the bundle ships it); with a searched
        variant (several search.variants), bundle.variant = the quantized file it was timed and scored as."""
        if variant:
            data["bundle"] = {**data["bundle"], "variant": variant}
        if shape["arch"] in RNN_CELLS:
            data["baseline"] = {**data["baseline"], **config_keys(shape)}
            data["bundle"] = {**data["bundle"], "model": "lstm_distilled"}
            if "lstm_distilled" not in data["quantize"]["models"]:
                data["quantize"]["models"] = [*data["quantize"]["models"], "lstm_distilled"]
        else:
            data["student"] = {**data["student"], **config_keys(shape)}
            if len(data["distill"].get("layer_map") or []) not in (0, shape["layers"]):
                # the user's map names one teacher layer per layer of their own student: another depth gets the
                # uniform spread, which is what the search trained it with (layer_map_for)
                data["distill"] = {**data["distill"], "layer_map": []}

    def sample(self, trial, space) -> Candidate:
        return search_space.sample_candidate(trial, space, self.cfg.student, self.cfg.baseline)

    @staticmethod
    def section(s: Candidate) -> str:
        return "baseline" if isinstance(s, BaselineSection) else "student"

    def __init__(self, cfg, target: str, cache_path: Path | None):
        from distill.models import load_model
        from pipeline.tasks.classification.train import _distill_set, _xy

        self._load_cache(cfg, cache_path)
        self.target = check_target(target)
        run = cfg.run_dir
        self.labels = read_labels(run / "data")
        self.teacher = load_model(run / "teacher" / "model", "teacher")
        self.texts, self.y, self.teacher_logits = _distill_set(run / "logits", self.labels)
        self.val_texts, self.val_y = _xy(run / "data", "validation", self.labels)
        self.basis = measurement_basis(cfg)
        if not self.val_texts:
            raise PipelineError("the search scores candidates on the validation split, which is empty: raise "
                                "data.validation_fraction (e.g. 0.1)")

    # --- building -----------------------------------------------------------------------------------
    def build(self, s: Candidate, layer_map: list[int] | None = None, attn_eager: bool = False):
        """(a student of shape s (random weights unless s.init says otherwise), vocabulary applied, its layer map:
        layer_map checked, [] / None the uniform spread); for an RNN candidate (the baseline stage's RNN, None)."""
        if isinstance(s, BaselineSection):
            return self.build_rnn(s), None
        from distill.student import build_student, check_layer_map
        from pipeline.tasks.classification.train import _student_embedding

        layer_map = check_layer_map(layer_map or [], s.layers, self.teacher.model.hf.config.num_hidden_layers)
        student = build_student(s, self.teacher.model, self.labels, layer_map, attn_eager=attn_eager)
        _student_embedding(s, student, self.teacher.tokenizer, self.texts)
        return student, layer_map

    def build_rnn(self, b: BaselineSection):
        """The baseline stage's RNN with settings b (its vocabulary map from the distillation texts)."""
        from distill.baseline import build_rnn

        tok = self.teacher.tokenizer
        m = build_rnn(b, len(tok), len(self.labels), tok.pad_token_id or 0)
        if b.vocab == "training":
            from distill.vocab import training_vocab

            vmap, _ = training_vocab(tok, self.texts, self.rnn_length(b), b.vocab_size_max)
            m.restrict_vocab(vmap)
        return m

    def rnn_length(self, b: BaselineSection) -> int:
        """The RNN's input length, as in the baseline stage: baseline.max_length, 0 = teacher.max_length."""
        return b.max_length or self.cfg.teacher.max_length

    def max_length(self, s: Candidate) -> int:
        return self.rnn_length(s) if isinstance(s, BaselineSection) else s.max_length

    def random_copy(self, s: Candidate):
        """A seeded random-weight student of shape s: weights change neither the timing nor what the compiler
        takes."""
        from distill.train import seed_everything

        seed_everything(self.cfg.run.seed)
        random = s if isinstance(s, BaselineSection) else dataclasses.replace(s, init="random")
        return self.build(random)[0]

    # --- measuring ----------------------------------------------------------------------------------
    def cache_key(self, shape: dict, variant: str = VARIANT) -> str:
        import onnxruntime

        return json.dumps({"shape": shape, "variant": variant, "target": self.target.name,
                           "onnxruntime": onnxruntime.__version__, "length": self.length_of(shape),
                           "basis": self.basis}, sort_keys=True)

    def length_of(self, shape: dict) -> int:
        """bench.headline_length, cut to the student's position table (an RNN has none: its max length)."""
        if "max_positions" not in shape:  # an RNN
            return min(self.cfg.bench.headline_length, shape["max_length"] or self.cfg.teacher.max_length)
        return min(self.cfg.bench.headline_length, shape["max_positions"] or max(shape["max_length"], 64))

    def measure(self, s: Candidate, shape: dict, variant: str = VARIANT) -> dict:
        """{latency_ms, size_bytes} of the variant's file (int8-dynamic unless search.variants says more) of a
        random-weight student of this shape on the target (batch 1, the headline length); cached per shape,
        variant, target and onnxruntime version."""
        key = self.cache_key(shape, variant)
        if key in self.cache:
            return {**self.cache[key], "cached": True}
        student = self.random_copy(s)
        with tempfile.TemporaryDirectory() as tmp:
            path = self._variant_file(student, Path(tmp), self.max_length(s), variant)
            out = {"latency_ms": self._time(path, self.length_of(shape)), "size_bytes": path.stat().st_size}
        self.cache[key] = out
        self._save()
        return {**out, "cached": False}

    def compare_latency(self, first: tuple, second: tuple, rounds: int = 9, calls: int = 100) -> dict:
        """p50 of `second` over p50 of `first` (each a (candidate, shape, variant)), their random-weight files
        timed in alternating rounds in one process as tools.compare_files does: one cached measurement can be
        off by tens of percent on a shared machine (a shape read 0.58 ms in one study and 0.39 ms in another),
        the ratio of interleaved rounds is steady. {"ratio", "ratio_range", "p50_ms": [first, second], "rounds",
        "calls_per_round"}."""
        from eval.latency import Plan
        from eval.paired import alternate

        plan = Plan(warmup=10, iterations=calls, max_seconds=1e9, min_iterations=calls)
        with tempfile.TemporaryDirectory() as tmp:
            runs = []
            for i, (s, shape, variant) in enumerate((first, second)):
                path = self._variant_file(self.random_copy(s), Path(tmp) / str(i), self.max_length(s), variant)
                runs.append(self._call(path, self.length_of(shape)))
            res = alternate(runs[1], runs[0], rounds, plan)
        return {"ratio": res["ratio"], "ratio_range": [res["ratio_min"], res["ratio_max"]],
                "p50_ms": [res["peer_p50_ms"], res["ours_p50_ms"]], "rounds": rounds, "calls_per_round": calls}

    # --- the HTP gate (search.npu_compile) -----------------------------------------------------------
    @staticmethod
    def npu_variant(shape: dict) -> str:
        """The static QDQ file the compile stage compiles for this candidate: the npu arch's per-length
        nnapi-int8 file (export/npu.py), else int8-static fixed to [1, length] (bert, lstm, gru)."""
        return NPU_FILE if shape.get("arch") == "npu" else STATIC

    def npu_key(self, shape: dict, chip: str) -> str:
        from importlib.metadata import version

        return json.dumps({"shape": shape, "variant": self.npu_variant(shape), "chip": chip, "check": "htp-compile",
                           "onnxruntime-qnn": version("onnxruntime-qnn"), "length": self.length_of(shape)},
                          sort_keys=True)

    def npu_gate(self, s: Candidate, shape: dict) -> tuple[dict, str | None]:
        """Compile the random-weight copy's static QDQ file at the headline length for every chip in npu.chips
        (CPU fallback disabled: eval/qnn.py). Returns ({chip: "compiled" | "refused ..."}, the prune reason
        naming each chip that did not take it whole, or None); cached per shape, variant, chip, length and
        onnxruntime-qnn version."""
        from eval.qnn import get_chip

        chips = list(dict.fromkeys(self.cfg.npu.chips))
        keys = {c: self.npu_key(shape, c) for c in chips}
        missing = [c for c in chips if keys[c] not in self.cache]
        if missing:
            for c, rec in self._compile(s, shape, missing).items():
                self.cache[keys[c]] = rec
            self._save()
        verdicts, refusals = {}, []
        for c in chips:
            rec = self.cache[keys[c]]
            if rec["compiled"]:
                verdicts[c] = "compiled"
                continue
            counts = Counter(u["type"] for u in rec["unsupported"])
            what = (", ".join(f"{t} x{n}" for t, n in sorted(counts.items())) if counts
                    else (rec["message"][0] if rec["message"] else "no reason given"))
            verdicts[c] = f"refused {what}"
            refusals.append(f"{get_chip(c).name}: refused {what}")
        return verdicts, ("does not compile whole for " + "; ".join(refusals)) if refusals else None

    def _compile(self, s: Candidate, shape: dict, chips: list[str]) -> dict[str, dict]:
        """{chip: {"compiled", "unsupported", "message", "nodes_on_htp", "nodes_total"}} for a random-weight
        copy of s (weights do not change what the compiler takes)."""
        from eval.qnn import compile_htp

        student = self.random_copy(s)
        _unzero(student)
        length = self.length_of(shape)
        with tempfile.TemporaryDirectory() as tmp:
            path = self._static_file(student, Path(tmp), self.max_length(s), length, self.npu_variant(shape))
            out = {}
            for c in chips:
                rec = compile_htp(path, c, Path(tmp) / c, "candidate")
                out[c] = {k: rec[k] for k in ("compiled", "unsupported", "message", "nodes_on_htp", "nodes_total")}
                log.info("search: %s on %s at %d tokens: %s", shape.get("arch"), c, length,
                         "compiled" if rec["compiled"] else f"refused {rec['unsupported'] or rec['message'][:1]}")
        return out

    def _static_file(self, student, folder: Path, max_length: int, length: int, variant: str) -> Path:
        """The file the quantize stage would write and the compile stage compile, at one length."""
        from distill.batching import encode

        q = self.cfg.quantize
        texts = self.texts[: q.calibration_samples]
        if variant == NPU_FILE:
            from export.npu import write_variant

            tok = self.teacher.tokenizer
            ids, _ = encode(tok, texts, length)
            made = write_variant(student, folder / "npu", NPU_FILE, [length], q.opset, ids, tok.pad_token_id or 0,
                                 "candidate", q.cls_only_last_layer)
            return made["files"][length]
        from eval.npu import fix_shapes

        static = self._export(student, folder, max_length, ["fp32", STATIC], calibration_texts=texts)
        return fix_shapes(static, folder / f"{STATIC}-{length}.onnx", 1, length)

    def _variant_file(self, student, folder: Path, max_length: int, variant: str = VARIANT) -> Path:
        """The same chain the quantize stage runs for the variant: fp32 ONNX, for int8-dynamic the fused graph
        first (transformers), for int8-static calibration on the quantize stage's number of training texts."""
        fused = variant == VARIANT and _kind(student) == "hf" and self.cfg.quantize.dynamic_source == "optimized"
        chain = list(dict.fromkeys(["fp32"] + (["optimized"] if fused else []) + [variant]))
        kw = {"calibration_texts": self.calibration} if variant == STATIC else {}
        return self._export(student, folder, max_length, chain, **kw)

    @cached_property
    def calibration(self) -> list[str]:
        """The quantize stage's calibration texts (quantize.calibration_samples of the shuffled training split)."""
        from pipeline.tasks.classification.ship import calibration_texts

        return calibration_texts(self.cfg, self.cfg.run_dir / "data")

    def _export(self, student, folder: Path, max_length: int, chain: list[str], **job_kw) -> Path:
        """The export registry's variants in chain order (each reads the ones before it); the last one's file."""
        from distill.models import LoadedModel
        from export.registry import ExportJob, for_variant

        loaded = LoadedModel(student.eval(), self.teacher.tokenizer, self.labels, _kind(student), max_length, folder)
        sources: dict[str, Path] = {}
        for v in chain:
            job = ExportJob("candidate", loaded, folder / f"{v}.onnx", self.cfg.quantize, self.cfg.export, variant=v,
                            sources=sources, **job_kw)
            for_variant(v).fn(job)
            sources[v] = job.out
        return sources[chain[-1]]

    def _time(self, path: Path, length: int) -> float:
        """p50 milliseconds of one batch-1 call at `length` tokens of validation text, on the target's threads."""
        from eval.latency import Plan, summarize, time_calls

        b = self.cfg.bench
        plan = Plan(b.warmup, b.iterations, b.max_seconds_per_point, b.min_iterations)
        return summarize(time_calls(self._call(path, length), plan))["p50_ms"]

    def _call(self, path: Path, length: int):
        """One batch-1 call of the file at `length` tokens of validation text, on the target's provider and threads."""
        from eval.latency import make_batch, ort_runner, ort_session, token_stream
        from eval.targets import mobile_provider, resolved_threads

        tok = self.teacher.tokenizer
        provider = mobile_provider() if self.target.name == "mobile-cpu" else "CPUExecutionProvider"
        session = ort_session(path, resolved_threads(self.target), [provider])
        ids, mask = make_batch(token_stream(tok, self.val_texts, length * 2), length, 1, tok.cls_token_id,
                               tok.sep_token_id)
        return ort_runner(session)(ids, mask)

    # --- training -----------------------------------------------------------------------------------
    def distill(self, s: Candidate, fraction: float, report, score_variant: str | None = None) -> float:
        """Distil a student of shape s from the cached teacher logits (logit loss only: the teacher is not run)
        for the short schedule; after each rung, report(rung, validation accuracy) may raise to stop it.
        Each rung is one distill_student call (its learning-rate schedule restarts per rung); an RNN is the
        baseline stage's distilled RNN (train_rnn with the teacher logits, baseline.distill_loss and
        distill.temperature) for fraction * baseline.epochs. The score is the trained model's validation
        accuracy, or with score_variant that quantized file's (ONNX Runtime)."""
        from distill.baseline import train_rnn
        from distill.distiller import distill_student
        from distill.train import TrainOptions, seed_everything

        cfg, tok = self.cfg, self.teacher.tokenizer
        seed_everything(cfg.run.seed)
        model, layer_map = self.build(s)
        rnn = isinstance(s, BaselineSection)
        acc = 0.0
        for i, epochs in enumerate(rungs(s.epochs, fraction) if rnn else self.rungs(fraction)):
            if rnn:
                train_rnn(model, tok, self.texts, self.y, dataclasses.replace(s, epochs=epochs), self.rnn_length(s),
                          cfg.run.seed + i, f"search: {s.cell}", teacher_logits=self.teacher_logits,
                          temperature=cfg.distill.temperature)
            else:
                d = dataclasses.replace(cfg.distill, epochs=epochs, hidden_weight=0.0, attention_weight=0.0)
                distill_student(model, None, tok, self.texts, self.y, self.teacher_logits, d, layer_map,
                                s.max_length, cfg.run.seed + i, TrainOptions())
            acc = self.validation_accuracy(model.cpu(), s)
            report(i, acc)
        return self.file_accuracy(model, s, score_variant) if score_variant else acc

    def file_accuracy(self, model, s: Candidate, variant: str) -> float:
        """Validation accuracy of the trained candidate's quantized file, made by the quantize stage's chain."""
        from eval.metrics import scores
        from export.checks import ort_runner, predict
        from export.ort_session import ort_session

        with tempfile.TemporaryDirectory() as tmp:
            path = self._variant_file(model.eval(), Path(tmp), self.max_length(s), variant)
            run = ort_runner(ort_session(path, self.cfg.run.threads))
            logits = predict(run, self.teacher.tokenizer, self.val_texts, self.max_length(s),
                             self.cfg.teacher.eval_batch_size)
        return scores(logits, np.array(self.val_y), len(self.labels))["accuracy"]

    def candidate_of(self, shape: dict) -> Candidate:
        """The config section of a trial's shape (its `student` user attribute): [student], or [baseline] for
        an LSTM / GRU, with the user's other settings."""
        base = self.cfg.baseline if shape["arch"] in RNN_CELLS else self.cfg.student
        return dataclasses.replace(base, **config_keys(shape))

    def full_schedule(self, s: Candidate, score_variant: str | None = None) -> float:
        """s trained as the pipeline trains the config best-<target>.toml would hold, scored on validation: the
        distill stage's one distill_student call over distill.epochs (its layer map and hidden / attention
        losses, the teacher run alongside, [train]'s precision and accumulation), or for an RNN the baseline
        stage's distilled RNN over baseline.epochs. score_variant: that quantized file's accuracy instead."""
        from distill.baseline import train_rnn
        from distill.distiller import distill_student
        from distill.precision import choose_precision
        from distill.train import TrainOptions, seed_everything

        cfg, tok, t = self.cfg, self.teacher.tokenizer, self.cfg.train
        opts = TrainOptions(grad_accum=t.grad_accum, precision=choose_precision(t.precision).precision)
        seed_everything(cfg.run.seed)
        if isinstance(s, BaselineSection):
            model = self.build_rnn(s)
            train_rnn(model, tok, self.texts, self.y, s, self.rnn_length(s), cfg.run.seed,
                      f"search survivor: {s.cell}", teacher_logits=self.teacher_logits,
                      temperature=cfg.distill.temperature, opts=opts)
        else:
            teacher = self.teacher.model
            eager = cfg.distill.attention_weight > 0
            if eager:  # as the distill stage: attention probabilities need the eager implementation
                teacher.hf.config._attn_implementation = "eager"
                teacher.hf.set_attn_implementation("eager")
            model, layer_map = self.build(s, layer_map_for(cfg.distill.layer_map, s.layers), eager)
            distill_student(model, teacher, tok, self.texts, self.y, self.teacher_logits, cfg.distill, layer_map,
                            s.max_length, cfg.run.seed, opts)
        model.cpu()
        return self.file_accuracy(model, s, score_variant) if score_variant else self.validation_accuracy(model, s)

    def standard_error(self, accuracy: float) -> float:
        """One binomial standard error of an accuracy on this validation split: search.select's margin."""
        return math.sqrt(max(accuracy * (1 - accuracy), 0.0) / len(self.val_y))

    def validation_accuracy(self, student, s: Candidate) -> float:
        from distill.models import predict_logits
        from eval.metrics import scores

        student.eval()
        logits = predict_logits(student, self.teacher.tokenizer, self.val_texts, self.max_length(s),
                                self.cfg.teacher.eval_batch_size)
        return scores(logits, np.array(self.val_y), len(self.labels))["accuracy"]


def layer_map_for(layer_map: list[int], layers: int) -> list[int]:
    """distill.layer_map for a candidate of `layers` layers: the user's when it has one entry per layer, else
    [] (the uniform spread; apply_best writes the same into best-<target>.toml)."""
    return list(layer_map) if len(layer_map) == layers else []


def _kind(student) -> str:
    from distill.lstm import RNNClassifier

    return "rnn" if isinstance(student, RNNClassifier) else getattr(student, "kind", "hf")


def _unzero(model) -> None:
    """Small seeded noise in every all-zero parameter (fresh biases): a zero tensor quantizes to a zero scale,
    which the HTP refuses (a DequantizeLinear of a LayerNorm bias), while a trained model's never is. The
    compiler's verdict depends on the graph and its types, not the values, once no tensor is degenerate."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.numel() and not torch.any(p != 0):
                p.normal_(0.0, 0.02)
