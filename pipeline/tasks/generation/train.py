"""The generation task's training steps: data, teacher, logits, distill, baseline and eval, for decoders.

Same folders as classification: teacher/model (the causal teacher, safetensors), distill/student,
baseline/lstm; settings in [lm] plus the shared sections. Shipping steps (quantize, export, bench) are in
pipeline/tasks/generation/ship.py, the bundle in bundle.py.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch

from pipeline.config import Config
from pipeline.data import write_jsonl
from pipeline.errors import PipelineError
from pipeline.tasks.generation import LM_FOLDERS
from pipeline.tasks.generation.common import encode_prompt, held_out_windows, load_lm
from pipeline.task import StageContext
from pipeline.tasks.common import threads, train_options

log = logging.getLogger("pocketformer")


def stage_data(ctx: StageContext) -> dict:
    """Load plain-text documents, strip markup, split by document; writes train/validation/test.jsonl."""
    from pipeline.tasks.generation.data import build_lm_splits

    splits = build_lm_splits(ctx.cfg)
    for s in ("train", "validation", "test"):
        write_jsonl(ctx.out / f"{s}.jsonl", splits[s])
    (ctx.out / "split.json").write_text(json.dumps(splits["info"], indent=2))
    return {k: splits["info"][k] for k in ("source", "how", "characters")} | {
        "documents": {s: len(v) for s, v in splits["info"]["documents"].items()}}


def stage_teacher(ctx: StageContext) -> dict:
    """Load the causal teacher (packaged GGUF, folder or hub id) once; writes teacher/model (safetensors)."""
    from distill.models import count_params
    from distill.student import check_causal_init
    from distill.teacher import load_causal_teacher, save_causal

    cfg = ctx.cfg
    threads(cfg)
    model, tok = load_causal_teacher(cfg.teacher.model)
    # a student that cannot start from this teacher fails now, not after the logits pass (as classification's)
    check_causal_init(cfg.student, model.config)
    check_eos_and_prompts(cfg, model, tok)
    save_causal(ctx.out / "model", model, tok, {"source": cfg.teacher.model})
    return {"source": cfg.teacher.model, "model_type": model.config.model_type,
            "layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size,
            "vocab": model.config.vocab_size, **count_params(model)}


def check_eos_and_prompts(cfg, model, tok) -> None:
    """What the stages after training would refuse, checked once the tokenizer is loaded: an eos token (documents
    are joined with it, generation stops at it, the bundle names it), and every lm.prompts item within the
    students' positions with the tokens generated after it (eval's samples, the quantize / export checks and
    the bundle's samples)."""
    from export.hf_layout import special_ids
    from pipeline.tasks.generation.data import encode_prompt

    try:
        special_ids(tok, model.config)
    except PipelineError:
        raise PipelineError(f"teacher.model {cfg.teacher.model!r}: its tokenizer and config name no eos token, which "
                            f"ends every training document and every generation, and which the bundle's runtimes "
                            f"stop at; give the tokenizer one (tokenizer.eos_token = ...; tokenizer.save_pretrained("
                            f"folder)) or pick another teacher") from None
    lm = cfg.lm
    for i, text in enumerate(lm.prompts):
        new = max(lm.sample_tokens, lm.check_tokens) if i == 0 else lm.sample_tokens  # the first is the check's
        if (n := len(encode_prompt(tok, text))) + new > lm.max_cache:
            raise PipelineError(f"'lm.prompts' item {i} ({text[:40]!r}...) is {n} tokens: with {new} new tokens "
                                f"after it, it exceeds the students' positions 'lm.max_cache' ({lm.max_cache}); "
                                f"shorten it, or raise lm.max_cache to at least {n + new}")


