"""The app bundle: which model ships (the choice rule), what metadata.json says about it, and hashing.

Layout of a bundle folder (runs/<run>/bundle/ and its published copy dist/<run>/):

    model/<model>-<variant>.ort           token ids in, logits out (ONNX Runtime Mobile)
    model/<model>-<variant>.onnx          the same model as ONNX (the source of the .ort)
    model/<model>-<variant>-text.onnx     raw text in (tokenizer inside, onnxruntime-extensions), logits out
    model/<model>-<coreml variant>.mlpackage   Core ML package, token ids in (when the export stage made one)
    tokenizer/                            the tokenizer files the model was trained with
    labels.json, samples.json, metadata.json, README.md, android/*.kt, ios/*.swift
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from export.hashing import METADATA, sha256_file
from pipeline.errors import PipelineError

# 2: samples.json holds token ids and reference logits per model file; 3: metadata.json says its "kind" (app /
# web) and carries metadata_sha256, a digest of itself, so an edited max_length or label list fails verify
SCHEMA_VERSION = 3
DIGEST_KEY = "metadata_sha256"
CHOICE_TARGET = "mobile-cpu"
# Core ML variant that pairs with an ONNX variant (same kind of weights) when the model has several
COREML_FOR = {"int8-dynamic": "int8", "int8-static": "int8", "fp16": "fp16", "fp32": "fp16",
              "optimized": "fp16"}


def choose(export_rows: list[dict], results: dict, model: str, variant: str, window: float, cfg_source: str,
           failed: dict[tuple[str, str], str] | None = None, target: str = CHOICE_TARGET,
           formats: tuple[str, ...] = ("ort",)) -> dict:
    """The file to ship and why, chosen on `target`'s rows (the phone bundle: mobile-cpu and .ort files; the
    web bundle: browser-wasm and .onnx or .ort files, export/web_bundle.py).

    auto: among the student's files in `formats` with an accuracy, keep those within `window` (a fraction,
    0.01 = 1 point) of the best one, and take the fastest p50 on `target` at the report's headline length;
    ties and rows without a time there fall back to the smallest file. An explicit model / variant must exist.
    A variant that failed its check (here or in `failed`: (model, variant) -> why) is never a candidate."""
    # function-level: verify-bundle imports this module without eval/
    from eval.rows import pick_p50 as row_p50, pick_source, row_key

    length = results.get("plan", {}).get("headline_length", 64)
    kinds = " / ".join(f".{f}" for f in formats)
    failed = {**(failed or {}), **{(r["model"], r["variant"]): r.get("check", {}).get("reason", "its check failed")
                                   for r in export_rows if r["format"] in formats and r.get("status") == "failed"}}
    ort = [r for r in export_rows if r["format"] in formats and (r["model"], r["variant"]) not in failed]
    latency = {row_key(r): r for r in results.get("rows", [])}
    proxy = results.get("targets", {}).get(target, {}).get("proxy", "")
    want_model = "student" if model == "auto" else model
    mine = [r for r in ort if r["model"] == want_model]
    if not mine and (want_model, variant) not in failed:
        made = sorted({r["model"] for r in ort}) or ["none"]
        lost = [why for (m, _), why in failed.items() if m == want_model]
        if lost:  # the model is in quantize.models: its files were made and failed their checks
            raise PipelineError(f"no {kinds} file of '{want_model}' passed its check ({'; '.join(lost)}); add 'fp32' "
                                f"(lossless) to export.ort_variants, lower quantize.min_argmax_agreement, or set "
                                f"bundle.model to another model (files of: {', '.join(made)}), and run `python -m "
                                f"pipeline export --config {cfg_source}`")
        raise PipelineError(f"no {kinds} file for model '{want_model}' in the quantize/export variants (they have: "
                            f"{', '.join(made)}); add it to quantize.models, and to export.ort_variants a variant "
                            f"it can have (an LSTM has no 'optimized'), and run `python -m pipeline export "
                            f"--config {cfg_source}`")
    if variant != "auto":
        pick = [r for r in mine if r["variant"] == variant]
        if (want_model, variant) in failed:
            raise PipelineError(f"bundle.variant = '{variant}': {want_model} {variant} failed its check and is never "
                                f"shipped ({failed[(want_model, variant)]}); choose another variant or 'auto'")
        # the quantize stage skips what a model cannot have (a teacher type ORT has no fusions for); the report
        # carries its reason (results.json not_made)
        skip = next((s.get("reason") for s in results.get("not_made", [])
                     if (s.get("model"), s.get("variant")) == (want_model, variant)), None)
        if not pick and skip:
            raise PipelineError(f"bundle.variant = '{variant}': the quantize stage made no {variant} file of "
                                f"{want_model} ({skip}); choose one it made ({', '.join(r['variant'] for r in mine)}) "
                                f"or 'auto'")
        if not pick:
            raise PipelineError(f"bundle.variant = '{variant}' has no {kinds} file for {want_model} (made: "
                                f"{', '.join(r['variant'] for r in mine)}); add it to export.ort_variants (and "
                                f"quantize.variants) and run `python -m pipeline export --config {cfg_source}`")
        return {**pick[0], "choice": {"rule": f"set in the config: bundle.model = {model}, bundle.variant = "
                                               f"{variant}", "target": target, "proxy": proxy, "candidates": []}}
    scored = [r for r in mine if r.get("accuracy") is not None]
    if not scored:
        raise PipelineError(f"the {want_model} {kinds} rows carry no accuracy; run `python -m pipeline quantize "
                            f"--config {cfg_source}` (it scores every variant) and then export")
    best = max(r["accuracy"] for r in scored)
    within = [r for r in scored if r["accuracy"] >= best - window - 1e-12]

    def p50(r):
        return row_p50(latency.get(row_key(r), {}), target, length,
                       results.get("rows", []))

    def source(r):
        return pick_source(latency.get(row_key(r), {}), target, length)

    timed = [(p, r) for r in within if (p := p50(r))]
    if timed:
        pick = min(timed, key=lambda t: (t[0], -t[1]["accuracy"], t[1]["size_bytes"]))[1]
        sources = {source(r) for _, r in timed}
        how = ""
        level = "the median over rounds of p50 / the round's median over every file, times the median round"
        if sources == {"interleaved rounds"}:
            how = f" (every file timed in interleaved rounds: {level})"
        elif "interleaved rounds" in sources:
            how = f" (for the files timed in interleaved rounds: {level}; else the length sweep's p50)"
        rule = (f"fastest {target} p50 at {length} tokens among {want_model} {kinds} files whose test "
                f"accuracy is within {window:.3f} of the best ({best:.4f})" + how)
    else:
        pick = min(within, key=lambda r: (r["size_bytes"], -r["accuracy"]))
        rule = (f"no {target} latency in the report: smallest {want_model} {kinds} file whose test accuracy "
                f"is within {window:.3f} of the best ({best:.4f})")
    candidates = [{"variant": r["variant"], **({"format": r["format"]} if len(formats) > 1 else {}),
                   "accuracy": r["accuracy"], "size_bytes": r["size_bytes"], f"{target}_p50_ms": p50(r),
                   **({f"{target}_p50_from": source(r)} if p50(r) else {}), "within_window": r in within}
                  for r in scored]
    # target: whose rows chose the file; proxy: non-empty when that target is a stand-in (mobile-cpu on the host)
    return {**pick, "choice": {"rule": rule, "target": target, "proxy": proxy, "candidates": candidates}}


def bundle_workloads(results: dict, window: float, model: str, variant: str, shipped: str,
                     target: str = CHOICE_TARGET) -> dict:
    """metadata "workloads": the file for each workload on target (eval/workloads.py, the report's table), with
    the numbers it won on and the rule. in_bundle: the pick is the shipped file (`shipped`, its path in the
    bundle); otherwise run_file names it in the run folder, for an app that batches to fetch instead."""
    from eval.workloads import choose_workloads

    plan = results.get("plan", {})
    picks = choose_workloads(results.get("rows", []), target, window, plan.get("headline_length", 64),
                             plan.get("throughput_batch", 1), model)
    out = {}
    for key, w in picks.items():
        if "variant" not in w:
            out[key] = {"status": w["status"], "reason": w["reason"], "target": target}
            continue
        here = w["variant"] == variant
        out[key] = {**{k: v for k, v in w.items() if k != "file"}, "in_bundle": here,
                    **({"file": shipped} if here else {"run_file": w.get("file")})}
    return out


def coreml_row(export_rows: list[dict], model: str, variant: str) -> dict | None:
    rows = [r for r in export_rows if r["format"] == "coreml" and r["model"] == model and r.get("status") != "failed"]
    want = COREML_FOR.get(variant)
    return next((r for r in rows if r["variant"] == want), rows[0] if rows else None)


def latency_for(results: dict, model: str, variant: str, fmt: str) -> dict:
    """The report's p50 / p90 per target at the headline length for one row (the length sweep's), with the median
    of the file's interleaved rounds where the bench timed it in them (rounds_p50_ms; the goals and the picks
    read those). Skips keep their reason."""
    from eval.rows import find, point, rounds_p50

    length = str(results.get("plan", {}).get("headline_length", 64))
    row = find(results.get("rows", []), model, variant, fmt)
    if row is None:
        return {}
    out = {}
    for target, entry in row.get("latency", {}).items():
        at = point(row, target, length)
        if "p50_ms" in at:
            got = rounds_p50(row, target, length)
            out[target] = {"seq_len": int(length), "p50_ms": at["p50_ms"], "p90_ms": at.get("p90_ms"),
                           **({"rounds_p50_ms": got} if got else {}),
                           "proxy": results.get("targets", {}).get(target, {}).get("proxy", "")}
        elif isinstance(entry, dict) and entry.get("status"):
            out[target] = {"status": entry["status"], "reason": entry.get("reason", "")}
    return out


def io_spec(session) -> dict:
    """Input / output names, element types and shapes as the runtime reports them (never guessed)."""
    def one(v):
        return {"name": v.name, "type": v.type, "shape": [d if isinstance(d, int) else str(d) for d in v.shape]}
    return {"inputs": [one(v) for v in session.get_inputs()], "outputs": [one(v) for v in session.get_outputs()]}


def normalisation(tokenizer, max_length: int) -> dict:
    """What the tokenizer does to text, as an app re-implementing it would need to know."""
    init = getattr(tokenizer, "init_kwargs", {}) or {}
    return {"tokenizer_class": type(tokenizer).__name__,
            "lowercase": bool(init.get("do_lower_case", getattr(tokenizer, "do_lower_case", False))),
            "strip_accents": init.get("strip_accents"),
            "tokenize_chinese_chars": init.get("tokenize_chinese_chars", True),
            "max_length": max_length,
            "truncation": "longest first: keep the first max_length - 1 tokens, then [SEP]",
            "padding": f"right, with id {tokenizer.pad_token_id or 0}; attention_mask 1 on real tokens, 0 on padding",
            "special_tokens": {k: {"token": t, "id": tokenizer.convert_tokens_to_ids(t)}
                               for k, t in tokenizer.special_tokens_map.items() if isinstance(t, str)}}


def file_hashes(folder: Path, skip: tuple[str, ...] = (METADATA,)) -> dict[str, dict]:
    """sha256 and size of every file under folder (metadata.json, which holds them, excepted)."""
    return {p.relative_to(folder).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).as_posix() not in skip}


def stale_schema(folder: Path) -> str | None:
    """Why the bundle in folder must be rebuilt for this code's format (None when it is current)."""
    try:
        schema = json.loads((folder / METADATA).read_text()).get("schema_version")
    except (OSError, ValueError, AttributeError):
        schema = None
    return None if schema == SCHEMA_VERSION else f"its bundle has schema {schema}, this code writes {SCHEMA_VERSION}"


