"""The bundle's npu/qnn/ folder: the compile stage's context binaries for Qualcomm's HTP (compile/qnn.json,
eval/qnn.py), one subfolder per chip, for the shipped model:

    npu/qnn/<chip>/<variant>-<n>_ctx.onnx       the EP-context model (input_ids, attention_mask: [1, n])
    npu/qnn/<chip>/<variant>-<n>_ctx_qnn.bin    its context binary (embed mode 0: the .onnx names it)

Only rows the compile stage marked "passed" are eligible (compiled with CPU fallback disabled, and the
emulator's argmax agreeing with the CPU provider): a graph that compiled but disagreed is never shipped. Per
chip, one variant is shipped at every length it passed: the one that passed at the most lengths, then the
one whose worst emulator agreement is highest, then the most accurate on the test split (quantize/npu.json),
then the smallest context binary. Variants fed looked-up embeddings (an extra CPU lookup file
first) are left out: the app sample feeds token ids. The app loads a chip's file through ONNX Runtime's QNN
execution provider (onnxruntime-android-qnn) and falls back to the CPU .ort file where the chip or the
provider is missing.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

QNN_FOLDER = "npu/qnn"
TOKEN_INPUTS = {"input_ids", "attention_mask"}


def _io(path: Path) -> dict:
    """Inputs and outputs of a context model as its graph declares them (an EPContext graph needs the QNN
    provider to open a session, so they are read with onnx, in io_spec's form)."""
    import onnx

    g = onnx.load(str(path), load_external_data=False).graph

    def one(v):
        t = v.type.tensor_type
        kind = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
        name = {"float32": "float", "float16": "float16"}.get(kind, kind)
        return {"name": v.name, "type": f"tensor({name})", "shape": [d.dim_value or d.dim_param for d in t.shape.dim]}
    return {"inputs": [one(v) for v in g.input], "outputs": [one(v) for v in g.output]}


def _pick(rows: list[dict], accuracy: dict[str, float]) -> tuple[str, list[dict]] | None:
    """(variant, its passed rows) for one chip, or None. accuracy: test accuracy per variant, where known."""
    by_variant: dict[str, list[dict]] = {}
    for r in rows:
        by_variant.setdefault(r["variant"], []).append(r)
    if not by_variant:
        return None
    best = max(by_variant, key=lambda v: (len(by_variant[v]),
                                          min(r["emulator"]["argmax_agreement"] for r in by_variant[v]),
                                          accuracy.get(v, 0.0),
                                          -sum(r.get("context_bytes") or 0 for r in by_variant[v]), v))
    return best, sorted(by_variant[best], key=lambda r: r["length"])


def _not_shipped(doc: dict, mine: list[dict]) -> str:
    if "skipped" in doc:
        return f"the compile stage was skipped: {doc['skipped']}"
    if not mine:
        return "the compile stage compiled no file of this model"
    refused = sorted({u["type"] for r in mine for u in r.get("unsupported", [])})
    failed = sorted({r["status"] for r in mine if r["status"] != "passed"})
    return (f"no file of this model passed the HTP compile on any chip ({', '.join(failed) or 'none passed'}"
            + (f"; the compiler refused {', '.join(refused)}" if refused else "") + "): see compile/qnn.json")


def add_qnn_files(run_dir: Path, compile_dir: Path, model: str, out: Path, fallback: str, pad_id: int = 0,
                  accuracy: dict[str, float] | None = None) -> dict:
    """Copy the shipped model's passed context binaries into out/npu/qnn/<chip>/ and return metadata.json's
    "qnn" entry: {"shipped": True, "chips": {...}, ...}, or {"shipped": False, "reason": ...}. accuracy: the
    test accuracy of each variant (qnn.json's variant names), the tie-break between variants that passed."""
    from eval.qnn import CHIPS

    path = compile_dir / "qnn.json"
    if not path.is_file():
        return {"shipped": False, "reason": "the run has no compile/qnn.json"}
    doc = json.loads(path.read_text())
    mine = [r for r in doc.get("rows", []) if r.get("model") == model]
    passed = [r for r in mine if r.get("status") == "passed" and r.get("context")]
    chips: dict = {}
    for chip in dict.fromkeys(r["chip"] for r in passed):
        with_io = [{**r, "io": _io(run_dir / r["context"])} for r in passed if r["chip"] == chip]
        eligible = [r for r in with_io if {i["name"] for i in r["io"]["inputs"]} <= TOKEN_INPUTS]
        picked = _pick(eligible, accuracy or {})
        if picked is None:
            continue
        variant, rows = picked
        folder = out / QNN_FOLDER / chip
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        for r in rows:
            src = run_dir / r["context"]
            binary = src.with_name(src.stem + "_qnn.bin")
            for p in (src, binary):
                shutil.copy2(p, folder / p.name)
            files[str(r["length"])] = {"file": f"{QNN_FOLDER}/{chip}/{src.name}",
                                       "binary": f"{QNN_FOLDER}/{chip}/{binary.name}", **r["io"],
                                       "source": r["file"], "context_bytes": r["context_bytes"],
                                       "emulator": r["emulator"]}
        first = rows[0]
        chips[chip] = {"name": first["chip_name"], "soc_model": first["soc_model"], "htp_arch": first["htp_arch"],
                       "android_soc_model": CHIPS[chip].android_soc if chip in CHIPS else "", "variant": variant,
                       "accuracy": (accuracy or {}).get(variant),
                       "lengths": [r["length"] for r in rows], "files": files}
    if not chips:
        return {"shipped": False, "reason": _not_shipped(doc, mine)}
    return {"shipped": True, "chips": chips, "pad_id": pad_id, "fallback": fallback,
            "compiler": doc.get("compiler", {}), "emulator_note": doc.get("emulator_note", ""),
            "how_to_call": "pick the chip whose android_soc_model is android.os.Build.SOC_MODEL; pad the token "
                           "ids (with pad_id, and the 0/1 mask) to the shortest length listed that holds the "
                           "text; batch 1; load the _ctx.onnx from a file path (its .bin sits beside it) with the "
                           "QNN execution provider (backend libQnnHtp.so) and CPU fallback disabled; else run "
                           "the fallback .ort on the CPU"}
