"""Teachers for both tasks, from a model that ships inside a package (distill/teachers.py, a registry of named
teachers, each naming the run.task values it serves), a local Hugging Face folder or a hub id.

- Classification: a BERT-family encoder, fine-tuned into a classifier for the run's labels.
- Generation: a pretrained causal LM used as it is (the packaged SmolLM2 GGUF, a folder or a hub id),
  cached once as an ordinary safetensors folder (teacher/model), so later stages load it in a second or
  two instead of de-quantizing the GGUF again (~25 s).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from distill.batching import encode
from distill.models import HFLogits
from distill.teacher_checks import (check_causal, check_folder_files, check_loading_info, check_max_length,
                                    check_model_type)
from distill.teachers import resolve
from distill.train import TrainOptions, fit_texts
from pipeline.config import TeacherSection
from pipeline.errors import PipelineError


def load_for_classification(spec: str, labels: list[str], fine_tune: bool, max_length: int | None = None):
    """(HFLogits model, tokenizer). A fresh head is added unless the model already has these labels.
    Everything else must come from the checkpoint: a file that is missing, unreadable or does not fit the
    config is an error (transformers would re-initialise those weights with a warning)."""
    from safetensors import SafetensorError
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    path = resolve(spec, "classification")
    cfg = check_model_type(path)
    check_folder_files(path)
    if max_length is not None:
        check_max_length(cfg, max_length)
    if not fine_tune:  # the checkpoint must already be a classifier for exactly these labels
        have = [cfg.id2label[i] for i in range(cfg.num_labels)]
        is_classifier = any(a.endswith("ForSequenceClassification") for a in (cfg.architectures or []))
        if not is_classifier or have != labels:
            raise PipelineError(f"teacher.fine_tune = false, but {path} is not a classifier for the data's labels "
                                f"{labels} (it has {have if is_classifier else 'no classification head'}). "
                                f"Set teacher.fine_tune = true, or relabel the data")
    tok = _load_tokenizer(path)
    id2label = dict(enumerate(labels))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its "newly initialized" warning is replaced by check_loading_info
    try:
        hf, info = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=len(labels), id2label=id2label, label2id={v: k for k, v in id2label.items()},
            ignore_mismatched_sizes=True, output_loading_info=True)
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:  # the file does not hold these weights
        raise _weights_error(path, e) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    new = check_loading_info(info, hf, path, fine_tune)
    if new:
        print(f"[teacher] new classification head for {len(labels)} labels: {', '.join(new)}")
    return HFLogits(hf), tok


def _load_tokenizer(path: str):
    """The teacher's tokenizer, or one error naming the folder. Any exception: a folder without the files this
    model's tokenizer needs raises TypeError, a truncated tokenizer.json the tokenizers library's bare Exception."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as e:
        raise PipelineError(f"teacher.model: cannot load a tokenizer from {path} ({str(e).splitlines()[0]}). "
                            f"Save it there with tokenizer.save_pretrained(folder)") from None


def _weights_error(path: str, e: Exception) -> PipelineError:
    return PipelineError(f"teacher.model: cannot load the weights in {path} ({type(e).__name__}: "
                         f"{str(e).splitlines()[0]}). Copy or download the model again")


def fine_tune(model: HFLogits, tok, texts: list[str], label_ids: list[int], t: TeacherSection, seed: int,
              opts: TrainOptions = TrainOptions()) -> dict:
    ids, truncated = encode(tok, texts, t.max_length, t.on_too_long, "teacher training data")
    y = torch.tensor(label_ids)

    def loss(m, b, x, mask):
        return torch.nn.functional.cross_entropy(m(x, mask), y[b].to(x.device))

    result = fit_texts(model, loss, ids, tok.pad_token_id or 0, t.batch_size, t.epochs, seed, lr=t.lr,
                       weight_decay=t.weight_decay, warmup_fraction=t.warmup_fraction, desc="teacher fine-tune",
                       lr_hint="teacher.lr", opts=opts)
    return {**result, "truncated_texts": truncated}


