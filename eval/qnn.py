"""The Qualcomm HTP (Hexagon NPU) compiler as a real NPU check, on any Linux x86_64 host.

onnxruntime-qnn (the QNN execution provider as an ONNX Runtime plugin, bundling Qualcomm's QAIRT SDK)
compiles an ONNX graph for the HTP of a given Snapdragon chip on x86 and runs the compiled context binary on
an HTP emulator. So unlike ORT's mobile usability checker (eval/npu.py, a heuristic over op lists), this is
Qualcomm's own compiler accepting or refusing each node for each chip, and the emulator runs the compiled
graph's arithmetic (its timings mean nothing for a phone: no latency is taken from it).

Every compile and emulator run happens in a subprocess (pipeline/qnn_worker.py): the native code can abort the
process (QNN_COMMON_ERROR_MEM_ALLOC, a segfault) and that must not take the pipeline down; its log is parsed
here. Nothing here needs a phone.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError, lookup, write_failure

INSTALL_HINT = ("pip install '.[qnn]'; wheels exist for Linux x86_64 (glibc >= 2.35) and Windows")
EMULATOR_NOTE = ("compiled for the chip and run on QAIRT's x86 HTP emulator: the logits are the compiled "
                 "graph's, its timings are not a phone's (no latency is taken from it)")


@dataclass(frozen=True)
class Chip:
    soc_model: str  # QNN's SoC id (QNN SDK's SoC table)
    htp_arch: str  # Hexagon architecture version (v73, v75, v79)
    name: str  # the marketing name shown in the report
    android_soc: str = ""  # android.os.Build.SOC_MODEL on phones with this chip (API 31+): how an app picks its file


# config key npu.chips names these; the QNN SoC table gives the ids
CHIPS: dict[str, Chip] = {
    "8gen2": Chip("43", "73", "Snapdragon 8 Gen 2", "SM8550"),
    "8gen3": Chip("57", "75", "Snapdragon 8 Gen 3", "SM8650"),
    "8elite": Chip("69", "79", "Snapdragon 8 Elite", "SM8750"),
}
DEFAULT_CHIPS = ["8gen2", "8gen3", "8elite"]


def get_chip(name: str) -> Chip:
    return lookup(CHIPS, name, f"Snapdragon chip '{name}' in npu.chips")


def unavailable_reason() -> str | None:
    """One line saying why the HTP compiler cannot run here, or None when it can."""
    return _probe()[1]


def compiler_state(cfg=None) -> str:
    """The HTP compiler's state here in a few stable words: onnxruntime-qnn's version where it runs, else
    "absent" or its version and the kind of failure. The compile stage is keyed on it (its Step.environment),
    so installing, upgrading or repairing onnxruntime-qnn re-runs a compile that skipped or ran without it,
    while the same install re-runs nothing (no paths or messages that could differ between calls). cfg: unused
    (Step.environment's signature)."""
    return _probe()[0]


def _probe() -> tuple[str, str | None]:
    """(compiler_state(), unavailable_reason()) from one look at the install."""
    if importlib.util.find_spec("onnxruntime_qnn") is None:
        return "absent", f"onnxruntime-qnn is not installed ({INSTALL_HINT})"
    try:
        have = importlib.metadata.version("onnxruntime-qnn")
    except importlib.metadata.PackageNotFoundError:  # the module without its metadata: a broken install
        have = "unknown version"
    import onnxruntime as ort

    if not hasattr(ort, "register_execution_provider_library"):
        return (f"{have}, onnxruntime {ort.__version__} loads no plugins",
                f"onnxruntime {ort.__version__} cannot load plugin execution providers (onnxruntime-qnn needs >= 1.23)")
    try:
        import onnxruntime_qnn as q

        missing = [p for p in (q.get_library_path(), q.get_qnn_htp_path()) if not Path(p).is_file()]
    except Exception as e:  # noqa: BLE001 - a broken install, whatever it raises
        return (f"{have}, does not load ({type(e).__name__})",
                f"onnxruntime-qnn does not load ({type(e).__name__}: {e}; {INSTALL_HINT})")
    if missing:
        lib = Path(missing[0]).name
        return (f"{have}, lacks {lib}",
                f"onnxruntime-qnn lacks {lib} on {platform.system()} {platform.machine()} ({INSTALL_HINT})")
    return have, None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^\S+ \S+ \[[EWIV]:onnxruntime:[^\]]*\] ")  # "date time [E:onnxruntime:, file:line Fn] "
_UNSUPPORTED = re.compile(r"\{ name: ([^,]+), type: ([^ }]+) \}")
_VALIDATE = re.compile(r"failed for node `([^`]+)` of type `([^`]+)` with error code (\d+)")
_FUSION = re.compile(r"ValidateOnQnn failed for \w+ pattern")  # a fusion tried and dropped: not a refusal


