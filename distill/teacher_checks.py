"""Checks that turn a broken or mismatched teacher into one clear error instead of a traceback or a
silently re-initialised encoder: a model of the wrong kind for the task, missing or unreadable files,
weights that do not fit the config, and a max_length beyond the model's position table."""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# tokenizer.model: the sentencepiece file of Llama-family decoders (the generation teacher) saved without a
# tokenizer.json
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "sentencepiece.bpe.model", "spiece.model", "vocab.json",
                   "tokenizer.model")
# Encoders whose sequence-classification head transformers provides and our exporters handle.
ENCODER_TYPES = ("bert", "distilbert", "roberta", "xlm-roberta", "camembert", "electra", "albert", "mpnet",
                 "deberta", "deberta-v2", "mobilebert")
DECODER_TYPES = ("gpt2", "gpt_neo", "gptj", "llama", "mistral", "qwen2", "phi", "opt", "gemma")
# Models transformers can load that cannot continue a text left to right: the encoders, encoder-decoders
NOT_CAUSAL = ENCODER_TYPES + ("t5", "bart", "mt5", "marian", "vit", "clip")
# RoBERTa-style embeddings (MPNet's too) number positions from pad_token_id + 1, so their table holds that many
# fewer tokens.
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "mpnet")


def check_model_type(path: str):
    """The classification teacher's Hugging Face config, whose model type must be an encoder."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as e:
        fix = ("Save the model there again with save_pretrained(), or copy it again" if Path(path).is_dir()
               else "Offline? Use a local folder or 'minilm-package'")  # a local config.json that does not parse
        raise PipelineError(f"teacher.model: cannot read a model config from {path!r} ({str(e).splitlines()[0]}). "
                            f"{fix}") from None
    mt = cfg.model_type
    if mt in DECODER_TYPES:
        raise PipelineError(f"teacher.model: {path} is a '{mt}' decoder (causal LM); this config's task is "
                            f"classification, which needs an encoder ({', '.join(ENCODER_TYPES)})")
    if mt not in ENCODER_TYPES:
        raise PipelineError(f"teacher.model: model type '{mt}' is not supported for classification. "
                            f"Supported: {', '.join(ENCODER_TYPES)}")
    return cfg


def check_causal(config, source: str) -> None:
    """Raise unless the config describes a decoder-only causal LM (the generation teacher)."""
    archs = list(getattr(config, "architectures", None) or [])
    causal_arch = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    if config.model_type in NOT_CAUSAL or getattr(config, "is_encoder_decoder", False) or (archs and not causal_arch):
        raise PipelineError(f"teacher {source} is a '{config.model_type}' model ({', '.join(archs) or 'no head'}), not a "
                            f"causal language model; run.task = 'generation' needs a decoder such as Llama, GPT-2 or "
                            f"SmolLM2 (teacher.model = 'smollm2-package')")


def check_folder_files(path: str) -> None:
    """A local teacher folder has weights and a tokenizer, and a safetensors file that opens."""
    p = Path(path)
    if not p.is_dir():
        return  # a hub id: load_for_classification wraps from_pretrained's own errors
    if not any((p / f).is_file() for f in WEIGHT_FILES):
        raise PipelineError(f"teacher.model: {path} has no weights ({' or '.join(WEIGHT_FILES[::2])}). Save the model "
                            f"there with save_pretrained(), or point teacher.model at the folder that has them")
    if not any((p / f).is_file() for f in TOKENIZER_FILES):
        raise PipelineError(f"teacher.model: {path} has no tokenizer ({', '.join(TOKENIZER_FILES)}). Save it there "
                            f"with tokenizer.save_pretrained(folder)")
    weights = p / "model.safetensors"
    if weights.is_file():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except (SafetensorError, OSError) as e:
            raise PipelineError(f"teacher.model: {weights} is not a readable safetensors file ({e}); it may be "
                                f"truncated. Copy or download it again") from None


def position_limit(cfg) -> int | None:
    """Longest input (tokens, specials included) the model's position table covers; None = no table."""
    n = getattr(cfg, "max_position_embeddings", None)
    if not n or getattr(cfg, "position_biased_input", True) is False:  # DeBERTa-v2: relative positions only
        return None
    if cfg.model_type in OFFSET_POSITIONS:
        n -= (cfg.pad_token_id or 0) + 1
    return n


def check_max_length(cfg, max_length: int, key: str = "teacher.max_length") -> None:
    limit = position_limit(cfg)
    if limit is not None and max_length > limit:
        raise PipelineError(f"{key} = {max_length}, but the teacher ({cfg.model_type}) has positions for {limit} "
                            f"tokens only. Set {key} <= {limit}")


def _in_encoder(key: str, prefix: str, base_modules: set[str]) -> bool:
    """True for a weight of the pretrained encoder, named either way ("bert.encoder..." or "encoder...").
    The pooler counts as head: classification fine-tuning trains it, and some models drop it."""
    parts = key.split(".")
    if parts[0] == prefix:
        parts = parts[1:]
    return parts[0] in base_modules and parts[0] != "pooler"


def check_loading_info(info: dict, model, path: str, fine_tune: bool) -> list[str]:
    """The weights the checkpoint lacked or could not fill may only be the new classification head (and
    the pooler) when fine-tuning; anything else means the config disagrees with the weights, which
    transformers would only warn about while it re-initialises part of the encoder.
    Returns the newly initialised keys."""
    prefix = model.base_model_prefix
    base_modules = {k.split(".")[0] for k in model.base_model.state_dict()}
    mismatched = [k if isinstance(k, str) else k[0] for k in info.get("mismatched_keys", [])]  # names or tuples
    new = list(info.get("missing_keys", [])) + mismatched
    bad = [k for k in new if not fine_tune or _in_encoder(k, prefix, base_modules)]
    # checkpoint weights left unused: harmless for another task's head, not for encoder weights
    bad += [k for k in info.get("unexpected_keys", []) if _in_encoder(k, prefix, base_modules)]
    if bad:
        raise PipelineError(f"teacher.model: the weights in {path} do not fit its config.json ({len(bad)} "
                            f"weight(s) missing, unused or of another shape, e.g. {bad[0]}). The config must "
                            f"describe the saved weights: save both with save_pretrained() from the same model")
    return new
