"""Stage wiring for web-bundle: the browser bundle (export/web_bundle.py), written to runs/<run>/web-bundle/
and published to <bundle.dist_dir>/<run>-web/ beside the phone bundle."""
from __future__ import annotations

import json
from pathlib import Path

from pipeline.data import read_labels, read_split
from pipeline.errors import PipelineError
from pipeline.task import StageContext
from pipeline.tasks.skips import skip_web_bundle


def page_tokenizer_mismatch(tokenizer, tok_dir: Path) -> str | None:
    """How the tokenizer differs from what web/demo/wordpiece.mjs implements (None: it is that): BERT's
    WordPiece with [CLS] / [SEP] / [UNK] and ## pieces, read from vocab.txt, whatever the class (DistilBERT,
    ELECTRA and MobileBERT ship BERT's tokenizer under their own names)."""
    from export.string_model import wordpiece_settings

    wp = wordpiece_settings(tokenizer)
    if wp is None:
        return f"({type(tokenizer).__name__}) is not"
    page = {"cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]", "suffix_indicator": "##"}
    other = {k: wp[k] for k in page if wp[k] != page[k]}
    if other:
        return f"({type(tokenizer).__name__}) uses {other} where the page expects {page}"
    return None if (tok_dir / "vocab.txt").is_file() else "has no vocab.txt (the file the page reads)"


