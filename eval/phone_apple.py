"""The bundled Core ML package timed on this Mac per compute unit (coremltools predicts only on macOS).

A Mac's Neural Engine is the iPhone's (same Apple silicon generation), so CPU_AND_NE shows what the package
does on the ANE; an iPhone run needs an Xcode project (the bundle's Swift sample) and Instruments.
"""
from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from eval import latency as L
from pipeline.errors import PipelineError

COMPUTE_UNITS = ("CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL")


def skip_reason() -> str | None:
    if sys.platform != "darwin":
        return (f"Core ML prediction needs macOS (this is {platform.system()}); run phone-bench --platform apple "
                "on a Mac")
    return None


def mac_info() -> dict:
    def sysctl(key: str) -> str:
        proc = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=30)
        return proc.stdout.strip()
    return {"name": sysctl("hw.model"), "soc": sysctl("machdep.cpu.brand_string"), "macos": platform.mac_ver()[0]}


def time_coreml(package: Path, input_names: list[str], ids: list[int], units: list[str], warmup: int,
                repeats: int) -> list[dict]:
    """One dict per compute unit: the latency entry (ms) or a failed status with the reason."""
    import coremltools as ct
    import numpy as np

    bad = [u for u in units if u not in COMPUTE_UNITS]
    if bad:
        raise PipelineError(f"unknown compute unit(s) {bad} in phone.compute_units. Known: {', '.join(COMPUTE_UNITS)}")
    x = np.array([ids], dtype=np.int32)  # (1, T)
    feed = dict(zip(input_names, (x, np.ones_like(x))))
    out = []
    for unit in units:
        try:
            model = ct.models.MLModel(str(package), compute_units=getattr(ct.ComputeUnit, unit))
            times = L.time_calls(lambda: model.predict(feed), L.Plan(warmup, repeats, float("inf"), repeats))
        except Exception as e:  # coremltools raises plain exceptions for a unit the package cannot use
            out.append({"provider": unit, "threads": 0, "status": "failed", "reason": f"{type(e).__name__}: {e}"[:300]})
            continue
        out.append({"provider": unit, "threads": 0, "entry": L.summarize(times)})
    return out