def parse_log(log: str) -> dict:
    """ORT / QNN's log -> {"unsupported": [{"name", "type", "error_code"?}], "messages": [key lines]}.

    The refusals are the nodes ORT lists as "Unsupported nodes in QNN EP" (QNN's validation error code
    added where it names one); validation failures of fusion attempts (a Gelu pattern tried and dropped,
    its Erf then refused on its own) are not nodes of the graph and are left out."""
    nodes: dict[str, dict] = {}
    codes: dict[str, int] = {}
    messages: list[str] = []
    for raw in log.splitlines():
        line = _ANSI.sub("", raw).strip()
        for name, kind in _UNSUPPORTED.findall(line):
            nodes.setdefault(name, {"name": name, "type": kind})
        if _FUSION.search(line):
            continue
        if m := _VALIDATE.search(line):
            codes[m.group(1)] = int(m.group(3))
        if "[E:" in line or _VALIDATE.search(line) or "error code" in line.lower():
            text = _PREFIX.sub("", line)[:300]
            if text not in messages:
                messages.append(text)
    for name, code in codes.items():
        if name in nodes:
            nodes[name]["error_code"] = code
    return {"unsupported": list(nodes.values()), "messages": messages[:6]}


def _worker(job: dict, timeout_s: float) -> tuple[dict | None, str]:
    """Run one pipeline/qnn_worker.py job (its "chip" a CHIPS name, or QNN's {"soc_model", "htp_arch"} as a
    bundle's metadata.json records them); (its result or None when the process died or timed out, its log)."""
    chip = job["chip"]
    if isinstance(chip, str):
        c = get_chip(chip)
        chip = {"soc_model": c.soc_model, "htp_arch": c.htp_arch}
    # the worker runs from the repository root (where `-m pipeline.qnn_worker` is found): paths go absolute
    paths = {k: str(Path(v).resolve()) for k, v in job.items() if k in ("onnx", "context", "feeds", "logits") and v}
    with tempfile.TemporaryDirectory() as tmp:
        job = {**job, **paths, "chip": chip, "result": str(Path(tmp) / "result.json"), "parent": os.getpid()}
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        try:
            proc = subprocess.run([sys.executable, "-m", "pipeline.qnn_worker", str(Path(tmp) / "job.json")],
                                  capture_output=True, text=True, timeout=timeout_s,
                                  cwd=Path(__file__).resolve().parents[1])
        except subprocess.TimeoutExpired as e:
            return None, f"timed out after {timeout_s:.0f} s\n{e.stderr or ''}"
        log = (proc.stdout or "") + "\n" + (proc.stderr or "")
        result = Path(job["result"])
        if proc.returncode != 0 or not result.is_file():
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            return None, f"the QNN process died ({how})\n{log}"
        return json.loads(result.read_text()), log


def context_files(ctx: Path) -> dict[str, int]:
    """The context model and its binary (embed mode 0) -> size in bytes."""
    return {p.name: p.stat().st_size for p in (ctx, ctx.with_name(ctx.stem + "_qnn.bin")) if p.is_file()}


