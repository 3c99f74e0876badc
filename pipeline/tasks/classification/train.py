"""The classification task's training steps: data, teacher, logits, distill, baseline and eval. Each reads its
stage's declared inputs and writes its own folder; pipeline.stage runs them in order and records manifests."""
from __future__ import annotations

import json
import logging

import numpy as np

from pipeline.config import student_positions, student_serving_length
from pipeline.data import build_splits, read_labels, read_split, write_jsonl
from pipeline.task import StageContext
from pipeline.tasks.classification import MODEL_FOLDERS
from pipeline.tasks.common import reports_truncation, threads, train_options

log = logging.getLogger("pocketformer")


def stage_data(ctx: StageContext) -> dict:
    """Load, clean and split the labelled texts; write train/validation/test JSONL and labels.json."""
    splits = build_splits(ctx.cfg)
    for s in ("train", "validation", "test"):
        write_jsonl(ctx.out / f"{s}.jsonl", splits[s])
    if splits["left_out"]:  # texts only: the logits stage labels data.max_unlabeled of them with the teacher
        write_jsonl(ctx.out / "left_out.jsonl", [{"text": t} for t in splits["left_out"]])
    (ctx.out / "labels.json").write_text(json.dumps(splits["labels"], indent=2))
    (ctx.out / "split.json").write_text(json.dumps(splits["info"], indent=2))
    return splits["info"]


def _xy(data_dir, split: str, labels: list[str]) -> tuple[list[str], list[int]]:
    rows = read_split(data_dir, split)
    index = {lab: i for i, lab in enumerate(labels)}
    return [r["text"] for r in rows], [index[r["label"]] for r in rows]


@reports_truncation
def stage_teacher(ctx: StageContext) -> dict:
    """Fine-tune the pretrained encoder into a classifier; writes teacher/model (HF folder)."""
    from distill.models import predict_logits, save_model
    from distill.precision import choose_precision
    from distill.student import check_init, check_layer_map
    from distill.teacher import fine_tune, load_for_classification
    from distill.train import seed_everything
    from eval.metrics import scores

    cfg, t = ctx.cfg, ctx.cfg.teacher
    threads(cfg)
    seed_everything(cfg.run.seed)
    labels = read_labels(ctx.input("data"))
    model, tok = load_for_classification(t.model, labels, t.fine_tune, t.max_length)
    # a student that cannot start from or map onto this teacher fails now, not after the fine-tune
    check_init(cfg.student, model.hf.config)
    check_layer_map(cfg.distill.layer_map, cfg.student.layers, model.hf.config.num_hidden_layers)
    texts, y = _xy(ctx.input("data"), "train", labels)
    summary: dict = {"source": t.model, "model_type": model.hf.config.model_type}
    if t.fine_tune:
        summary.update(fine_tune(model, tok, texts, y, t, cfg.run.seed, train_options(ctx)))
    vtexts, vy = _xy(ctx.input("data"), "validation", labels)
    if vtexts:
        # the validation score in teacher.precision, as the logits stage's pass: the demo scores all ~3.2k
        # validation texts (the search ranks students on them), which bf16 keeps to ~10 s on 2 cores
        choice = choose_precision(t.precision, "teacher.precision")
        logits = predict_logits(model, tok, vtexts, t.max_length, t.eval_batch_size, desc="teacher: validation",
                                precision=choice.precision)
        summary["validation"] = {**scores(logits, np.array(vy), len(labels)), "precision": choice.precision}
    save_model(ctx.out / "model", model.cpu(), tok, labels, "hf", t.max_length)
    return summary


