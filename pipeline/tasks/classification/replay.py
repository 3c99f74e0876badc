"""Run a bundle's model files on its sample texts, one text per call, as an app does.

One code path for both ends: the bundle stage stores what this returns as each file's reference logits, and
verify-bundle runs it again (in a fresh process, `python -m pipeline.tasks.classification.replay` reading a plan on stdin) and
compares. Imports numpy, onnxruntime and onnxruntime-extensions only (coremltools on macOS), so a machine
with just those installed can check a bundle.

A model entry of metadata.json says how to feed it: its first input of type tensor(string) takes the raw
text; otherwise inputs are fed by name (input_ids = the sample's stored token ids, attention_mask = ones,
token_type_ids = zeros). The output read is "logits" (else the first output).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from export.padding import pad
from pipeline.errors import PipelineError

ORT_FORMATS = ("onnx", "ort")  # formats onnxruntime runs; others (Core ML, ...) are handled below or skipped
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def output_name(spec: dict) -> str:
    names = [o["name"] for o in spec["outputs"]]
    return "logits" if "logits" in names else names[0]


def takes_text(spec: dict) -> bool:
    return spec["inputs"][0].get("type") == "tensor(string)"


def _token_feed(spec: dict, ids: list[int]) -> dict:
    feed = {}
    for i in spec["inputs"]:
        name, dtype = i["name"], np.int32 if i.get("type") == "tensor(int32)" else np.int64
        if name not in TOKEN_INPUTS:
            # the bundle stage stores references through this same feed, so a built bundle never lists one:
            # metadata.json's entry was rewritten (an edit by hand fails its digest first)
            raise PipelineError(f"{spec['file']}: input '{name}' is not one of {', '.join(TOKEN_INPUTS)}, so "
                                f"verify-bundle cannot feed it: metadata.json's entry for this file does not match "
                                f"the build's; restore metadata.json from the build's runs/<run>/ folder or rebuild "
                                f"the bundle with `make bundle`")
        x = np.asarray([ids], dtype=dtype)  # (1, T)
        feed[name] = x if name == "input_ids" else (np.ones_like(x) if name == "attention_mask" else np.zeros_like(x))
    return feed


def ort_logits(path: Path, spec: dict, samples: list[dict], threads: int = 1) -> list[list[float]]:
    """Logits (N, C) of one ONNX / .ort file, one sample per call, one thread by default (references and
    checks both use it, so the core count never enters the comparison)."""
    from export.ort_session import ort_session

    sess = ort_session(path, threads, custom_ops=takes_text(spec), name=spec["file"],  # the in-graph tokenizer op
                       fix="restore the file or rebuild the bundle with `make bundle`")
    rows = []
    for s in samples:
        feed = ({spec["inputs"][0]["name"]: np.array([s["text"]], dtype=object)} if takes_text(spec)  # (1,)
                else _token_feed(spec, s["token_ids"]))
        rows.append(np.asarray(_run(sess, spec, feed), dtype=np.float32).reshape(-1).tolist())  # (C,)
    return rows


def _run(sess, spec: dict, feed: dict) -> np.ndarray:
    """One call; a file that does not take what its metadata entry says is named, never a traceback."""
    try:
        return sess.run([output_name(spec)], feed)[0]
    except Exception as e:  # onnxruntime raises its own types (InvalidArgument, Fail, ValueError)
        raise PipelineError(f"{spec['file']}: onnxruntime cannot run it with the inputs metadata.json lists "
                            f"({str(e).splitlines()[0][:200]}): the file does not match its metadata entry (a file "
                            f"from another variant or run?); restore it or rebuild the bundle with `make bundle`") \
            from None


def coreml_logits(path: Path, spec: dict, samples: list[dict]) -> list[list[float]]:
    """Logits (N, C) of a Core ML package (macOS only), the ids padded by export.padding's rule: a package
    with enumerated shapes accepts nothing else."""
    import coremltools as ct

    model = ct.models.MLModel(str(path))
    ids_name, mask_name = (i["name"] for i in spec["inputs"][:2])
    rows = []
    for s in samples:
        x, mask = pad(s["token_ids"], spec["sequence_lengths"], spec["pad_id"])  # (1, T) int32 each
        got = model.predict({ids_name: x, mask_name: mask})[output_name(spec)]
        rows.append(np.asarray(got, dtype=np.float32).reshape(-1).tolist())  # (C,)
    return rows


def padded(ids: list[int], n: int, pad_id: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """export.padding's rule at one length n (every caller's ids fit it), in the file's dtype."""
    x, m = pad(ids, [n], pad_id)  # (1, n) each: m is 1 on the ids, 0 on the padding
    return x.astype(dtype), m.astype(dtype)


def _dtype(spec: dict, name: str):
    t = next((i.get("type") for i in spec["inputs"] if i["name"] == name), "tensor(int32)")
    return np.int64 if t == "tensor(int64)" else np.int32


