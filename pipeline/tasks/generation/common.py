"""What the generation steps share: the model folders by name, loading a model behind the eval.metrics.LM
interface, the held-out windows and ONNX Runtime runners."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError
from pipeline.task import StageContext
from pipeline.tasks.generation.data import encode_prompt, start_ids, token_stream, windows


def load_lm(folder: Path, name: str):
    """An eval.metrics.LM for a model folder written by the stages above, and its tokenizer."""
    from distill.lstm import LSTMLM
    from distill.teacher import load_causal_folder
    from distill.vocab import VocabMap
    from eval.metrics import LM
    from transformers import AutoTokenizer

    meta_path = folder / "pocketformer.json"
    if not meta_path.is_file():
        raise PipelineError(f"{name}: {folder} is not a saved model folder; run the stage that writes it first")
    meta = json.loads(meta_path.read_text())
    vmap = VocabMap.load(folder) if (folder / "vocab_map.json").is_file() else None
    if meta["kind"] == "lstm":
        return LM(name, "lstm", LSTMLM.load(folder), vmap), AutoTokenizer.from_pretrained(folder)
    model, tok = load_causal_folder(folder, name)
    # the student's exported positions, else (the teacher) its own position table: no sample runs past it
    limit = meta.get("max_positions") or getattr(model.config, "max_position_embeddings", None) or 0
    return LM(name, "hf", model, vmap, limit), tok


def held_out_windows(ctx: StageContext, tok, split: str = "test") -> np.ndarray:
    """lm.eval_windows windows of the split, evenly spaced, teacher ids (N, T + 1)."""
    from distill.teacher import eos_id

    lm = ctx.cfg.lm
    tokens = token_stream(tok, ctx.upstream("data"), split, eos_id(tok))
    return windows(tokens, lm.context_length, f"{split} split", lm.eval_windows, start_ids(tok))


def check_prompt(ctx: StageContext, tok) -> list[int]:
    return encode_prompt(tok, ctx.cfg.lm.prompts[0])  # lm.prompts is never empty: checked when the config loaded


def ort_lm(path: Path, lm, threads: int = 0, providers: tuple[str, ...] = ("CPUExecutionProvider",),
           bind_device: str | None = None):
    """An OrtLM for a graph exported from lm (same vocabulary, same position limit), on providers; a
    session that falls back from the first provider is refused, so CPU times are never filed under a GPU."""
    from export.ort_session import OrtLM, refuse_fallback

    cut = lm.vmap.other_id if lm.vmap is not None and lm.vmap.has_other else None
    runner = OrtLM(path, threads, lm.max_positions, cut, providers, bind_device)
    refuse_fallback(runner.session, providers[0])
    return runner