def stage_logits(ctx: StageContext) -> dict:
    """Tokenize the training split, pick lm.teacher_windows windows and cache the teacher's top-k logits
    on them (split across ranks under torchrun); writes windows.npy (N, T+1), topk_ids.npy / topk_logits.npy
    (N, T, k), vocab_map.json."""
    from distill import distributed as D
    from distill.teacher import eos_id, load_causal_folder
    from distill.vocab import VocabMap
    from distill.precision import choose_precision
    from distill.train import device
    from pipeline.tasks.generation.data import shifted_windows, split_windows, start_ids, token_stream, windows
    from tqdm.auto import tqdm

    cfg, lm = ctx.cfg, ctx.cfg.lm
    threads(cfg)
    teacher, tok = load_causal_folder(ctx.input("teacher") / "model")
    check_context(lm.context_length, teacher.config)
    sep = eos_id(tok, teacher)
    tokens = token_stream(tok, ctx.input("data"), "train", sep)
    start = start_ids(tok)  # the tokenizer's <bos>, if it adds one
    # eval scores the test split in these windows: one too short to hold one fails here, before any training
    windows(token_stream(tok, ctx.input("data"), "test", sep), lm.context_length, "test split", 1, start)
    vmap = VocabMap.build(tokens, teacher.config.vocab_size, lm.restrict_vocab, always=(sep, *start))
    win, extra = split_windows(windows(tokens, lm.context_length, "training split", 0, start), lm.teacher_windows,
                               lm.extra_windows)  # (N, T + 1), (M, T + 1)
    shifted = 0
    if lm.offset_windows and lm.teacher_windows > len(win):  # a small corpus: the teacher's share from shifted windows
        more = shifted_windows(tokens, lm.context_length, lm.teacher_windows - len(win), start)
        win, shifted = np.concatenate([win, more]), len(more)
        log.info("[logits] the training split holds %d windows; the teacher also scores %d shifted by half a "
                 "context (lm.offset_windows)", len(win) - shifted, shifted)
    short = window_shortfall(len(win), len(extra), lm.teacher_windows, lm.extra_windows, lm.context_length, shifted)
    for note in short:
        log.warning("[logits] %s", note)
    k = min(lm.top_k, teacher.config.vocab_size)
    bs = lm.eval_batch_size
    starts = list(range(0, len(win), bs))
    part: dict[int, tuple] = {}  # batch start -> (top-k ids, top-k logits, summed NLL)
    dev = device()  # the GPU when there is one: the teacher pass is most of this stage's time
    teacher.to(dev)
    on = dev.type
    choice = choose_precision(lm.teacher_precision, "lm.teacher_precision")  # logged with its reason
    # under torchrun each rank scores every W-th batch and the pieces are merged (distill/distributed.py)
    with torch.no_grad(), torch.autocast(on, dtype=torch.bfloat16, enabled=choice.precision == "bf16"):
        for i in tqdm(D.shard(starts), desc="teacher top-k logits", unit="batch", mininterval=2.0,
                      disable=not D.is_main()):
            x = torch.from_numpy(win[i: i + bs]).to(dev)  # (B, T + 1)
            logits = teacher(input_ids=x[:, :-1]).logits.float()  # (B, T, V)
            # (B * T, V) rows, not (B, V, T): a log-softmax over contiguous ids takes half the time
            nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="sum").item()
            top = logits.topk(k, dim=-1)  # (B, T, k)
            part[i] = (top.indices.cpu().numpy().astype(np.int32), top.values.cpu().numpy().astype(np.float16),
                       nll)
    shares = D.gather(part)
    for other in shares:
        part.update(other)
    ids = np.zeros((len(win), lm.context_length, k), dtype=np.int32)
    vals = np.zeros((len(win), lm.context_length, k), dtype=np.float16)
    nll = 0.0
    for i in starts:  # batch order, so the NLL sums as in one process
        ids[i: i + bs], vals[i: i + bs], batch_nll = part[i]
        nll += batch_nll
    for fname, array in (("windows", win), ("extra_windows", extra), ("topk_ids", ids), ("topk_logits", vals)):
        np.save(ctx.out / f"{fname}.npy", array)
    vmap.save(ctx.out)
    n_tok = win.shape[0] * lm.context_length
    return {"train_tokens": int(len(tokens)), "windows": int(len(win)), "extra_windows": int(len(extra)),
            "scored_tokens": int(n_tok), "top_k": k, "teacher_precision": choice.precision,
            "teacher_precision_reason": choice.reason,
            "student_vocab": vmap.size, "teacher_vocab": vmap.teacher_vocab,
            "teacher_train_perplexity": float(np.exp(nll / n_tok)),
            "teacher_batches_per_rank": [len(p) for p in shares],
            "offset_windows": shifted,
            "windows_asked": {"teacher_windows": lm.teacher_windows, "extra_windows": lm.extra_windows},
            "window_shortfall": short}