def npu_logits(bundle: Path, npu: dict, samples: list[dict]) -> dict[str, list[list[float] | None]]:
    """{file: logits row per sample, None where the sample is longer than the file's length} of every static
    NPU file of metadata.json's "npu" (export/npu_bundle.py): each sample alone, its ids and 0/1 mask padded
    with the entry's pad_id to the file's length, through the variant's lookup file first when it has one
    (embeddings in). Every file that holds a sample runs it, so each length is checked, not just the shortest."""
    from export.ort_session import ort_session

    fix = "restore the file or rebuild the bundle with `make bundle`"
    out: dict[str, list[list[float] | None]] = {}
    for name, entry in npu.items():
        pad = entry.get("pad_id", 0)
        lookup = entry.get("lookup")
        look = ort_session(bundle / lookup["file"], 1, name=lookup["file"], fix=fix) if lookup else None
        for n, spec in entry["files"].items():
            sess = ort_session(bundle / spec["file"], 1, name=spec["file"], fix=fix)
            rows: list[list[float] | None] = []
            for s in samples:
                ids = s["token_ids"]
                if len(ids) > int(n):
                    rows.append(None)
                    continue
                feed = {}
                for i in spec["inputs"]:
                    x, m = padded(ids, int(n), pad, _dtype(spec, i["name"]))
                    if i["name"] == "attention_mask":
                        feed[i["name"]] = m
                    elif i["name"] == "input_ids":
                        feed[i["name"]] = x
                    elif look is not None:  # the embeddings the lookup file makes of the padded ids
                        lx, _ = padded(ids, int(n), pad, _dtype(lookup, "input_ids"))
                        feed[i["name"]] = look.run(None, {lookup["inputs"][0]["name"]: lx})[0]
                    else:
                        # the bundle stage names it (export/npu_bundle.py): metadata.json's entry was rewritten
                        raise PipelineError(f"{spec['file']}: input '{i['name']}' needs the variant's lookup file, "
                                            f"which npu.{name} in metadata.json does not name: that entry does not "
                                            f"match the build's; restore metadata.json from the build's runs/<run>/ "
                                            f"folder or rebuild the bundle with `make bundle`")
                got = _run(sess, spec, feed)
                rows.append(np.asarray(got, dtype=np.float32).reshape(-1).tolist())  # (C,)
            out[spec["file"]] = rows
    return out


# Samples each HTP context binary re-runs on the emulator, at bundle time (its reference logits) and in
# verify-bundle: a check that the binary loads on its chip and reproduces itself. The emulator is
# deterministic, takes 0.3-2.5 s per text, and the graph's agreement with the CPU was measured by the compile
# stage on npu.emulator_samples texts; all 8 samples on 9 binaries took the bundle stage 55 s of its 59.
QNN_SAMPLES = 2


def qnn_logits(bundle: Path, qnn: dict, samples: list[dict]) -> dict[str, list[list[float] | None]]:
    """{context file: logits row per sample, None where the sample is longer than the file's length} of every
    HTP context binary of metadata.json's "qnn" (export/qnn_bundle.py), run on the HTP emulator
    (onnxruntime-qnn) for its chip's soc_model / htp_arch: each sample alone, ids and 0/1 mask padded with
    pad_id, as npu_logits. Needs numpy, onnxruntime and onnxruntime-qnn only (pipeline/qnn_worker.py).
    The emulator is single-threaded and slow (seconds per text at 128 tokens): one process per file, as
    many at a time as this process has cores, each on the first QNN_SAMPLES samples that fit it (None for
    the others)."""
    from concurrent.futures import ThreadPoolExecutor

    from eval.targets import host_threads

    pad = qnn.get("pad_id", 0)
    todo = [(chip, entry, int(n), spec) for chip, entry in qnn.get("chips", {}).items()
            for n, spec in entry["files"].items()]
    with ThreadPoolExecutor(max(1, min(len(todo), host_threads()))) as pool:
        got = list(pool.map(lambda job: _qnn_file(bundle, pad, samples, *job), todo))
    return {spec["file"]: rows for (_, _, _, spec), rows in zip(todo, got)}


def _qnn_file(bundle: Path, pad: int, samples: list[dict], chip: str, entry: dict, n: int,
              spec: dict) -> list[list[float] | None]:
    from pipeline.qnn_worker import emulator_logits

    picked = [i for i, s in enumerate(samples) if len(s["token_ids"]) <= n][:QNN_SAMPLES]
    feeds = []
    for s in (samples[i] for i in picked):
        x, m = padded(s["token_ids"], n, pad, _dtype(spec, "input_ids"))
        feeds.append({i["name"]: (m if i["name"] == "attention_mask" else x) for i in spec["inputs"]})
    try:
        got = emulator_logits(bundle / spec["file"], str(entry["soc_model"]), str(entry["htp_arch"]), feeds) \
            if feeds else []
    except RuntimeError as e:
        raise PipelineError(f"{bundle}: {spec['file']} did not run on the HTP emulator for {chip} ({e}); the "
                            f"file is intact (sha256 matches): check that onnxruntime-qnn matches "
                            f"metadata.json's qnn.compiler, or rebuild the bundle with `make bundle`") from None
    rows = iter(np.asarray(got).tolist())
    return [next(rows) if i in picked else None for i in range(len(samples))]


def run_models(bundle: Path, models: dict, samples: list[dict]) -> dict:
    """{model key: logits rows} for every onnxruntime file of models (metadata.json's "models")."""
    return {key: ort_logits(bundle / spec["file"], spec, samples)
            for key, spec in models.items() if spec.get("format") in ORT_FORMATS}


if __name__ == "__main__":  # the fresh-process half of verify-bundle: plan on stdin, logits on stdout
    plan = json.loads(sys.stdin.read())
    try:
        result = {"logits": run_models(Path(plan["bundle"]), plan["models"], plan["samples"]),
                  "npu": npu_logits(Path(plan["bundle"]), plan.get("npu") or {}, plan["samples"])}
    except PipelineError as e:
        result = {"error": str(e)}
    print(json.dumps(result))
