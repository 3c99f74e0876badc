"""The Optimum peer: what a user gets from Optimum alone for the same trained models - its ONNX
export (optimum.exporters.onnx.main_export) and its dynamic int8 quantization (ORTQuantizer with the
AutoQuantizationConfig preset for this CPU) - scored on the same test texts and benchmarked by the
same harness as our files. Only Hugging Face models have an Optimum export; the LSTMs are ours alone.
"""
from __future__ import annotations

import logging
import platform
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline.errors import PipelineError

log = logging.getLogger("pocketformer")


def quantization_preset() -> str:
    """Optimum's presets are named by instruction set; pick the one this CPU runs best."""
    from eval.machine import cpu_flags

    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    flags = cpu_flags()
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    return "avx512" if "avx512f" in flags else "avx2"


def export_peer(hf_folder: Path, out: Path, opset: int) -> dict[str, Path]:
    """Optimum's fp32 export and its dynamic int8 quantization of one HF classifier folder.
    Returns variant -> ONNX file."""
    import torch
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig
    from transformers.utils import logging as hf_logging

    fp32_dir, int8_dir = out / "fp32", out / "int8-dynamic"
    # transformers' "Some weights ... were not used / newly initialized ... You should probably TRAIN this
    # model" is what a restricted-vocabulary student gives here; the peer is scored, and the report's caveat
    # says why its accuracy is off, so the console needs no such advice
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    # a restricted-vocabulary student loads with its word embeddings newly (randomly) initialized: seeded, the
    # same folder gives the same files and the same (wrong-row) accuracy on every run (it read 0.3936, 0.3939
    # and 0.3947 unseeded for the demo's one student). fork_rng: the seed stays inside the export, and the
    # stages after it in this process keep their own random state
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            main_export(str(hf_folder), output=str(fp32_dir), task="text-classification", opset=opset,
                        do_validation=False)
    except Exception as e:  # optimum raises bare ValueError/KeyError for unsupported models
        raise PipelineError(f"Optimum could not export {hf_folder} ({type(e).__name__}: {str(e)[:200]}); set "
                            f"bench.optimum_peer = false to benchmark without the peer") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    preset = quantization_preset()
    qconfig = getattr(AutoQuantizationConfig, preset)(is_static=False, per_channel=False)
    quantizer = ORTQuantizer.from_pretrained(str(fp32_dir), file_name="model.onnx")
    quantizer.quantize(qconfig, save_dir=str(int8_dir))
    return {"optimum-fp32": fp32_dir / "model.onnx", "optimum-int8-dynamic": int8_dir / "model_quantized.onnx"}


def onnx_logits(path: Path, tokenizer, texts: Sequence[str], max_length: int, threads: int,
                batch_size: int = 64) -> np.ndarray:
    """(N, C) logits of an ONNX classifier on texts, in length-sorted batches (as eval scores PyTorch)."""
    from eval.latency import feeds, ort_session
    from export.checks import predict

    sess = ort_session(path, threads, ["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return predict(lambda x, m: sess.run(["logits"], feeds(names, x, m))[0], tokenizer, texts, max_length, batch_size)


def peer_rows(folders: dict[str, Path], out: Path, rel_prefix: str, opset: int, texts: Sequence[str],
              gold: np.ndarray, num_labels: int, threads: int, reference: dict[str, dict]) -> list[dict]:
    """Export, quantize and score the peer of every Hugging Face model in folders.
    Rows carry `file` relative to the run folder (rel_prefix + path under out) and `_path` for now."""
    import json

    from transformers import AutoTokenizer

    from eval.metrics import scores

    rows = []
    for model, folder in folders.items():
        meta = json.loads((folder / "pocketformer.json").read_text())
        if meta["kind"] != "hf":
            continue  # Optimum exports Hugging Face models only; the LSTMs have no peer
        tokenizer = AutoTokenizer.from_pretrained(folder)
        t0 = time.perf_counter()
        files = export_peer(folder, out / model, opset)
        log.info("[peer] %s: Optimum's export and int8 quantization (%.1f s)", model, time.perf_counter() - t0)
        for variant, path in files.items():
            t0 = time.perf_counter()
            logits = onnx_logits(path, tokenizer, texts, meta["max_length"], threads)
            ref = reference.get(model, {})
            rows.append({"model": model, "variant": variant, "format": "onnx", "source": "optimum",
                         "file": f"{rel_prefix}/{path.relative_to(out).as_posix()}", "_path": path,
                         "size_bytes": path.stat().st_size, "params": ref.get("params"),
                         "non_embedding_params": ref.get("non_embedding_params"),
                         **scores(logits, gold, num_labels), "accuracy_texts": len(texts),
                         "quantization": None if variant == "optimum-fp32" else
                         f"AutoQuantizationConfig.{quantization_preset()}(is_static=False, per_channel=False)"})
            log.info("[peer] %-7s %-20s accuracy %.4f on %d texts (%.1f s)", model, variant, rows[-1]["accuracy"],
                     len(texts), time.perf_counter() - t0)
    return rows