@reports_truncation
def stage_logits(ctx: StageContext) -> dict:
    """Augment the training texts and cache the teacher's logits on all of them (the teacher runs once)."""
    from distill.augment import Augmenter
    from distill.models import load_model, predict_logits
    from distill.precision import choose_precision

    cfg = ctx.cfg
    threads(cfg)
    labels = read_labels(ctx.input("data"))
    teacher = load_model(ctx.input("teacher") / "model", "teacher")
    texts, y = _xy(ctx.input("data"), "train", labels)
    extra: list[str] = []
    if cfg.augment.enabled and cfg.augment.copies > 0:
        aug = Augmenter(texts, cfg.augment, teacher.tokenizer.mask_token or "[MASK]", cfg.run.seed)
        extra = aug.augment(texts)
    rows = [{"text": t, "label": labels[i], "origin": "train"} for t, i in zip(texts, y)]
    rows += [{"text": t, "label": None, "origin": "augmented"} for t in extra]
    unlabeled = _unlabeled(ctx.input("data"), cfg.data.max_unlabeled)
    rows += [{"text": t, "label": None, "origin": "unlabeled"} for t in unlabeled]
    # teacher.precision: bf16 autocast where the hardware computes it natively ("auto"); the cached logits are
    # soft targets, and the teacher's own accuracy (eval stage) is still scored in fp32
    choice = choose_precision(cfg.teacher.precision, "teacher.precision")
    logits = predict_logits(teacher.model, teacher.tokenizer, [r["text"] for r in rows], teacher.max_length,
                            cfg.teacher.eval_batch_size, desc="teacher logits", shard=True, precision=choice.precision)
    write_jsonl(ctx.out / "distill_set.jsonl", rows)
    np.save(ctx.out / "teacher_logits.npy", logits.astype(np.float32))
    agree = float((logits[: len(y)].argmax(-1) == np.array(y)).mean())
    return {"train_texts": len(texts), "augmented_texts": len(extra), "teacher_train_accuracy": agree,
            "precision": choice.precision, "precision_reason": choice.reason,
            **({"unlabeled_texts": len(unlabeled)} if unlabeled else {})}


def _unlabeled(data_dir, n: int) -> list[str]:
    """data.max_unlabeled: the first n texts data.max_train left out (data/left_out.jsonl, seeded order)."""
    if n <= 0:
        return []
    texts = [r["text"] for r in read_split(data_dir, "left_out")][:n]
    if not texts:
        log.warning("WARNING: data.max_unlabeled = %d, but data.max_train keeps every training text, so none is "
                    "left to use unlabeled; lower data.max_train to leave some out", n)
    return texts


def _distill_set(logits_dir, labels: list[str]) -> tuple[list[str], list[int], np.ndarray]:
    rows = read_split(logits_dir, "distill_set")
    index = {lab: i for i, lab in enumerate(labels)}
    y = [index[r["label"]] if r["label"] is not None else -1 for r in rows]
    return [r["text"] for r in rows], y, np.load(logits_dir / "teacher_logits.npy")


@reports_truncation
def stage_distill(ctx: StageContext) -> dict:
    """Build the student from the teacher and distil it; writes distill/student (HF folder)."""
    from distill.distiller import distill_student
    from distill.models import count_params, load_model, save_model
    from distill.student import build_student, check_layer_map
    from distill.train import seed_everything

    cfg = ctx.cfg
    threads(cfg)
    seed_everything(cfg.run.seed)
    labels = read_labels(ctx.input("data"))
    teacher = load_model(ctx.input("teacher") / "model", "teacher")
    layer_map = check_layer_map(cfg.distill.layer_map, cfg.student.layers, teacher.model.hf.config.num_hidden_layers)
    eager = cfg.distill.attention_weight > 0
    if eager:
        teacher.model.hf.config._attn_implementation = "eager"
        teacher.model.hf.set_attn_implementation("eager")
    student = build_student(cfg.student, teacher.model, labels, layer_map, attn_eager=eager)
    texts, y, tl = _distill_set(ctx.input("logits"), labels)
    embedding = _student_embedding(cfg.student, student, teacher.tokenizer, texts)
    summary = distill_student(student, teacher.model, teacher.tokenizer, texts, y, tl, cfg.distill, layer_map,
                              cfg.student.max_length, cfg.run.seed, train_options(ctx))
    student.cpu()
    kind = getattr(student, "kind", "hf")  # "npu" for the NPU student, else a transformers model
    save_model(ctx.out / "student", student, teacher.tokenizer, labels, kind, student_serving_length(cfg.student))
    summary.update(embedding=embedding, **count_params(student), teacher_params=count_params(teacher.model))
    return summary


