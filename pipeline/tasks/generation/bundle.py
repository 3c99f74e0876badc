"""Stage wiring for bundle when run.task = "generation": the student decoder (KV cache, int8 by default)
over the teacher tokenizer's ids, the tokenizer, genai_config.json / config.json / generation_config.json,
greedy samples, Kotlin / Swift samples and a README, in the layout onnxruntime-genai and transformers.js
load (export/hf_layout.py); written to runs/<run>/bundle/ and published to <bundle.dist_dir>/<run>/."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.tasks.generation.common import check_prompt, encode_prompt, load_lm, ort_lm, start_ids
from pipeline.tasks.generation.replay import genai_tokenizer_unread
from pipeline.tasks.generation.ship import lm_folder, reference_continuations
from pipeline.tasks.common import threads
from pipeline.task import StageContext

log = logging.getLogger("pocketformer")
# the shipped variant when bundle.variant = "auto": int8 first (a quarter of the size, faster on phones)
AUTO_ORDER = ("int8-dynamic", "fp32")


def choose_variant(onnx_rows: list[dict], variant: str) -> dict:
    """The quantize-stage row of the student graph to ship. Only the Llama student ships: the LSTM has no
    runtime that generates from a folder, and the teacher is the reference, not a phone model. That
    bundle.model is "auto" or "student", quantize.models holds the student and bundle.variant is one of its
    graphs was checked when the config loaded (tasks/generation/checks.py)."""
    mine = {r["variant"]: r for r in onnx_rows if r["model"] == "student"}
    return next(mine[v] for v in (*AUTO_ORDER, *mine) if v in mine) if variant == "auto" else mine[variant]


def stage_bundle(ctx: StageContext) -> dict:
    """The generation app bundle: the student decoder over teacher ids, tokenizer, runtime configs, greedy
    samples that verify-bundle replays, Kotlin / Swift samples; published to <bundle.dist_dir>/<run>/."""
    from export import app_samples
    from export import hf_layout as H
    from export.bundle import finish, io_spec
    from export.checks import check_greedy
    from export.ort_session import OrtLM
    from pipeline.manifest import library_versions

    cfg, b, lmc = ctx.cfg, ctx.cfg.bundle, ctx.cfg.lm
    threads(cfg)
    qdir = ctx.upstream("quantize")
    row = choose_variant(json.loads((qdir / "onnx_rows.json").read_text()), b.variant)
    variant = row["variant"]  # one of H.GRAPH_FILES: the quantize stage builds those only
    lm, tok = load_lm(lm_folder(ctx, "student"), "student")
    context = lm.max_positions  # the student's exported positions (load_lm)
    out = ctx.out
    tok.save_pretrained(out)  # tokenizer.json + tokenizer_config.json (+ special tokens): the teacher's
    if not (out / "tokenizer.json").is_file():
        raise PipelineError(f"the teacher's tokenizer ({type(tok).__name__}) has no tokenizer.json (not a fast "
                            f"tokenizer); onnxruntime-genai and transformers.js need one")
    # transformers.js' text-generation pipeline adds special tokens only when this flag says so; it must agree
    # with the <bos> that training put in front of every window and prompt (encode_prompt)
    start = start_ids(tok)
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc["add_bos_token"] = bool(start)
    # the teacher's chat template (SmolLM2's <|im_start|> turns): the student trained on plain text, and those
    # tokens are ids it never saw (they get the lowest logit), so a runtime applying it would prompt it wrongly
    tc.pop("chat_template", None)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    for extra in ("vocab_map.json", "pocketformer.json"):  # save_pretrained never writes these; stale copies
        (out / extra).unlink(missing_ok=True)
    graph_rel = H.GRAPH_FILES[variant]
    graph = H.map_vocab(qdir / row["path"], out / graph_rel, lm.vmap)

    ids = H.special_ids(tok, lm.model.config)
    vocab = lm.vmap.teacher_vocab if lm.vmap is not None else lm.model.config.vocab_size
    shape = H.decoder_shape(lm.model.config)
    (out / "genai_config.json").write_text(json.dumps(H.genai_config(graph_rel, shape, ids, vocab, context), indent=2))
    (out / "config.json").write_text(json.dumps(H.hf_config(lm.model.config, vocab, ids, context), indent=2))
    (out / "generation_config.json").write_text(json.dumps(H.generation_config(ids, context), indent=2))

    # the shipped graph must decode like the pipeline's graph, token for token, before anything is published
    source_runner = ort_lm(qdir / row["path"], lm)
    shipped = OrtLM(graph, max_positions=context)
    prompt = check_prompt(ctx, tok)
    want = reference_continuations(source_runner, lm, [prompt], lmc.check_tokens)[0]
    check = check_greedy(want, shipped.generate(prompt, lmc.check_tokens), f"bundle {graph_rel}", must_match=True,
                         sides=("quantize stage's graph", "bundle's graph"),
                         fix=f"nothing is published; ship another file with bundle.variant (now {variant!r})")
    prompts = [encode_prompt(tok, p) for p in lmc.prompts]
    conts = reference_continuations(source_runner, lm, prompts, lmc.sample_tokens)
    samples = []
    for text, p, c in zip(lmc.prompts, prompts, conts):
        c = H.cut_at_eos(c, ids["eos_token_id"])
        samples.append({"prompt": text, "prompt_ids": p, "max_new_tokens": lmc.sample_tokens,
                        "continuation_ids": c, "continuation": tok.decode(c, skip_special_tokens=True)})
    (out / "samples.json").write_text(json.dumps(samples, indent=2))

    dist = Path(b.dist_dir) / cfg.run.name
    meta = {"run": cfg.run.name, "task": "generation", "kind": "app", "dist_path": str(dist),
            "model": {"name": "student", "variant": variant, "params": row.get("params"),
                      "perplexity": row.get("perplexity"), "choice": f"bundle.variant = {b.variant}"},
            "graph": {"file": graph_rel, "transformers_js_dtype": H.JS_DTYPE[variant], **shape,
                      "vocab_size": vocab, "context_length": context,
                      "vocabulary": "teacher ids in and out; ids the student never saw in training get the "
                                    "lowest float logit (never picked)",
                      **io_spec(shipped.session)},
            # context_length is the position table (lm.max_cache); training saw windows of this many ids
            "trained_context_length": lmc.context_length,
            "tokenizer": "tokenizer.json", "special_ids": ids, "prompt_start_ids": start,
            "samples_file": "samples.json",
            "samples": samples[:1], "greedy_check": check, "versions": library_versions(),
            # why onnxruntime-genai's tokenizer cannot read tokenizer.json (None: it can): the README's sample says
            "genai_tokenizer_unread": genai_tokenizer_unread(out)}
    if unread := meta["genai_tokenizer_unread"]:  # verify-bundle says the same; the README's Python sample would fail
        log.warning("WARNING: onnxruntime-genai's tokenizer %s: an app on onnxruntime-genai has to encode its prompts "
                    "another way (the tokenizers library); the bundle's graph runs there over ids", unread)
    app_samples.write_generation_samples(out, meta)
    meta = finish(out, meta, app_samples.generation_readme, dist)
    print(f"[bundle] student {variant} decoder: {len(meta['files'])} files -> {dist} "
          f"({len(samples)} greedy samples, check {check['matching_prefix']}/{check['tokens']} tokens)")
    return {"model": "student", "variant": variant, "dist": str(dist), "greedy_check": check,
            "files": len(meta["files"])}