def check_context(context_length: int, tcfg) -> None:
    """lm.context_length must fit the teacher's position table: beyond it a RoPE teacher scores positions it
    never saw (and a learned table fails with an index error), so its top-k would be no target."""
    positions = getattr(tcfg, "max_position_embeddings", None)
    if positions and context_length > positions:
        raise PipelineError(f"lm.context_length = {context_length}, but the teacher ({tcfg.model_type}) has "
                            f"positions for {positions} tokens only (max_position_embeddings). Set "
                            f"lm.context_length <= {positions}")


def window_shortfall(scored: int, extra: int, want_scored: int, want_extra: int, context: int,
                     shifted: int = 0) -> list[str]:
    """Why the training split gave fewer windows than lm.teacher_windows / lm.extra_windows ask for (0 and -1
    ask for all there are): one line per setting short, with the numbers and the fix. shifted: how many of the
    scored windows lm.offset_windows added (not the split's own)."""
    out = []
    fix = f"Give more training text or lower lm.context_length ({context})"
    if want_scored > 0 and scored < want_scored:
        more = f" (and {shifted} more shifted by half a context, lm.offset_windows)" if shifted else ""
        out.append(f"lm.teacher_windows = {want_scored}, but the training split holds {scored - shifted} windows of "
                   f"lm.context_length + 1 tokens{more}: the teacher scored {scored}. {fix}, or lower "
                   f"lm.teacher_windows")
    if want_extra > 0 and extra < want_extra:
        out.append(f"lm.extra_windows = {want_extra}, but only {extra} windows were left after the "
                   f"{scored} teacher-scored ones: {extra} extra windows used. {fix}, or lower lm.extra_windows")
    return out


