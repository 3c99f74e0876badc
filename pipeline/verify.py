"""`python -m pipeline verify-bundle DIR`: check an app bundle on any machine.

1. every file listed in metadata.json exists with its sha256 (a changed file fails, naming it);
2. in a fresh Python process (plain onnxruntime + onnxruntime-extensions, nothing from this repo's
   training code), the string-in model labels the texts in samples.json, and the .ort / .onnx models,
   fed by the same in-graph tokenizer, give the stored logits; labels must equal the stored ones;
3. on macOS the Core ML package predicts the same labels (skipped elsewhere, with the reason).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from pipeline.errors import PipelineError

METADATA = "metadata.json"
LOGIT_ATOL = 1e-3  # stored logits are rounded to 6 decimals; int8 kernels differ by ~1e-5 across CPUs


def check_files(bundle: Path) -> dict:
    """metadata.json's hashes against the files. Raises PipelineError naming the first bad file."""
    from pipeline.manifest import sha256_file

    meta_path = bundle / METADATA
    if not meta_path.is_file():
        raise PipelineError(f"{bundle} is not a bundle (no {METADATA}); build one with `make bundle` "
                            f"(python -m pipeline bundle --config ...)")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise PipelineError(f"{meta_path} is not valid JSON ({e}); rebuild the bundle with `make bundle`") from None
    files = meta.get("files") or {}
    for rel, info in files.items():
        path = bundle / rel
        if not path.is_file():
            raise PipelineError(f"{bundle}: {rel} is missing; re-run the bundle stage (`make bundle`) or copy the "
                                f"whole folder again")
        if path.stat().st_size != info["bytes"] or sha256_file(path) != info["sha256"]:
            raise PipelineError(f"{bundle}: {rel} was changed (sha256 does not match metadata.json); restore it "
                                f"or rebuild the bundle with `make bundle`")
    for key in ("ort", "onnx", "string_onnx"):
        if key not in meta.get("models", {}):
            raise PipelineError(f"{bundle}: metadata.json names no '{key}' model; rebuild with the bundle stage "
                                f"(`make bundle`)")
    extra = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
                   if p.is_file() and p.name != METADATA and p.relative_to(bundle).as_posix() not in files)
    return {"meta": meta, "checked": len(files), "unlisted": extra}