def metadata_digest(meta: dict) -> str:
    """sha256 of metadata.json's content minus its files list (the files' own hashes cover them) and the digest
    itself: key order and whitespace do not count, values do (apps read labels, max_length, lowercasing)."""
    import hashlib

    body = {k: v for k, v in meta.items() if k not in ("files", DIGEST_KEY)}
    canon = json.dumps(json.loads(json.dumps(body)), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canon.encode()).hexdigest()


def write_metadata(folder: Path, meta: dict) -> dict:
    meta = {k: v for k, v in meta.items() if k != DIGEST_KEY}
    meta = {**meta, "schema_version": SCHEMA_VERSION, "files": file_hashes(folder)}
    meta[DIGEST_KEY] = metadata_digest(meta)
    (folder / METADATA).write_text(json.dumps(meta, indent=2))
    return meta


def finish(folder: Path, meta: dict, readme: Callable[[dict], str], dist: Path) -> dict:
    """The tail every bundle (app, generation, web) shares: metadata.json with every file's sha256, the README
    written from it (so it can list the files), metadata again so the README is hashed too, then the
    all-or-nothing published copy at dist. Returns the final metadata."""
    from export.publish import publish

    meta = write_metadata(folder, meta)
    (folder / "README.md").write_text(readme(meta))
    meta = write_metadata(folder, meta)
    publish(folder, dist)
    return meta
