"""A model folder and the one interface every classifier here exposes: logits = model(input_ids, attention_mask).

Folder layout (teacher, student, lstm, lstm_distilled alike): config.json, model.safetensors, the
tokenizer files, labels.json (id = position), pocketformer.json ({"kind": "hf" | "rnn" | "npu", "max_length"}).
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from distill.batching import bucketed_batches, encode, pad, param_device
from distill.embeddings import EMBEDDING_KEY, CompactEmbedding, find_compact, load_compact_hf
from distill.lstm import RNNClassifier
from pipeline.errors import PipelineError

MODEL_NAMES = ("teacher", "student", "lstm", "lstm_distilled")


class HFLogits(nn.Module):
    """Wraps a transformers sequence classifier so it returns the logits tensor alone."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf
        # Single-segment inputs: token types are all zero. Passed explicitly because BERT's default slices
        # and expands a stored buffer, which the ONNX exporter writes as ~20 extra shape ops per graph.
        self._token_types = "token_type_ids" in inspect.signature(hf.forward).parameters and \
            getattr(hf.config, "type_vocab_size", 0) > 0

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        types = {"token_type_ids": torch.zeros_like(input_ids)} if self._token_types else {}
        return self.hf(input_ids=input_ids, attention_mask=attention_mask, **types).logits


@dataclass
class LoadedModel:
    model: nn.Module  # (input_ids, attention_mask) -> logits
    tokenizer: object
    labels: list[str]
    kind: str
    max_length: int
    folder: Path

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id or 0


def save_model(folder: Path, model: nn.Module, tokenizer, labels: Sequence[str], kind: str, max_length: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "hf":
        hf = model.hf if isinstance(model, HFLogits) else model
        hf.save_pretrained(folder, safe_serialization=True)
    else:
        model.save(folder)
    tokenizer.save_pretrained(folder)
    (folder / "labels.json").write_text(json.dumps(list(labels), indent=2))
    meta: dict = {"kind": kind, "max_length": max_length}
    compact = find_compact(model)
    if compact is not None:
        meta[EMBEDDING_KEY] = compact.spec
        compact.vocab_map().save(folder)  # the kept ids, readable without loading the weights
    (folder / "pocketformer.json").write_text(json.dumps(meta, indent=2))


def load_model(folder: Path, name: str = "model") -> LoadedModel:
    """Load a model folder written by save_model, for inference (eval mode)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    meta_path = folder / "pocketformer.json"
    if not meta_path.is_file():
        raise PipelineError(f"{name}: {folder} is not a trained model folder (no pocketformer.json); "
                            f"run the stage that trains it first")
    meta = json.loads(meta_path.read_text())
    try:
        if meta["kind"] == "hf":  # with EMBEDDING_KEY: a restricted / factorized input embedding
            model: nn.Module = HFLogits(load_compact_hf(folder, meta[EMBEDDING_KEY]) if EMBEDDING_KEY in meta
                                        else AutoModelForSequenceClassification.from_pretrained(folder))
        elif meta["kind"] == "npu":
            from distill.npu_student import NpuStudent

            model = NpuStudent.load(folder, meta.get(EMBEDDING_KEY))
        else:
            model = RNNClassifier.load(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except PipelineError as e:  # a plain-PyTorch folder (distill/folder_model.py) says what is wrong itself
        raise PipelineError(f"{name}: {e}") from None
    except Exception as e:  # safetensors, torch and transformers each raise their own types for a bad file
        raise PipelineError(f"{name}: the checkpoint in {folder} is missing or corrupt ({e}); re-run its stage") from None
    labels = json.loads((folder / "labels.json").read_text())
    return LoadedModel(model.eval(), tokenizer, labels, meta["kind"], meta["max_length"], folder)


def count_params(model: nn.Module) -> dict[str, int]:
    """Total parameters and how many sit in embedding tables (word, position, token type; a factorized
    embedding's E x H projection counts as embedding, as in ALBERT)."""
    total = sum(p.numel() for p in model.parameters())
    emb = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding))
    emb += sum(m.proj.weight.numel() for m in model.modules() if isinstance(m, CompactEmbedding) and m.proj is not None)
    return {"params": total, "embedding_params": emb, "non_embedding_params": total - emb}


@torch.no_grad()
def predict_logits(model: nn.Module, tokenizer, texts: Sequence[str], max_length: int, batch_size: int = 64,
                   desc: str | None = None, shard: bool = False, precision: str = "fp32") -> np.ndarray:
    """Logits (N, C) in the order of texts, computed in length-sorted batches.

    shard=True under torchrun: each rank computes every W-th batch and the pieces are merged, so the
    teacher pass over a large cache is split across processes. precision "bf16" runs under bf16 autocast
    (the logits stage's teacher pass, where the CPU or GPU computes bf16 natively; scoring stays fp32).
    """
    from distill import distributed as D

    model.eval()
    dev = param_device(model)
    ids, _ = encode(tokenizer, texts, max_length, where=desc or "scored texts")
    batches = bucketed_batches([len(s) for s in ids], batch_size, None)
    if shard and D.enabled():
        D.init()
        batches = D.shard(batches)
    part: dict[int, np.ndarray] = {}
    show = desc is not None and D.is_main()
    for b in tqdm(batches, desc=desc, unit="batch", disable=not show, dynamic_ncols=True, mininterval=2.0):
        x, m = pad([ids[i] for i in b], tokenizer.pad_token_id or 0, device=dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(x, m).float().cpu().numpy()
        part.update({i: logits[j] for j, i in enumerate(b)})
    if shard and D.enabled():
        for other in D.gather(part):
            part.update(other)
    return np.stack([part[i] for i in range(len(ids))])  # (N, C)
