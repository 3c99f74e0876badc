"""What the generation stages share: the model folders by name, reading upstream stages, loading a
model behind the eval.lm_eval.LM interface, the held-out windows and ONNX Runtime runners."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from pipeline.config import Config
from pipeline.data import read_split
from pipeline.errors import PipelineError
from pipeline.stage import STAGES, StageContext

GEN = "generation"
LM_FOLDERS = {"teacher": ("teacher", "model"), "student": ("distill", "student"), "lstm": ("baseline", "lstm")}


def threads(cfg: Config) -> None:
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)


def upstream(ctx: StageContext, stage: str) -> Path:
    """The folder of a stage this one depends on directly or through its dependencies (the manifest chain
    re-runs this stage whenever that one changes)."""
    if stage in ctx.deps:
        return ctx.input(stage)
    todo, seen = list(ctx.deps), set()
    while todo:
        name = todo.pop()
        if name == stage:
            return ctx.run_dir / stage
        if name not in seen and name in STAGES:
            seen.add(name)
            todo += list(STAGES[name].deps)
    raise RuntimeError(f"stage {ctx.name} reads {stage}, which is not upstream of it")


def stream(tokenizer, data_dir: Path, split: str, sep: int) -> np.ndarray:
    from pipeline.lm_data import token_stream

    return token_stream(tokenizer, read_split(data_dir, split), sep)


def load_lm(folder: Path, name: str):
    """An eval.lm_eval.LM for a model folder written by the stages above, and its tokenizer."""
    from distill.lstm import LSTMLM
    from distill.teacher import load_causal_folder
    from distill.vocab import VocabMap
    from eval.lm_eval import LM
    from transformers import AutoTokenizer

    meta_path = folder / "pocketformer.json"
    if not meta_path.is_file():
        raise PipelineError(f"{name}: {folder} is not a saved model folder; run the stage that writes it first")
    meta = json.loads(meta_path.read_text())
    vmap = VocabMap.load(folder) if (folder / "vocab_map.json").is_file() else None
    if meta["kind"] == "lstm":
        return LM(name, "lstm", LSTMLM.load(folder), vmap), AutoTokenizer.from_pretrained(folder)
    model, tok = load_causal_folder(folder, name)
    return LM(name, "hf", model, vmap, meta.get("max_positions", 0)), tok


def held_out_windows(ctx: StageContext, tok, split: str = "test") -> np.ndarray:
    """lm.eval_windows windows of the split, evenly spaced, teacher ids (N, T + 1)."""
    from distill.teacher import eos_id
    from pipeline.lm_data import windows

    lm = ctx.cfg.lm
    tokens = stream(tok, upstream(ctx, "data"), split, eos_id(tok))
    return windows(tokens, lm.context_length, f"{split} split", lm.eval_windows)


def checkpoint_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))



def check_prompt(ctx: StageContext, tok) -> list[int]:
    return tok(ctx.cfg.lm.prompts[0], add_special_tokens=False)["input_ids"] if ctx.cfg.lm.prompts else [0]


def ort_lm(path: Path, lm, threads: int = 0):
    """An OrtLM for a graph exported from lm (same vocabulary, same position limit)."""
    from export.lm_onnx import OrtLM

    cut = lm.vmap.other_id if lm.vmap is not None and lm.vmap.has_other else None
    return OrtLM(path, threads, lm.max_positions, cut)

