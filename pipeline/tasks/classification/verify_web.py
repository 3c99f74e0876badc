"""verify-bundle for a classification web bundle (metadata.json "kind": "web", export/web_bundle.py), after
pipeline.verify has hashed every listed file:

1. metadata.json: the shape below, against labels.json and the tokenizer's files, and against its own digest;
2. the page's tokenizer (the bundle's wordpiece.mjs in node, with metadata's text_normalisation) gives each
   sample's stored ids (skipped, with the reason, without node);
3. the model file, run with onnxruntime in a fresh process on the stored ids, gives each sample's stored
   reference logits (the app bundle's replay and tolerance, logits_check.py);
4. the page itself in headless Chromium labels every sample as stored (web/page_check.mjs, the driver the
   web-bundle stage uses; skipped, with the reason, without Chromium and web/node_modules).
Needs no torch, transformers or onnx.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.tasks.classification.replay import ORT_FORMATS
from pipeline.verify_bundle_meta import cross_check, load_samples, need, need_io, need_labels, require_digest, resolve

PAGE = ("index.html", "app.mjs", "classifier.mjs", "wordpiece.mjs")  # what the page loads, hashed
_REBUILD = "rebuild the web bundle with `make web-bundle`"


def check_metadata(bundle: Path, meta: dict) -> dict:
    """The web bundle's labels, model entry, tokenizer and samples file, checked for the shape verify reads."""
    files = meta["files"]
    need_labels(bundle, meta)
    m = meta.get("model")
    need(isinstance(m, dict) and m.get("format") in ORT_FORMATS and isinstance(m.get("file"), str), bundle,
         f"'model' needs 'file' and 'format' (one of {', '.join(ORT_FORMATS)})")
    need_io(bundle, m, "model")
    for rel, where in ((m["file"], "model.file"), (meta.get("samples_file"), "samples_file"),
                       ("tokenizer/vocab.txt", "the page's vocabulary"), *((p, "the page") for p in PAGE)):
        resolve(bundle, rel, where)
        need(rel in files, bundle, f"{where} = {rel!r} is not in 'files', so its sha256 is unchecked")
    return meta


def page_token_ids(bundle: Path, meta: dict, texts: list[str]) -> list[list[int]] | str:
    """The ids the bundle's own wordpiece.mjs gives each text with metadata's text_normalisation (what the page
    does), or why it cannot run here."""
    from eval.browser import node_path
    from export.web_bundle import js_token_ids

    if node_path() is None:
        return "node is not installed (Node.js 18+ runs the page's tokenizer)"
    norm = {"strip_accents": None, "tokenize_chinese_chars": True, **meta["text_normalisation"],
            "max_length": meta["max_length"]}
    try:
        return js_token_ids(bundle / "tokenizer" / "vocab.txt", norm, texts, bundle / "wordpiece.mjs",
                            f"{bundle}: the page's tokenizer (wordpiece.mjs)")
    except PipelineError as e:  # node's error line, then the fix
        raise PipelineError(f"{e}; {_REBUILD}") from None


def check_token_ids(bundle: Path, meta: dict, samples: list[dict]) -> dict:
    got = page_token_ids(bundle, meta, [s["text"] for s in samples])
    if isinstance(got, str):
        return {"status": "skipped", "reason": got}
    for n, (ids, s) in enumerate(zip(got, samples), 1):
        if ids != s["input_ids"]:
            raise PipelineError(f"{bundle}: the page's tokenizer (wordpiece.mjs with metadata.json's "
                                f"text_normalisation, lowercase = {meta['text_normalisation']['lowercase']}, "
                                f"max_length = {meta['max_length']}) encodes sample {n} ({s['text'][:60]!r}) as "
                                f"{ids[:12]}, not the stored {s['input_ids'][:12]}; metadata.json or samples.json "
                                f"was edited: restore them or {_REBUILD}")
    return {"texts": len(samples), "ids_match": len(samples)}


def check_page(bundle: Path, samples: list[dict], labels: list[str]) -> dict:
    """The demo page in headless Chromium, driven as the web-bundle stage drives it."""
    from eval.browser import unavailable_reason
    from export.web_bundle import drive_page, page_summary

    why = unavailable_reason()
    if why:
        return {"status": "skipped", "reason": why}
    page = page_summary(drive_page(bundle, [s["text"] for s in samples]), samples, labels)
    if page["agreement"] < 1.0 or page["page_errors"] or page["ids_agree"] < page["texts"]:
        raise PipelineError(f"{bundle}: the demo page labelled {page['labels_agree']} of {page['texts']} samples as "
                            f"samples.json expects, with the stored ids on {page['ids_agree']} (page errors: "
                            f"{page['page_errors'][:2]}); the model file and samples are intact, so the page or "
                            f"its onnxruntime-web (ort/) disagrees: restore the bundle or {_REBUILD}")
    return page


def verify_web(bundle: Path, files: dict) -> dict:
    from pipeline.tasks.classification.logits_check import LOGIT_ATOL, LOGIT_RTOL, compare, predict_in_fresh_process

    meta = check_metadata(bundle, files["meta"])
    cross_check(bundle, meta)
    require_digest(bundle, meta)
    samples = load_samples(bundle, meta, "input_ids", [meta["model"]["file"]], _REBUILD)
    tokens = check_token_ids(bundle, meta, samples)
    spec = meta["model"]
    # the replay feeds stored ids by name, as the app bundle's files are fed
    fed = [{**s, "token_ids": s["input_ids"]} for s in samples]
    got = predict_in_fresh_process(bundle, {"web": spec}, fed)[0]["web"]
    model = compare(bundle, meta, samples, spec["file"], got)
    page = check_page(bundle, samples, meta["labels"])
    lines = ["tokenizer: " + (f"{tokens['reason']} (skipped)" if "reason" in tokens else
                               f"wordpiece.mjs gives the stored ids of {tokens['ids_match']}/{len(samples)} samples"),
             f"model: {model['file']}: {model['labels_match']}/{len(samples)} sample labels match, max |logit - "
             f"reference| {model['max_abs_logit_diff']:.3e} (allowed {LOGIT_ATOL:g} + {LOGIT_RTOL:g} x |reference|)",
             "page: " + (f"skipped ({page['reason']})" if "reason" in page else
                         f"{page['labels_agree']}/{page['texts']} labels and {page['ids_agree']} token ids as stored "
                         f"in headless Chromium {page['chromium']}, p50 {page['latency_ms']['p50']:.1f} ms per text")]
    return {"bundle": str(bundle), "kind": "web", "files_checked": files["checked"], "unlisted_files": files["unlisted"],
            "samples": len(samples), "tokenizer": tokens, "models": {"web": model},
            "page": {k: v for k, v in page.items() if k != "page_errors"}, "lines": lines}