def _student_embedding(s, student, tok, texts: list[str]) -> dict:
    """Apply student.vocab / embedding_dim to a built student of any arch (distill/embeddings.py)."""
    from distill.embeddings import compact_embeddings
    from distill.vocab import training_vocab

    info: dict = {"vocab": s.vocab, "embedding_dim": s.embedding_dim or s.hidden,
                  "positions": student_positions(s)}
    if s.vocab == "teacher" and not s.embedding_dim:
        return info
    vmap = None
    if s.vocab == "training":
        vmap, kept = training_vocab(tok, texts, s.max_length, s.vocab_size_max)
        info.update(kept)
    compact_embeddings(getattr(student, "hf", student), vmap, s.embedding_dim, tok.pad_token_id)
    return info


@reports_truncation
def stage_baseline(ctx: StageContext) -> dict:
    """Train the RNN baseline on gold labels, and the same RNN distilled from the teacher."""
    from distill.baseline import build_rnn, train_rnn
    from distill.models import count_params, load_model, save_model
    from distill.train import seed_everything

    cfg, b = ctx.cfg, ctx.cfg.baseline
    threads(cfg)
    labels = read_labels(ctx.input("data"))
    teacher = load_model(ctx.input("teacher") / "model", "teacher")
    tok = teacher.tokenizer
    max_len = b.max_length or cfg.teacher.max_length
    summary: dict = {"max_length": max_len, "vocab": b.vocab}
    texts, y = _xy(ctx.input("data"), "train", labels)
    dtexts, dy, tl = _distill_set(ctx.input("logits"), labels)
    vmap = None
    if b.vocab == "training":  # one map from the distillation texts for both RNNs (they hold the gold texts)
        from distill.vocab import training_vocab

        vmap, summary["vocab_kept"] = training_vocab(tok, dtexts, max_len, b.vocab_size_max)
    # the same RNN twice, from the same seed: on the gold labels, and distilled from the teacher's logits
    runs = {"lstm": (texts, y, "gold labels", {}),
            "lstm_distilled": (dtexts, dy, "distilled", {"teacher_logits": tl, "temperature": cfg.distill.temperature})}
    for name, (x, gold, what, distill_args) in runs.items():
        seed_everything(cfg.run.seed)
        rnn = build_rnn(b, len(tok), len(labels), tok.pad_token_id or 0)
        if vmap is not None:
            rnn.restrict_vocab(vmap)
        summary[name] = train_rnn(rnn, tok, x, gold, b, max_len, cfg.run.seed, f"{b.cell}: {what}", **distill_args,
                                  opts=train_options(ctx))
        save_model(ctx.out / name, rnn.cpu(), tok, labels, "rnn", max_len)
    summary.update(count_params(rnn))  # both RNNs have this one shape
    return summary



@reports_truncation
def stage_eval(ctx: StageContext) -> dict:
    """Accuracy and macro-F1 on the held-out test split for every model; writes accuracy.json/.md."""
    from distill.models import count_params, load_model, predict_logits
    from eval.metrics import scores
    from eval.table import markdown

    cfg = ctx.cfg
    threads(cfg)
    labels = read_labels(ctx.input("data"))
    texts, y = _xy(ctx.input("data"), "test", labels)
    rows = []
    for name, (stage, sub) in MODEL_FOLDERS.items():
        folder = ctx.input(stage) / sub
        m = load_model(folder, name)
        logits = predict_logits(m.model, m.tokenizer, texts, m.max_length, cfg.teacher.eval_batch_size,
                                desc=f"eval {name}")
        np.save(ctx.out / f"{name}_test_logits.npy", logits.astype(np.float32))
        rows.append({"model": name, "variant": "fp32", "format": "pytorch",
                     **scores(logits, np.array(y), len(labels)), **count_params(m.model),
                     "size_bytes": (folder / "model.safetensors").stat().st_size})
    teacher_acc = rows[0]["accuracy"]
    for r in rows:
        r["accuracy_retention"] = r["accuracy"] / teacher_acc if teacher_acc else None
    (ctx.out / "accuracy.json").write_text(json.dumps(rows, indent=2))
    cols = ["model", "accuracy", "macro_f1", "accuracy_retention", "params", "non_embedding_params", "size_bytes"]
    table = markdown(rows, cols)
    (ctx.out / "accuracy.md").write_text(f"Test split: {len(texts)} texts\n\n" + table)
    print("\n" + table)
    return {"test_texts": len(texts), "rows": rows}
