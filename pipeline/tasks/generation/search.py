"""The generation side of the student search (pipeline/search.py runs the study): decoder shapes of the
generation student registry (distill/search_space.py LM_SPACES), each measured before any training as a
random-weight copy exported with its KV cache, int8-dynamic, whose greedy decode is timed on the target the
way the bench stage's decode workload times it (eval/bench.py DECODE_TARGETS, measure_decode); a feasible one
is distilled from the cached teacher top-k logits on a short schedule and scored by its perplexity on the
validation split (lower is better; never the test split).

The budget is search.budget_ms read as milliseconds per decode token (1000 / tokens per second): `--budget-ms
20` asks for at least 50 tokens/s. trials.json keeps both (latency_ms = ms per decode token, and
decode_tokens_per_s), with the time to first token beside them.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import tempfile
from functools import partial
from pathlib import Path

import numpy as np

from distill import search_space
from pipeline.config import StudentSection
from pipeline.errors import PipelineError
from pipeline.search import MeasurementCache, measurement_basis, rungs

log = logging.getLogger("pocketformer")
VARIANT = "int8-dynamic"  # the student graph a generation bundle ships by default


def searcher() -> type:
    """Task.search: the generation candidates class (the interface: pipeline/search.py's docstring)."""
    return Candidates


class Candidates(MeasurementCache):
    """The finished run's teacher, vocabulary map, cached top-k logits and validation windows, loaded once for
    every trial of a search."""

    METRIC, DIRECTION = "validation_perplexity", "minimize"
    METRIC_NOTE = "validation perplexity over teacher tokens, lower is better (the test split is never read)"
    COST_NOTE = "decode ms per token on {target} (batch 1, KV cache, int8-dynamic)"
    COST_SHORT = "ms per decode token on {target}"
    BUDGET_UNIT = "ms/token"
    MEASURED = ("latency_ms", "size_bytes", "decode_tokens_per_s", "ttft_ms")

    # --- the task's side of the search (pipeline/search.py) -----------------------------------------
    space = staticmethod(partial(search_space.get_space, task="generation"))

    @staticmethod
    def check_init(student, teacher_config) -> None:
        """The teacher stage's check that student.init fits the teacher (distill/student.py)."""
        from distill.student import check_causal_init

        check_causal_init(student, teacher_config)

    @staticmethod
    def basis(cfg) -> dict:
        """[lm] decides the windows, the vocabulary, the positions and the timed prompt and decode."""
        return {"lm": cfg.section_dict("lm")}

    @staticmethod
    def over_budget(m: dict, budget_ms: float) -> str:
        return (f"decode {m['latency_ms']:.3f} ms/token ({m['decode_tokens_per_s']:.0f} tokens/s) > "
                f"{budget_ms:g} ms/token ({1000 / budget_ms:.0f} tokens/s)")

    @staticmethod
    def apply_best(data: dict, shape: dict, variant: str | None = None) -> None:
        data["student"] = {**data["student"], **search_space.config_keys(shape)}

    def sample(self, trial, space) -> StudentSection:
        return search_space.sample_decoder(trial, space, self.cfg.student)

    @staticmethod
    def shape_of(s: StudentSection) -> dict:
        return {k: getattr(s, k) for k in search_space.DECODER_SHAPE_KEYS}

    @staticmethod
    def section(s: StudentSection) -> str:
        return "student"

    def __init__(self, cfg, target: str, cache_path: Path | None):
        from distill.teacher import eos_id, load_causal_folder
        from distill.vocab import VocabMap
        from eval.bench import DECODE_TARGETS
        from pipeline.search_checks import check_target
        from pipeline.tasks.generation.data import start_ids, token_stream, windows
        from pipeline.tasks.generation.train import _student_targets

        self._load_cache(cfg, cache_path)
        self.target = DECODE_TARGETS[check_target(target).name]
        run, lm = cfg.run_dir, cfg.lm
        self.teacher, self.tok = load_causal_folder(run / "teacher" / "model")
        self.vmap = VocabMap.load(run / "logits")
        self.windows, self.topk_ids, self.topk_logits = _student_targets(run / "logits", self.vmap)
        tokens = token_stream(self.tok, run / "data", "validation", eos_id(self.tok))
        if len(tokens) <= lm.context_length:
            d = cfg.data  # a validation file is the split as given: data.validation_fraction holds nothing out then
            more = (f"give data.validation_path ({d.validation_path}) more text" if d.validation_path else
                    f"raise data.validation_fraction (now {d.validation_fraction:g}; it holds out whole documents)")
            raise PipelineError(f"the search scores candidates on the validation split, which holds {len(tokens)} "
                                f"tokens, fewer than one window of lm.context_length + 1 = {lm.context_length + 1}: "
                                f"{more} or lower lm.context_length")
        # (N, T + 1) teacher ids, each window starting as the tokenizer starts a text
        self.val = windows(tokens, lm.context_length, "validation split", lm.eval_windows, start_ids(self.tok))
        # the timed prompt: the bench stage's length, from the validation text (the bench takes the test split's)
        prompt = np.concatenate(list(self.val))[: lm.bench_prompt_tokens]
        self.prompt = self.vmap.to_student(prompt).tolist()
        self.max_positions = max(lm.max_cache, lm.context_length)  # as the distill stage builds the student
        self.basis = measurement_basis(cfg)

    def build(self, s: StudentSection):
        from distill.student import build_student

        return build_student(s, self.teacher, self.vmap, self.max_positions, task="generation")

    # --- measuring ----------------------------------------------------------------------------------
    def cache_key(self, shape: dict) -> str:
        import onnxruntime

        lm = self.cfg.lm
        return json.dumps({"shape": {k: v for k, v in shape.items() if k != "init"}, "variant": VARIANT,
                           "target": self.target.name, "onnxruntime": onnxruntime.__version__,
                           "vocab": self.vmap.size, "positions": self.max_positions,
                           "prompt_tokens": len(self.prompt), "decode_tokens": lm.bench_decode_tokens,
                           "basis": self.basis}, sort_keys=True)

    def measure(self, s: StudentSection, shape: dict, variant: str = VARIANT) -> dict:
        """{latency_ms (per decode token), decode_tokens_per_s, ttft_ms, size_bytes} of the int8-dynamic KV-cache
        graph of a random-weight student of this shape, decoding lm.bench_decode_tokens greedy tokens after an
        lm.bench_prompt_tokens prompt on the target's threads (lm.bench_iterations runs after one warm-up);
        cached per shape, target, vocabulary, positions, prompt / decode lengths and onnxruntime version.
        variant is always int8-dynamic here (pipeline/tasks/generation/checks.py rejects others)."""
        key = self.cache_key(shape)
        if key in self.cache:
            return {**self.cache[key], "cached": True}
        from distill.train import seed_everything
        from eval.bench import decode_threads, measure_decode
        from export.onnx_export import export_decoder
        from export.ort_session import OrtLM
        from pipeline.tasks.generation.ship import _onnx_size, variant_graph

        seed_everything(self.cfg.run.seed)
        student = self.build(dataclasses.replace(s, init="random"))  # weights do not change the timing
        cut = self.vmap.other_id if self.vmap.has_other else None
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "student"
            student.save_pretrained(folder, safe_serialization=True)
            self.tok.save_pretrained(folder)
            fp32 = export_decoder(folder, Path(tmp) / "fp32", self.cfg.quantize.opset)
            path = variant_graph(VARIANT, fp32, Path(tmp) / VARIANT, "student", self.cfg.quantize)
            runner = OrtLM(path, decode_threads(self.target), self.max_positions, cut)
            stats = measure_decode(runner, self.prompt, self.cfg.lm.bench_decode_tokens, self.cfg.lm.bench_iterations)
            out = {"latency_ms": 1000.0 / stats["decode_tokens_per_s"],
                   "decode_tokens_per_s": stats["decode_tokens_per_s"], "ttft_ms": stats["ttft_ms"],
                   "size_bytes": _onnx_size(path)}
        self.cache[key] = out
        self._save()
        return {**out, "cached": False}

    # --- training -----------------------------------------------------------------------------------
    def rungs(self, fraction: float) -> list[float]:
        """The short schedule: fraction * the distill budget (distill.steps as epochs over these windows when
        set, else distill.epochs), cut into rungs of at most one epoch each."""
        d = self.cfg.distill
        epochs = d.steps / math.ceil(len(self.windows) / d.batch_size) if d.steps > 0 else d.epochs  # steps per epoch
        return rungs(epochs, fraction)

    def distill(self, s: StudentSection, fraction: float, report, score_variant: str | None = None) -> float:
        """Distil a decoder of shape s from the cached teacher top-k (distill_lm, as the distill stage: the
        soft top-k KL on the scored windows, next-token cross-entropy on all) for the short schedule; after
        each rung, report(rung, validation perplexity) may raise to stop it. Each rung is one distill_lm
        call (its learning-rate schedule restarts per rung)."""
        from distill.distiller import distill_lm
        from distill.train import TrainOptions, seed_everything

        cfg = self.cfg
        seed_everything(cfg.run.seed)
        student = self.build(s)
        ppl = math.inf
        for i, epochs in enumerate(self.rungs(fraction)):
            d = dataclasses.replace(cfg.distill, epochs=epochs, steps=0)  # a rung is a share of the budget
            distill_lm(student, self.windows, self.topk_ids, self.topk_logits, d, cfg.run.seed + i, TrainOptions())
            ppl = self.validation_perplexity(student)
            report(i, ppl)
        return ppl

    def validation_perplexity(self, student) -> float:
        """The student's perplexity on the validation windows; a diverged candidate's (not finite) is the
        teacher's vocabulary size, so it ranks last instead of failing the trial."""
        from eval.metrics import LM, perplexity

        student.eval()
        ppl = perplexity(LM("student", "hf", student, self.vmap, self.max_positions), self.val,
                         self.cfg.lm.eval_batch_size)["perplexity"]
        return ppl if math.isfinite(ppl) else float(self.vmap.teacher_vocab)

    def candidate_of(self, shape: dict) -> StudentSection:
        """The [student] section of a trial's shape (its `student` user attribute), the user's other settings kept."""
        return dataclasses.replace(self.cfg.student, **shape)

    def full_schedule(self, s: StudentSection, score_variant: str | None = None) -> float:
        """s trained on the distill stage's whole budget (one distill_lm call with [distill] as configured:
        distill.steps, one learning-rate schedule), scored by validation perplexity."""
        from distill.distiller import distill_lm
        from distill.precision import choose_precision
        from distill.train import TrainOptions, seed_everything

        cfg, t = self.cfg, self.cfg.train
        seed_everything(cfg.run.seed)
        student = self.build(s)
        opts = TrainOptions(grad_accum=t.grad_accum, precision=choose_precision(t.precision).precision)
        distill_lm(student, self.windows, self.topk_ids, self.topk_logits, cfg.distill, cfg.run.seed, opts)
        return self.validation_perplexity(student)
