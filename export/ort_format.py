"""ONNX -> ORT mobile format (.ort) through onnxruntime's own converter, run as a subprocess.

The converter works on folders and also writes an operator config; it runs in a temporary folder and
only the .ort file is moved into place, so a failed conversion leaves nothing behind.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline.errors import PipelineError

PLATFORMS = ("arm", "amd64")


def convert_to_ort(jobs: list[tuple[str, Path, Path]], target_platform: str = "arm", timeout_s: int = 1800) -> None:
    """Convert each (model name, src .onnx, out .ort) in one converter run (its start-up costs seconds).

    "Fixed" optimization style bakes in the CPU provider's graph optimizations for target_platform
    ("arm" for phones), the style ORT recommends unless NNAPI / Core ML EPs take the graph."""
    if not jobs:
        return
    if target_platform not in PLATFORMS:
        raise PipelineError(f"{jobs[0][0]} -> ort: export.ort_target_platform = {target_platform!r}; "
                            f"choose one of {', '.join(PLATFORMS)}")
    with tempfile.TemporaryDirectory() as tmp:
        indir, outdir = Path(tmp) / "in", Path(tmp) / "out"
        indir.mkdir()
        names = []
        for i, (model, src, _) in enumerate(jobs):
            name = f"{i:03d}__{model}__{src.stem}"  # flat, unique: the converter names outputs after inputs
            shutil.copy2(src, indir / f"{name}.onnx")
            names.append(name)
        cmd = [sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(indir),
               "--output_dir", str(outdir), "--optimization_style", "Fixed", "--target_platform", target_platform]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        missing = [i for i, n in enumerate(names) if not (outdir / f"{n}.ort").is_file()]
        if proc.returncode != 0 or missing:
            log = (proc.stderr or "") + (proc.stdout or "")
            bad = next((i for i, n in enumerate(names) if n in log and i in missing), missing[0] if missing else 0)
            model, src, _ = jobs[bad]
            m = re.search(r"implementation for (\w+)\(", log) or re.search(r"[Oo]p(?:erator)? ?type:? ?'?(\w+)", log)
            op = f" (operator {m.group(1)})" if m else ""
            last = log.strip().splitlines()[-1][:300] if log.strip() else f"exit status {proc.returncode}"
            raise PipelineError(f"{model} -> ort: converting {src.name} failed{op}: {last}; "
                                f"leave '{src.stem}' out of export.ort_variants")
        for name, (_, _, out) in zip(names, jobs):
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(outdir / f"{name}.ort"), out)
