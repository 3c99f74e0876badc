"""The Optimum peer: what a user gets from Optimum alone for the same trained models - its ONNX
export (optimum.exporters.onnx.main_export) and its dynamic int8 quantization (ORTQuantizer with the
AutoQuantizationConfig preset for this CPU) - scored on the same test texts and benchmarked by the
same harness as our files. Only Hugging Face models have an Optimum export; the LSTMs are ours alone.
"""
from __future__ import annotations

import logging
import platform
import tempfile
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


def plain_folder(folder: Path, out: Path) -> tuple[Path, int | None]:
    """(the folder Optimum exports, its parameter count where it differs from ours).

    A student saved with a CompactEmbedding (pocketformer.json "embedding": restricted rows, factorized) is no
    layout transformers knows: Optimum's exporter loaded it with the word embeddings initialised at random, and
    its files scored 0.394 on the demo against our 0.754. Folded here into the stock table of every tokenizer id
    (the id -> row table, the rows and the projection, computed once), it is our function in a stock transformers
    model: what a user of Optimum alone would have to write. Other folders are exported as they are."""
    import json

    import torch

    from distill.embeddings import EMBEDDING_KEY
    from distill.models import load_model

    meta = json.loads((folder / "pocketformer.json").read_text())
    if EMBEDDING_KEY not in meta:
        return folder, None
    # modules are built at random, then filled: fork_rng leaves the caller's random state as it was.
    # load_model: a damaged folder is one error naming it, as for every stage that reads it
    with torch.random.fork_rng(), torch.no_grad():
        loaded = load_model(folder, folder.name)
        hf = loaded.model.hf
        compact = hf.get_input_embeddings()
        table = compact(torch.arange(compact.row_of_id.numel()))  # (V, H): every id's input vector
        plain = torch.nn.Embedding(*table.shape, padding_idx=hf.config.pad_token_id)
        plain.weight.copy_(table)
    hf.set_input_embeddings(plain)
    hf.config.vocab_size = table.shape[0]
    hf.save_pretrained(out, safe_serialization=True)
    loaded.tokenizer.save_pretrained(out)
    return out, sum(p.numel() for p in hf.parameters())


def export_peer(hf_folder: Path, out: Path, opset: int) -> dict[str, Path]:
    """Optimum's fp32 export and its dynamic int8 quantization of one HF classifier folder (plain_folder's).
    Returns variant -> ONNX file."""
    import torch
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    fp32_dir, int8_dir = out / "fp32", out / "int8-dynamic"
    try:
        # transformers draws initial weights before it loads the folder's: fork_rng keeps that off the random
        # state of the stages after this one in the same process
        with torch.random.fork_rng():
            main_export(str(hf_folder), output=str(fp32_dir), task="text-classification", opset=opset,
                        do_validation=False)
    except Exception as e:  # optimum raises bare ValueError/KeyError for unsupported models
        raise PipelineError(f"Optimum could not export {hf_folder} ({type(e).__name__}: {str(e)[:200]}); set "
                            f"bench.optimum_peer = false to benchmark without the peer") from None
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
        with tempfile.TemporaryDirectory(dir=out) as tmp:  # the folded folder is Optimum's input, not an output
            src, params = plain_folder(folder, Path(tmp))
            files = export_peer(src, out / model, opset)
        log.info("[peer] %s: Optimum's export and int8 quantization (%.1f s)", model, time.perf_counter() - t0)
        for variant, path in files.items():
            t0 = time.perf_counter()
            logits = onnx_logits(path, tokenizer, texts, meta["max_length"], threads)
            ref = reference.get(model, {})
            rows.append({"model": model, "variant": variant, "format": "onnx", "source": "optimum",
                         "file": f"{rel_prefix}/{path.relative_to(out).as_posix()}", "_path": path,
                         "size_bytes": path.stat().st_size, "params": params or ref.get("params"),
                         "non_embedding_params": ref.get("non_embedding_params"),
                         **({"folded_embedding": True} if params else {}),
                         **scores(logits, gold, num_labels), "accuracy_texts": len(texts),
                         "quantization": None if variant == "optimum-fp32" else
                         f"AutoQuantizationConfig.{quantization_preset()}(is_static=False, per_channel=False)"})
            log.info("[peer] %-7s %-20s accuracy %.4f on %d texts (%.1f s)", model, variant, rows[-1]["accuracy"],
                     len(texts), time.perf_counter() - t0)
    return rows
