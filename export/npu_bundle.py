"""The bundle's npu/ folder: when the shipped model is an npu student (student.arch = "npu"), its static
per-length NPU files (quantize/npu.json, export/npu.py) travel with the app bundle, one subfolder per
provider variant, and metadata.json says which file is for which provider and length and what it takes:

    npu/nnapi-int8/nnapi-int8-<n>.onnx        input_ids, attention_mask (int32, [1, n]) -> logits
    npu/coreml-int8w/coreml-int8w-<n>.onnx    embeddings (float, [1, n, D]), attention_mask -> logits
    npu/coreml-int8w/lookup.onnx              input_ids (int32, [1, n]) -> embeddings, run on the CPU first

A variant that failed its check in the quantize stage (status "failed" in npu.json) is not copied; metadata.json's
"npu_not_shipped" names it with the reason (not_shipped()).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path


def add_npu_files(run_dir: Path, quantize_dir: Path, model: str, out: Path, pad_id: int = 0) -> dict | None:
    """Copy model's NPU files into out/npu/ and return their metadata entry (None: the model has none).
    pad_id: the tokenizer's, which fills the ids up to a file's length (verify-bundle pads with it too)."""
    from export.bundle import io_spec
    from export.ort_session import ort_session

    rows = [r for r in _rows(quantize_dir, model) if r.get("status") != "failed"]
    if not rows:
        return None
    def copy(rel: str, folder: Path) -> dict:
        dst = folder / Path(rel).name
        shutil.copy2(run_dir / rel, dst)
        return {"file": dst.relative_to(out).as_posix(), **io_spec(ort_session(dst, 1))}

    entry: dict = {}
    for r in rows:
        name = r["variant"].removeprefix("npu-")
        folder = out / "npu" / name
        folder.mkdir(parents=True, exist_ok=True)
        files = {n: copy(rel, folder) for n, rel in r["files"].items()}
        lookup = None
        if r.get("lookup"):
            lookup = {**copy(r["lookup"], folder), "runs_on": "the CPU, before the NPU file (the CoreML provider "
                                                              "takes no Gather and no dimension above 16,384)"}
        entry[name] = {"provider": r["provider"], "lengths": r["lengths"], "files": files, "lookup": lookup,
                       "accuracy": r.get("accuracy"), "accuracy_note": r.get("accuracy_note"),
                       "readiness": {n: _summary(c.get(r["provider"], {}).get("as_is", {}))
                                     for n, c in r.get("readiness", {}).items()},
                       "pad_id": pad_id,
                       "how_to_call": "pad the token ids (with pad_id, and the 0/1 mask) to the shortest length "
                                      "listed that holds the text; batch 1"}
    return entry


def _rows(quantize_dir: Path, model: str) -> list[dict]:
    path = quantize_dir / "npu.json"
    return [r for r in json.loads(path.read_text()) if r["model"] == model] if path.is_file() else []


def not_shipped(quantize_dir: Path, model: str) -> list[dict]:
    """model's NPU variants that failed their check in the quantize stage: [{"variant", "reason"}], printed
    as they are left out (metadata.json's "npu_not_shipped")."""
    out = [{"variant": r["variant"].removeprefix("npu-"), "reason": (r.get("check") or {}).get("reason", "")}
           for r in _rows(quantize_dir, model) if r.get("status") == "failed"]
    for r in out:
        print(f"[bundle] {model} npu {r['variant']}: not shipped, it failed its check in the quantize stage "
              f"(quantize/npu.json): {r['reason']}")
    return out


def _summary(a: dict) -> dict:
    return {k: a.get(k) for k in ("supported_nodes", "total_nodes", "partitions")}