def _predict_child(bundle: Path) -> dict:
    """Runs in the fresh process: labels and logits of samples.json from every ONNX Runtime model."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    from export.string_model import tokenizer_graph

    meta = json.loads((bundle / METADATA).read_text())
    samples = json.loads((bundle / meta["samples_file"]).read_text())
    texts = [s["text"] for s in samples]
    opts = ort.SessionOptions()
    opts.register_custom_ops_library(get_library_path())
    opts.log_severity_level = 3

    def session(rel: str):
        return ort.InferenceSession(str(bundle / rel), opts, providers=["CPUExecutionProvider"])

    m = meta["models"]
    text_in = m["string_onnx"]["inputs"][0]["name"]
    strings = session(m["string_onnx"]["file"])
    out = {"string_onnx": [strings.run(["logits"], {text_in: np.array([t], dtype=object)})[0][0].tolist()
                           for t in texts]}
    # the text cleaning + tokenizer front, cut from the string-in graph, feeds the token-id models
    tok_model = tokenizer_graph(onnx.load(str(bundle / m["string_onnx"]["file"])))
    tokenize = ort.InferenceSession(tok_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    tok = tok_model.graph
    ids_name, mask_name = tok.output[0].name, tok.output[2].name  # ids, token types, mask, offsets
    for key in ("ort", "onnx"):
        sess = session(m[key]["file"])
        names = [i["name"] for i in m[key]["inputs"]]
        rows = []
        for t in texts:
            ids, mask = tokenize.run([ids_name, mask_name], {text_in: np.array([t], dtype=object)})
            feed = dict(zip(names, (ids[None, :], mask[None, :])))  # (1, T) each, in metadata's order
            rows.append(sess.run([m[key]["outputs"][0]["name"]], feed)[0][0].tolist())
        out[key] = rows
    out["token_ids"] = [tokenize.run([ids_name], {text_in: np.array([t], dtype=object)})[0].tolist() for t in texts]
    return out


def _coreml(bundle: Path, meta: dict, token_ids: list[list[int]], samples: list[dict]) -> dict:
    """Core ML labels of the samples (macOS only: coremltools cannot predict elsewhere)."""
    if "coreml" not in meta["models"]:
        return {"status": "skipped", "reason": "the bundle has no Core ML package"}
    if sys.platform != "darwin":
        return {"status": "skipped", "reason": f"Core ML prediction needs macOS (this is {sys.platform})"}
    import coremltools as ct
    import numpy as np

    m = meta["models"]["coreml"]
    model = ct.models.MLModel(str(bundle / m["file"]))
    ids_name, mask_name = (i["name"] for i in m["inputs"][:2])
    pred = []
    for ids in token_ids:
        x = np.array([ids], dtype=np.int32)  # (1, T)
        out = model.predict({ids_name: x, mask_name: np.ones_like(x)})[m["outputs"][0]["name"]]
        pred.append(meta["labels"][int(np.asarray(out).reshape(-1).argmax())])
    bad = [s["text"] for s, p in zip(samples, pred) if p != s["expected_label"]]
    if bad:
        raise PipelineError(f"{bundle}: {m['file']} labels {len(bad)} of {len(samples)} sample texts differently "
                            f"from samples.json, e.g. {bad[0][:60]!r}; rebuild the bundle with `make bundle`")
    return {"file": m["file"], "labels_match": len(samples), "max_abs_logit_diff": float("nan")}


def predict_in_fresh_process(bundle: Path, timeout_s: int = 300) -> dict:
    cmd = [sys.executable, "-m", "pipeline.verify", "--child", str(bundle.resolve())]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:400]
        raise PipelineError(f"{bundle}: loading the models in a fresh process failed ({last}); install "
                            f"onnxruntime and onnxruntime-extensions, or rebuild the bundle with `make bundle`")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verify_bundle(bundle: Path) -> dict:
    """Every check above; raises PipelineError on the first failure, returns a summary otherwise."""
    import numpy as np

    bundle = Path(bundle)
    from pipeline.verify_lm import is_generation, verify_lm_bundle

    if is_generation(bundle):  # a generation bundle: decoder, tokenizer, greedy samples (pipeline/verify_lm.py)
        return verify_lm_bundle(bundle)
    files = check_files(bundle)
    meta = files["meta"]
    samples = json.loads((bundle / meta["samples_file"]).read_text())
    labels = meta["labels"]
    got = predict_in_fresh_process(bundle)
    token_ids = got.pop("token_ids")
    summary = {"bundle": str(bundle), "files_checked": files["checked"], "unlisted_files": files["unlisted"],
               "samples": len(samples), "models": {}}
    want = np.array([s["logits"] for s in samples])  # (N, C)
    for key, rows in got.items():
        logits = np.array(rows)  # (N, C)
        pred = [labels[i] for i in logits.argmax(-1)]
        bad = [(s["text"], s["expected_label"], p) for s, p in zip(samples, pred) if p != s["expected_label"]]
        if bad:
            text, exp, p = bad[0]
            raise PipelineError(f"{bundle}: {meta['models'][key]['file']} labels {len(bad)} of {len(samples)} sample "
                                f"texts differently from samples.json, e.g. {text[:60]!r}: {p} instead of {exp}; "
                                f"rebuild the bundle with `make bundle`")
        diff = float(np.abs(logits - want).max())
        if key != "string_onnx" and diff > LOGIT_ATOL:
            raise PipelineError(f"{bundle}: {meta['models'][key]['file']} logits differ from samples.json by "
                                f"{diff:.3g} (tolerance {LOGIT_ATOL}); rebuild the bundle with `make bundle`")
        summary["models"][key] = {"file": meta["models"][key]["file"], "labels_match": len(samples),
                                  "max_abs_logit_diff": diff}
    summary["models"]["coreml"] = _coreml(bundle, meta, token_ids, samples)
    return summary


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("verify-bundle", help="check an app bundle: hashes, models load, sample labels match")
    p.add_argument("bundle", help="bundle folder, e.g. dist/demo")


def run_cli(args: argparse.Namespace) -> int:
    from pipeline import verify_lm

    if verify_lm.is_generation(Path(args.bundle)):
        return verify_lm.run_cli(args)
    try:
        s = verify_bundle(Path(args.bundle))
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for key, m in s["models"].items():
        if "status" in m:
            print(f"  {key}: {m['status']} ({m['reason']})")
        else:
            print(f"  {key}: {m['file']}: {m['labels_match']}/{s['samples']} sample labels match, "
                  f"max logit diff {m['max_abs_logit_diff']:.2g}")
    if s["unlisted_files"]:
        print(f"  note: files not in metadata.json (not checked): {', '.join(s['unlisted_files'][:5])}")
    print(f"bundle OK: {s['bundle']} ({s['files_checked']} files, sha256 match)")
    return 0


if __name__ == "__main__":  # the fresh-process half: python -m pipeline.verify --child DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", required=True)
    print(json.dumps(_predict_child(Path(parser.parse_args().child))))