def _load_gguf(path: str):
    """GGUF -> float32 model without `accelerate` (which from_pretrained(gguf_file=...) insists on):
    build from the config, load the de-quantized tensors, tie the head."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(Path(path).parent), Path(path).name
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise PipelineError(f"the GGUF {name} does not match its config (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    return model, gguf_tokenizer(AutoTokenizer.from_pretrained(folder, gguf_file=name), _gguf_fields(path))


def _gguf_fields(path: str) -> dict:
    """The GGUF file's tokenizer.ggml.* settings that gguf_tokenizer reads: {key: str | bool}."""
    import gguf

    out = {}
    for key, field in gguf.GGUFReader(path).fields.items():
        if key in ("tokenizer.ggml.model", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.eos_token_id"):
            value = field.parts[field.data[0]]
            out[key] = (bytes(value).decode() if key.endswith("model") else int(value[0]) if key.endswith("_id")
                        else bool(value[0]))
    return out


def gguf_tokenizer(tok, fields: dict):
    """A GGUF's byte-level BPE tokenizer ("gpt2" in tokenizer.ggml.model, as SmolLM2's) as the file describes it.

    transformers builds it as a Llama sentencepiece one: byte fallback on, sentencepiece's decoder chain, class
    LlamaTokenizer, and a <bos> in front of every text whatever tokenizer.ggml.add_bos_token says. Shipped like
    that, onnxruntime-genai's tokenizer encodes every space as id -1 and transformers.js puts a <bos> in front of
    prompts that training never saw. Rebuilt as a GPT-2-style byte-level BPE (byte fallback never fires on a
    byte-level vocabulary, so every text keeps its ids), with the file's own <bos> setting and eos."""
    from tokenizers import Tokenizer, decoders, processors
    from transformers import GPT2TokenizerFast

    if fields.get("tokenizer.ggml.model") != "gpt2":
        return tok
    add_bos = fields.get("tokenizer.ggml.add_bos_token", True)
    # transformers names the <bos> as the eos too (SmolLM2: <|im_start|>, id 1, where the file says <|im_end|>,
    # id 2). The eos separates documents in the training stream and stops an app's generation loop
    eos = fields.get("tokenizer.ggml.eos_token_id")
    eos_token = tok.convert_ids_to_tokens(eos) if isinstance(eos, int) and 0 <= eos < len(tok) else tok.eos_token
    spec = json.loads(tok.backend_tokenizer.to_str())
    spec["model"]["byte_fallback"] = False
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = (
        processors.TemplateProcessing(single=f"{tok.bos_token} $A", special_tokens=[(tok.bos_token, tok.bos_token_id)])
        if add_bos else processors.ByteLevel(trim_offsets=False))
    return GPT2TokenizerFast(tokenizer_object=backend, bos_token=tok.bos_token, eos_token=eos_token,
                             unk_token=tok.unk_token, pad_token=tok.pad_token, add_bos_token=add_bos,
                             chat_template=tok.chat_template)  # the GGUF's, which apps' chat code reads


def load_causal_teacher(source: str):
    """(model, tokenizer) for the generation teacher.model: a packaged GGUF, a local folder or a hub id."""
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    path = resolve(source, "generation")
    if path.endswith(".gguf"):
        model, tokenizer = _load_gguf(path)
    else:
        try:
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as e:
            if Path(path).is_dir():  # a local folder with an unreadable config.json: no hub or offline question
                raise PipelineError(f"teacher.model: cannot read the model config in {path} ({str(e).splitlines()[0]})."
                                    f" Save the model there again with save_pretrained(), or copy it again") from None
            raise PipelineError(f"teacher.model = '{source}' is neither a local model folder nor a reachable hub id "
                                f"({e}). Use 'smollm2-package' offline") from None
        check_causal(config, source)
        check_folder_files(path)  # a local folder's weights and tokenizer files, as for classification
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # its "newly initialized" / "not used" warnings: check_loading_info refuses
        try:
            # a config.json of more layers than the weights hold started the extra ones random, one of fewer dropped
            # the rest, with a warning only; another width failed as a "copy or download again"
            model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, ignore_mismatched_sizes=True,
                                                               output_loading_info=True)
        except (OSError, ValueError, RuntimeError, SafetensorError) as e:
            raise _weights_error(path, e) from None
        finally:
            hf_logging.set_verbosity(verbosity)
        check_loading_info(info, model, path, fine_tune=False)  # used as pretrained: every weight must load
        tokenizer = _load_tokenizer(path)
    check_causal(model.config, source)
    return model.eval(), tokenizer


def save_causal(folder: Path, model, tokenizer, extra: dict | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / "pocketformer.json").write_text(json.dumps({"kind": "hf-causal", **(extra or {})}, indent=2))


def load_causal_folder(folder: Path, name: str = "teacher"):
    """A causal LM folder written by save_causal (or the distill stage), in eval mode, with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "pocketformer.json").is_file():
        raise PipelineError(f"{name}: {folder} is not a saved model folder; run the stage that writes it first")
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as e:  # safetensors, torch, transformers and tokenizers each raise their own types (as load_model)
        raise PipelineError(f"{name}: the checkpoint in {folder} is missing or corrupt ({e}); re-run its stage") from None
    return model.eval(), tokenizer


def eos_id(tokenizer, model=None) -> int:
    """The id that separates documents in the token stream."""
    for cand in (tokenizer.eos_token_id, getattr(getattr(model, "config", None), "eos_token_id", None),
                 tokenizer.pad_token_id):
        if isinstance(cand, list) and cand and all(isinstance(i, int) for i in cand):
            cand = cand[0]  # a Llama-3 style list: the first is end-of-text, as the bundle takes it
        if isinstance(cand, int):
            return cand
    return 0  # the teacher stage refuses a teacher without an eos (pipeline/tasks/generation/train.py)
