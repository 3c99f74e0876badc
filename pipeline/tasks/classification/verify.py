"""verify-bundle for classification bundles: every ONNX Runtime file of metadata.json's "models" runs the texts
of samples.json one per call in a fresh Python process (numpy, onnxruntime and onnxruntime-extensions only), and
each file's logits must match that file's own reference logits stored at build time (LOGIT_ATOL / LOGIT_RTOL),
with labels that agree; on macOS the Core ML package, fed ids padded by export.padding's rule, gives the stored
labels (skipped elsewhere, with the reason). Needs no torch, transformers or onnx."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from export.app_samples import classification_samples
from pipeline.errors import PipelineError
from pipeline.tasks.classification.logits_check import (LOGIT_ATOL, LOGIT_RTOL, compare,  # noqa: F401
                                                        predict_in_fresh_process)
from pipeline.tasks.classification.replay import ORT_FORMATS
from pipeline.verify_bundle_meta import (bundle_kind, check_app_samples, check_metadata, check_npu, check_qnn,
                                         check_workloads, cross_check, load_samples, require_digest, resolve)


def compare_npu(bundle: Path, meta: dict, samples: list[dict], rows: dict) -> dict:
    """Each static NPU file against its own reference logits, on the samples that fit its length (labels are
    not held to the shipped model's: an NPU variant is its own int8 model with its own accuracy)."""
    out = {}
    for rel, got in rows.items():
        have = [n for n, s in enumerate(samples) if rel in s["reference_logits"]]
        ran = [n for n, r in enumerate(got) if r is not None]
        if have != ran:
            n = next(iter(sorted(set(have) ^ set(ran))))
            raise PipelineError(f"{bundle}: samples.json {'has' if n in have else 'lacks'} reference logits for {rel} "
                                f"on sample {n + 1}, which {'does not fit' if n in have else 'fits'} its length: "
                                f"samples.json was edited; restore it or rebuild the bundle with `make bundle`")
        out[f"npu:{rel}"] = compare(bundle, meta, [samples[n] for n in ran], rel, [got[n] for n in ran],
                                    labels_check=False) if ran else \
            {"status": "not run", "reason": "no sample fits its length (sha256 checked)"}
    return out


def _qnn(bundle: Path, meta: dict, samples: list[dict]) -> dict:
    """Each HTP context binary (metadata "qnn") re-run on the HTP emulator against its stored reference logits
    (the emulator's own at build time) where onnxruntime-qnn is installed; sha256 only elsewhere."""
    qnn = meta.get("qnn") or {}
    if not qnn.get("shipped"):
        return {}
    import importlib.util

    try:
        found = importlib.util.find_spec("onnxruntime_qnn") is not None
    except (ImportError, ValueError):  # an import hook that refuses it counts as absent
        found = False
    if not found:
        why = "onnxruntime-qnn is not installed (pip install onnxruntime-qnn, Linux x86_64 / Windows)"
        return {f"qnn:{spec['file']}": {"status": "not run", "reason": f"{why} (sha256 checked)"}
                for entry in qnn["chips"].values() for spec in entry["files"].values()}
    from pipeline.tasks.classification.replay import qnn_logits

    # the emulator replays only the first samples that fit (QNN_SAMPLES): "fit" says how many could have run
    lengths = {spec["file"]: int(n) for entry in qnn["chips"].values() for n, spec in entry["files"].items()}
    return {f"qnn:{rel}": {"status": "not run", "reason": "no sample fits its length (sha256 checked)"}
            if not any(r is not None for r in rows) else
            {**compare(bundle, meta, [s for s, r in zip(samples, rows) if r is not None], rel,
                       [r for r in rows if r is not None], labels_check=False),
             "fit": sum(len(s["token_ids"]) <= lengths[rel] for s in samples)}
            for rel, rows in qnn_logits(bundle, qnn, samples).items()}


def _coreml(bundle: Path, meta: dict, samples: list[dict]) -> dict:
    """Core ML labels of the samples (macOS only: coremltools cannot predict elsewhere). fp16 kernels on the
    GPU / Neural Engine differ from any stored reference by more than a logit tolerance, so labels only."""
    spec = meta["models"].get("coreml")
    if spec is None:
        return {"status": "skipped", "reason": "the bundle has no Core ML package"}
    if sys.platform != "darwin":
        return {"status": "skipped", "reason": f"Core ML prediction needs macOS (this is {sys.platform})"}
    from pipeline.tasks.classification.replay import coreml_logits

    got = np.asarray(coreml_logits(resolve(bundle, spec["file"], "models.coreml.file"), spec, samples))  # (N, C)
    pred = [meta["labels"][int(r.argmax())] for r in got]
    bad = [s["text"] for s, p in zip(samples, pred) if p != s["expected_label"]]
    if bad:
        raise PipelineError(f"{bundle}: {spec['file']} labels {len(bad)} of {len(samples)} sample texts differently "
                            f"from samples.json, e.g. {bad[0][:60]!r}; the package is intact (sha256 matches), so "
                            f"Core ML computes these texts differently from the ONNX file the labels came from: "
                            f"compare its argmax agreement in export/variants.json, and ship the .ort if it is low")
    return {"file": spec["file"], "labels_match": len(samples), "max_abs_logit_diff": float("nan")}


def verify(bundle: Path, files: dict) -> dict:
    """A classification bundle whose files check_files has hashed, by its metadata's kind: the app bundle
    here, the web bundle in verify_web.py. Raises PipelineError on the first failure, returns a summary (with
    the lines verify-bundle prints) otherwise."""
    _, kind = bundle_kind(bundle, files["meta"])
    if kind == "web":
        from pipeline.tasks.classification.verify_web import verify_web

        return verify_web(bundle, files)
    return verify_app(bundle, files)


def verify_app(bundle: Path, files: dict) -> dict:
    """The app bundle: metadata against its digest and its files, every ONNX Runtime file's replay, the NPU
    files of an npu student (metadata "npu"), Core ML on macOS."""
    meta = check_metadata(bundle, files["meta"])
    check_npu(bundle, meta)
    check_qnn(bundle, meta)
    check_workloads(bundle, meta)
    cross_check(bundle, meta)
    require_digest(bundle, meta)
    app_samples = check_app_samples(bundle, meta, classification_samples)
    samples = load_samples(bundle, meta)
    tokenizer = check_tokenizer(bundle, meta, samples)  # before the models: their inputs are these ids

    runnable = {k: v for k, v in meta["models"].items() if v["format"] in ORT_FORMATS}
    got, npu_rows = predict_in_fresh_process(bundle, runnable, samples, meta.get("npu"))
    summary = {"bundle": str(bundle), "files_checked": files["checked"], "unlisted_files": files["unlisted"],
               "samples": len(samples), "tokenizer": tokenizer, "app_samples": app_samples, "models": {}}
    for key in runnable:
        summary["models"][key] = compare(bundle, meta, samples, runnable[key]["file"], got[key])
    summary["models"]["coreml"] = _coreml(bundle, meta, samples)
    summary["models"].update(compare_npu(bundle, meta, samples, npu_rows))
    summary["models"].update(_qnn(bundle, meta, samples))
    for key, spec in meta["models"].items():
        if key not in summary["models"]:
            summary["models"][key] = {"status": "not run", "reason": f"format '{spec['format']}' (sha256 checked)"}
    summary["lines"] = _lines(summary)
    return summary


def check_tokenizer(bundle: Path, meta: dict, samples: list[dict]) -> dict:
    """tokenizer/tokenizer.json, as an app runs it (the `tokenizers` library, special tokens, truncation at
    max_length), must give each sample's stored ids: those are what the reference logits were computed from.
    Skipped, with the reason, where the library is not installed (verify needs only onnxruntime)."""
    rel = "tokenizer/tokenizer.json"
    if rel not in meta["files"]:
        return {"status": "skipped", "reason": f"the bundle has no {rel}"}
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return {"status": "skipped", "reason": "the tokenizers library is not installed (pip install tokenizers)"}
    try:
        tok = Tokenizer.from_file(str(bundle / rel))
    except Exception as e:  # tokenizers raises a bare Exception for a file it cannot parse
        raise PipelineError(f"{bundle}: {rel} cannot be read by the tokenizers library ({str(e)[:200]}); restore "
                            f"it from the build's runs/<run>/bundle/ or rebuild the bundle with `make bundle`") from None
    tok.no_padding()  # truncation: the file's own (cross_check has checked it cuts at max_length)
    for n, s in enumerate(samples, 1):
        ids = tok.encode(s["text"]).ids
        if ids != s["token_ids"]:
            at = next((i for i, (a, b) in enumerate(zip(ids, s["token_ids"])) if a != b), min(len(ids), len(s["token_ids"])))
            raise PipelineError(f"{bundle}: {rel} encodes sample {n} ({s['text'][:60]!r}) differently from the ids "
                                f"stored in samples.json (from token {at + 1}: {ids[at:at + 4]} instead of "
                                f"{s['token_ids'][at:at + 4]}): the tokenizer is not the one the model was built "
                                f"with; restore it or rebuild the bundle with `make bundle`")
    return {"file": rel, "samples_match": len(samples)}


def _lines(s: dict) -> list[str]:
    out = []
    t = s.get("tokenizer")
    if t:
        out.append(f"tokenizer: {t['status']} ({t['reason']})" if "status" in t else
                   f"tokenizer: {t['file']} gives the stored ids of {t['samples_match']}/{s['samples']} samples")
    for key, m in s["models"].items():
        if "status" in m:
            out.append(f"{key}: {m['status']} ({m['reason']})")
        else:
            diff = m["max_abs_logit_diff"]
            ran = m.get("samples_compared")
            what = (f"{m['labels_match']}/{s['samples']} sample labels match" if "labels_match" in m else
                    f"{ran}/{s['samples']} samples fit its length" if m.get("fit", ran) == ran else
                    f"{ran}/{s['samples']} samples replayed (the first {ran} of the {m['fit']} that fit its length: "
                    f"the HTP emulator takes seconds per text)")
            out.append(f"{key}: {m['file']}: {what}, "
                       + ("labels only" if diff != diff else
                          f"max |logit - reference| {diff:.3e} (allowed {LOGIT_ATOL:g} + {LOGIT_RTOL:g} x |reference|)"))
    out.append(f"app samples: {s['app_samples']} Kotlin / Swift file(s), each what metadata.json generates")
    return out