def stage_web_bundle(ctx: StageContext) -> dict:
    """The web bundle: the student file fastest on bundle.web_target, the client-side demo page, checked.
    The candidates include the export stage's browser variants (<variant>-fastgelu.ort, GELU as FastGelu),
    timed by the bench like the others; metadata.json model.gelu says which GELU form shipped and why.

    Reads quantize/ and export/variants.json, quantize/<model>/tokenizer/, report/results.json and
    data/test.jsonl. Writes web-bundle/ (see export/web_bundle.py) and publishes it to
    <bundle.dist_dir>/<run name>-web/. The page's tokenizer must give the Python tokenizer's ids on at least
    bundle.min_agreement of the test split, and the page, driven in headless Chromium, must give every
    stored sample its expected label (skipped, with the reason, where Chromium is missing).
    """
    import shutil

    import numpy as np
    from transformers import AutoTokenizer

    from eval.browser import unavailable_reason
    from export import web_bundle as W
    from export.bundle import choose, finish, io_spec, latency_for, normalisation, write_metadata
    from export.checks import agreement_texts, ort_runner, predict, require_texts
    from export.hf_layout import cap_tokenizer
    from export.ort_session import ort_session
    from export.web_model import gelu_record
    from pipeline.manifest import library_versions
    from pipeline.tasks.classification.replay import run_models

    cfg, b = ctx.cfg, ctx.cfg.bundle  # web_target is a timed browser target: checked when the config loads
    if not b.web:
        return skip_web_bundle(ctx, "bundle.web = false")
    why = W.runtime_missing()
    if why:
        return skip_web_bundle(ctx, why)
    rows = json.loads((ctx.input("quantize") / "variants.json").read_text()) + \
        json.loads((ctx.input("export") / "variants.json").read_text())
    results = json.loads((ctx.input("report") / "results.json").read_text())
    row = choose(rows, results, b.model, b.variant, b.accuracy_window, cfg.source, target=b.web_target,
                 formats=W.FORMATS)
    name, variant, fmt = row["model"], row["variant"], row["format"]
    tok_src = ctx.input("quantize") / name / "tokenizer"
    why = page_tokenizer_mismatch(AutoTokenizer.from_pretrained(tok_src), tok_src)
    if why:  # the page's tokenizer (web/demo/wordpiece.mjs) is BERT's WordPiece; other families would mislabel
        return skip_web_bundle(ctx, f"the page's JavaScript tokenizer is BERT WordPiece and {name}'s tokenizer "
                                    f"{why}; set bundle.web = false to silence this")
    # the JavaScript tokenizer's gate needs enough test texts to mean its share (export/checks.py)
    texts = [r["text"] for r in read_split(ctx.input("data"), "test")]
    needed = agreement_texts(b.min_agreement)
    require_texts(len(texts), needed, "the web bundle's tokenizer agreement check",
                  f"bundle.min_agreement = {b.min_agreement:g}", "lower bundle.min_agreement (a minimum m needs "
                  "1 / (1 - m) texts, at most 100)")
    out, rel = ctx.out, f"model/{row['model']}-{row['variant']}.{row['format']}"
    (out / "model").mkdir()
    shutil.copy2(ctx.run_dir / row["file"], out / rel)
    shutil.copytree(tok_src, out / "tokenizer")
    max_length = json.loads((out / "tokenizer" / "pocketformer.json").read_text())["max_length"]
    cap_tokenizer(out / "tokenizer", max_length)  # a page or app running tokenizer.json must cut where we do
    W.copy_page(out)
    labels = read_labels(ctx.input("data"))
    (out / "labels.json").write_text(json.dumps(labels, indent=2))
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    norm = normalisation(tokenizer, max_length)
    gelu = gelu_record(row, rows)  # which GELU form ships and why (the FastGelu rows carry their check)

    # the page's tokenizer against the Python one, on the whole test split
    py_ids = [tokenizer(t, truncation=True, max_length=max_length)["input_ids"] for t in texts]
    tok_check = W.tokenizer_check(W.js_token_ids(out / "tokenizer" / "vocab.txt", norm, texts), py_ids, texts,
                                  b.min_agreement) | {"needed_texts": needed}
    if tok_check["agreement"] < b.min_agreement:
        raise PipelineError(f"the web bundle's JavaScript tokenizer (web/demo/wordpiece.mjs) gives the Python "
                            f"tokenizer's ids on only {tok_check['agreement']:.2%} of {len(texts)} test texts "
                            f"(bundle.min_agreement = {b.min_agreement:.2%}); first: {tok_check['examples'][:1]}")

    # samples: what the shipped file gives (ONNX Runtime in Python), for the page to reproduce
    session = ort_session(out / rel, 1)
    sample_texts = texts[: b.sample_texts]
    logits = predict(ort_runner(session), tokenizer, sample_texts, max_length, 1)  # (N, C), batch 1 as the page
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    samples = [{"text": t, "expected_label": labels[int(logits[i].argmax())],
                "probabilities": [round(float(v), 6) for v in probs[i]],
                "logits": [round(float(v), 6) for v in logits[i]], "input_ids": py_ids[i]}
               for i, t in enumerate(sample_texts)]
    spec = io_spec(session)
    # each sample's full-precision logits of the shipped file through the replay verify-bundle runs (batch 1,
    # one thread, the stored ids), as the app bundle stores them: verify-bundle compares the file against these
    refs = run_models(out, {"web": {"file": rel, "format": fmt, **spec}},
                      [{"text": s["text"], "token_ids": s["input_ids"]} for s in samples])["web"]
    for s, r in zip(samples, refs):
        s["reference_logits"] = {rel: r}
    (out / "samples.json").write_text(json.dumps(samples, indent=2))

    dist = Path(b.dist_dir) / f"{cfg.run.name}-web"
    meta = {"run": cfg.run.name, "task": "classification", "kind": "web", "dist_path": str(dist),
            "model": {"name": name, "variant": variant, "format": fmt, "file": rel, "output": "logits",
                      "choice": row["choice"], "gelu": gelu, **spec},
            "labels": labels, "label_map": {str(i): lab for i, lab in enumerate(labels)}, "max_length": max_length,
            "text_normalisation": norm,
            "accuracy": {"accuracy": row["accuracy"], "macro_f1": row.get("macro_f1"), "split": "test",
                         # the row's own stage batched the texts (teacher.eval_batch_size, read there)
                         "source": f"the {fmt} file, scored by the quantize / export stage in padded batches (an "
                                   f"int8 file's score can move in the fourth digit one text per call, as a page "
                                   f"runs it)"},
            "headline_length": results.get("plan", {}).get("headline_length"),
            "latency": latency_for(results, name, variant, fmt),
            "runtime": {"onnxruntime-web": W.ort_web_version(), "backend": "wasm", "threads": 1},
            "tokenizer_check": tok_check, "samples_file": "samples.json", "versions": library_versions()}
    meta = write_metadata(out, meta)  # the page reads metadata.json, so it exists before the page check
    browser_why = unavailable_reason(cfg.bench.browser_executable)
    if browser_why:
        meta["page_check"] = {"status": "skipped", "reason": browser_why}
    else:
        page = W.page_summary(W.drive_page(out, sample_texts, cfg.bench.browser_executable), samples, labels)
        if page["agreement"] < 1.0 or page["page_errors"]:
            raise PipelineError(f"the web bundle's demo page labelled {page['labels_agree']} of {page['texts']} "
                                f"samples as ONNX Runtime does (page errors: {page['page_errors'][:2]}); the page "
                                f"or onnxruntime-web {W.ort_web_version()} disagrees with the {fmt} file")
        meta["page_check"] = page
    meta = finish(out, meta, W.readme, dist)
    page = meta["page_check"]
    print(f"[web-bundle] {name} {variant} .{fmt} (chosen on {b.web_target}): {len(meta['files'])} files -> {dist}; "
          f"tokenizer ids agree on {tok_check['agreement']:.2%} of {len(texts)} test texts; page check: "
          + (f"{page['labels_agree']}/{page['texts']} labels, p50 {page['latency_ms']['p50']:.1f} ms per text"
             if "labels_agree" in page else page["reason"]))
    return {"model": name, "variant": variant, "format": fmt, "target": b.web_target, "rule": row["choice"]["rule"],
            "dist": str(dist), "tokenizer_check": {k: tok_check[k] for k in ("texts", "differ", "agreement")},
            "page_check": {k: v for k, v in page.items() if k != "page_errors"}, "files": len(meta["files"])}