def _student_targets(logits_dir: Path, vmap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The training windows in student ids, teacher-scored ones first, then the extra (cross-entropy only) ones
    (N + M, T + 1), and the teacher top-k of the first N, teacher ids mapped to student ids (N, T, k): what the
    student, the distilled LSTM and the search train on."""
    win = vmap.to_student(np.concatenate([np.load(logits_dir / "windows.npy"),
                                          np.load(logits_dir / "extra_windows.npy")]))
    ids = vmap.to_student(np.load(logits_dir / "topk_ids.npy").astype(np.int64))
    return win, ids, np.load(logits_dir / "topk_logits.npy")


def _model_meta(folder: Path, kind: str, cfg: Config, vmap) -> None:
    """A saved model folder's vocab_map.json and pocketformer.json (kind and positions)."""
    vmap.save(folder)
    (folder / "pocketformer.json").write_text(json.dumps(
        {"kind": kind, "context_length": cfg.lm.context_length, "max_positions": cfg.lm.max_cache}, indent=2))


def _pca_note(cfg: Config, rows: int) -> str | None:
    """What teacher-pca did over a restricted vocabulary smaller than student.hidden (warned and recorded in
    the distill summary): it has fewer principal directions than the student has columns."""
    from distill.embeddings import pca_components

    hidden = cfg.student.hidden
    n = pca_components(rows, hidden)
    if cfg.student.init != "teacher-pca" or n == hidden:
        return None
    note = (f"student.init = 'teacher-pca': the restricted vocabulary has {rows} rows, fewer than student.hidden = "
            f"{hidden}, so the embedding starts from {n} principal directions and {hidden - n} zero columns. For a "
            f"full PCA start give more training text, set lm.restrict_vocab = false, or lower student.hidden")
    log.warning("[distill] %s", note)
    return note


def stage_distill(ctx: StageContext) -> dict:
    """Build the small decoder student over the restricted vocabulary and distil it from the cached
    top-k; writes distill/student (HF folder + vocab_map.json)."""
    from distill.distiller import distill_lm
    from distill.models import count_params
    from distill.student import build_student
    from distill.teacher import load_causal_folder
    from distill.train import seed_everything
    from distill.vocab import VocabMap

    cfg = ctx.cfg
    threads(cfg)
    seed_everything(cfg.run.seed)
    teacher, tok = load_causal_folder(ctx.input("teacher") / "model")
    vmap = VocabMap.load(ctx.input("logits"))
    student = build_student(cfg.student, teacher, vmap, max(cfg.lm.max_cache, cfg.lm.context_length), task="generation")
    win, ids, vals = _student_targets(ctx.input("logits"), vmap)
    summary = distill_lm(student, win, ids, vals, cfg.distill, cfg.run.seed, train_options(ctx))
    note = _pca_note(cfg, vmap.size)
    if note:
        summary["init_note"] = note
    folder = ctx.out / "student"
    student.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    _model_meta(folder, "hf-causal", cfg, vmap)
    return {**summary, **count_params(student), "vocab": vmap.size, "init": cfg.student.init,
            "teacher_params": count_params(teacher)["params"]}


def stage_baseline(ctx: StageContext) -> dict:
    """Train the LSTM language model on the same windows and vocabulary as the student, once on the next tokens
    alone and once distilled from the teacher's cached top-k; writes baseline/lstm and baseline/lstm_distilled."""
    from distill.baseline import build_lstm_lm, train_lstm_lm
    from distill.models import count_params
    from distill.train import seed_everything
    from distill.vocab import VocabMap
    from transformers import AutoTokenizer

    cfg = ctx.cfg
    threads(cfg)
    vmap = VocabMap.load(ctx.input("logits"))
    win, ids, vals = _student_targets(ctx.input("logits"), vmap)
    tok = AutoTokenizer.from_pretrained(ctx.input("teacher") / "model")
    summary: dict = {}
    # the same LSTM twice, from the same seed and over the same batches: on the next tokens, and distilled
    runs = {"lstm": {}, "lstm_distilled": {"teacher": (ids, vals), "temperature": cfg.distill.temperature,
                                            "desc": "lstm language model: distilled"}}
    for name, distill_args in runs.items():
        seed_everything(cfg.run.seed)
        model = build_lstm_lm(cfg.baseline, vmap.size)
        summary[name] = train_lstm_lm(model, win, cfg.baseline, cfg.run.seed, train_options(ctx), **distill_args)
        folder = ctx.out / name
        model.save(folder)
        tok.save_pretrained(folder)
        _model_meta(folder, "lstm", cfg, vmap)
    return {**summary, **count_params(model)}  # both LSTMs have this one shape


def stage_eval(ctx: StageContext) -> dict:
    """Perplexity on the held-out test documents for teacher, student and LSTM (same windows, teacher
    tokens) and greedy continuations of lm.prompts; writes perplexity.json/.md and samples.md."""
    from distill.models import count_params
    from eval.metrics import greedy, perplexity, samples_markdown
    from eval.table import markdown

    cfg = ctx.cfg
    threads(cfg)
    rows, cont, tok, win = [], {}, None, None
    for name, (stage, sub) in LM_FOLDERS.items():
        folder = ctx.input(stage) / sub
        lm, t = load_lm(folder, name)
        if tok is None:
            tok, win = t, held_out_windows(ctx, t)
            if 0 < cfg.lm.eval_windows and len(win) < cfg.lm.eval_windows:  # as logits warns of its shortfall
                log.warning("[eval] the test split holds %d windows of %d tokens, fewer than lm.eval_windows = %d: "
                            "perplexity is on all %d (%d tokens); add test text for the number asked", len(win),
                            cfg.lm.context_length, cfg.lm.eval_windows, len(win), len(win) * cfg.lm.context_length)
        ppl = perplexity(lm, win, cfg.lm.eval_batch_size)
        rows.append({"model": name, "variant": "fp32", "format": "pytorch", **ppl, **count_params(lm.model),
                     "size_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors"))})
        prompts = [encode_prompt(tok, p) for p in cfg.lm.prompts]
        cont[name] = [greedy(lm, p, cfg.lm.sample_tokens) for p in prompts]
    base = rows[0]["perplexity"]
    for r in rows:
        r["perplexity_ratio"] = r["perplexity"] / base
    (ctx.out / "perplexity.json").write_text(json.dumps(rows, indent=2))
    table = markdown(rows, ["model", "perplexity", "perplexity_ratio", "params", "non_embedding_params", "size_bytes"])
    (ctx.out / "perplexity.md").write_text(f"Held-out test documents: {len(win)} windows, {rows[0]['tokens']} "
                                           f"tokens\n\n" + table)
    (ctx.out / "samples.md").write_text(samples_markdown(tok, list(cfg.lm.prompts), prompts, cont))
    print("\n" + table)
    return {"test_windows": int(len(win)), "rows": rows}