def compile_htp(onnx_path: Path, chip: str, out_dir: Path, name: str = "", timeout_s: float = 600) -> dict:
    """Compile one fixed-shape ONNX file for a chip's HTP. Writes out_dir/<name>_ctx.onnx (+ _ctx_qnn.bin)
    when it compiles. Returns {"chip", "compiled", "nodes_on_htp", "nodes_total", "htp_partitions",
    "unsupported": [{"name", "type"}], "message": [the compiler's key lines], "compile_seconds",
    "context": path or None, "context_files": {file: bytes}, "context_bytes"}."""
    c = get_chip(chip)
    ctx = Path(out_dir) / f"{name or Path(onnx_path).stem}_ctx.onnx"
    result, log = _worker({"kind": "compile", "onnx": str(onnx_path), "context": str(ctx), "chip": chip}, timeout_s)
    parsed = parse_log(log)
    if result is None:  # the compiler crashed: what its log says is all there is
        first = log.strip().splitlines()[0] if log.strip() else "no output"
        result = {"compiled": False, "error": first, "nodes_on_htp": None, "nodes_total": None,
                  "htp_partitions": None, "cpu_nodes": [], "compile_seconds": None}
    # The compiler's refusals are the nodes its log names (with QNN's error code where it gave one). A file
    # that compiles has its node count from the strict compile itself (every node on the HTP); a refused one
    # from a second session that may fall back to the CPU (there ONNX Runtime also leaves the graph-edge
    # QuantizeLinear / DequantizeLinear to the CPU, which the strict compile does take).
    unsupported = parsed["unsupported"]
    cpu_nodes = result.pop("cpu_nodes")
    if result["compiled"]:
        result["nodes_on_htp"] = result["nodes_total"]
    error = [re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", result["error"])] if result.get("error") else []
    if error and write_failure(error[0]):  # the disk, not the compiler: recorded as "not compiled", never retried
        raise PipelineError(f"the HTP compile of {Path(onnx_path).name} for {c.name} could not write {ctx.parent} "
                            f"({error[0]}): a full disk or a folder it may not write, not a refusal; free space on "
                            f"run.runs_dir's disk and re-run")
    message = error + parsed["messages"]
    files = context_files(ctx) if result["compiled"] else {}
    return {"chip": chip, "chip_name": c.name, "soc_model": c.soc_model, "htp_arch": c.htp_arch,
            "compiled": bool(result["compiled"]), "nodes_on_htp": result["nodes_on_htp"],
            "nodes_total": result["nodes_total"], "htp_partitions": result["htp_partitions"],
            "unsupported": unsupported,
            "cpu_nodes_with_fallback": [] if result["compiled"] else cpu_nodes, "message": list(dict.fromkeys(message))[:8],
            "compile_seconds": result["compile_seconds"], "context": str(ctx) if files else None,
            "context_files": files, "context_bytes": sum(files.values()) if files else None}


def run_emulator(context: Path, onnx_path: Path | None, chip: str | dict, feeds: list[dict[str, np.ndarray]],
                 timeout_s: float = 600) -> tuple[dict[str, np.ndarray], dict | None, str]:
    """The compiled context model on the HTP emulator, one feed per call, in a worker process: ({"emulator":
    logits (N, C), and "cpu": onnx_path's on the CPU provider where one is given}, the worker's result, "") or
    ({}, None, what its log says went wrong) when the process died, refused the binary or timed out."""
    with tempfile.TemporaryDirectory() as tmp:
        arrays = {f"{i}/{k}": v for i, f in enumerate(feeds) for k, v in f.items()}
        np.savez(Path(tmp) / "feeds.npz", n=np.array(len(feeds)), **arrays)
        job = {"kind": "emulate", "context": str(context), "onnx": str(onnx_path) if onnx_path else None,
               "chip": chip, "feeds": str(Path(tmp) / "feeds.npz"), "logits": str(Path(tmp) / "logits.npz")}
        result, log = _worker(job, timeout_s)
        if result is None:
            lines = parse_log(log)["messages"] or log.strip().splitlines()[:1]
            return {}, None, "; ".join(lines[:3])[:400]
        with np.load(job["logits"]) as logits:
            return {k: logits[k] for k in logits.files}, result, ""


def emulate(context: Path, onnx_path: Path, chip: str, feeds: list[dict[str, np.ndarray]],
            timeout_s: float = 600) -> dict:
    """The compiled context model on the HTP emulator against its source file on the CPU provider, on the
    same feeds. Returns {"samples", "argmax_agreement", "max_abs_diff", "emulator_seconds_per_inference",
    "logits", "cpu_logits"} (the last two arrays (N, C), not for JSON), or {"error": ...} when the emulator
    process died."""
    logits, result, error = run_emulator(context, onnx_path, chip, feeds, timeout_s)
    if error:
        return {"error": error}
    got, want = logits["emulator"], logits["cpu"]
    return {**summarize(got, want), "emulator_seconds_per_inference": result["emulator_seconds_per_inference"],
            "logits": got, "cpu_logits": want}


# An argmax flip where the CPU's top class leads the emulator's pick by no more than twice the largest logit
# difference on that text is a near tie: a difference of d moves a margin by at most 2d, so such a flip says
# nothing the max abs diff does not. It counts as agreeing only while that difference is small against the
# logits' spread (TIE_SPREAD of the median per-text range), so a graph that computes something else cannot pass
# as ties. Why (2026-11-28): the demo student's int8-static file at 32 tokens failed on every chip on 1 flip in 8
# texts, a text whose three logits span 0.08, CPU margin 0.0127 against a difference of 0.0164; on 40 texts its
# agreement was 97.5%, every other text within 0.02 of the CPU.
TIE_SPREAD = 0.05


def near_ties(got: np.ndarray, want: np.ndarray) -> int:
    """How many of the argmax flips between emulator (got) and CPU (want) logits (N, C) are near ties."""
    if not len(got):
        return 0
    pick = got.argmax(-1)
    margin = want.max(-1) - want[np.arange(len(got)), pick]  # 0 where the two agree
    diff = np.abs(got - want).max(-1)
    spread = float(np.median(want.max(-1) - want.min(-1)))
    return int(np.sum((pick != want.argmax(-1)) & (margin <= 2 * diff) & (diff <= TIE_SPREAD * spread)))


def summarize(got: np.ndarray, want: np.ndarray) -> dict:
    """Emulator logits against the CPU provider's on the same texts: {"samples", "argmax_agreement",
    "near_ties" (flips among them that are near ties, see TIE_SPREAD), "max_abs_diff"}."""
    from export.checks import agreeing

    return {"samples": len(got), "argmax_agreement": float(np.mean(agreeing(got, want))),
            "near_ties": near_ties(got, want),
            "max_abs_diff": float(np.max(np.abs(got - want))) if len(got) else 0.0}
