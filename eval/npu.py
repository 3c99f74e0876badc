"""Edge-NPU readiness and the roofline estimate used where no NPU runtime exists.

Readiness, measurable on any machine:
- ONNX: ONNX Runtime's own mobile usability checker (its log parsed) says how many
  nodes the NNAPI and CoreML execution providers would take and in how many partitions; every partition
  boundary is a CPU<->NPU hand-over, and unsupported nodes run on the CPU.
- Core ML: the package spec lists the ops and input shapes; LSTM/GRU/RNN ops and range-flexible inputs
  keep a model off the Neural Engine (it needs fixed or enumerated shapes).
Estimate: roofline lower bound, max(FLOPs / peak ops, weight bytes / memory bandwidth), against a device
profile from configs/devices.toml that names the source of its numbers.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pipeline.errors import PipelineError, lookup

DEFAULT_DEVICES = Path(__file__).resolve().parents[1] / "configs" / "devices.toml"

_SECTION = re.compile(r"Checking (NNAPI|CoreML NeuralNetwork|CoreML MLProgram)\s*$")
_PARTS = re.compile(r"(\d+) partitions with a total of (\d+)/(\d+) nodes can be handled")
_SIZES = re.compile(r"Partition sizes: \[([\d, ]*)\]")
_OPS = re.compile(r"Unsupported ops: (.*)$")
_DYN = re.compile(r"Unsupported nodes due to input having a dynamic shape=(\d+)")
_VERDICT = re.compile(r"Model should perform well with .* (as is|if modified to have fixed input shapes): (YES|NO)")
_KEYS = {"NNAPI": "nnapi", "CoreML NeuralNetwork": "coreml_neuralnetwork", "CoreML MLProgram": "coreml_mlprogram"}


def parse_usability(log: str) -> dict:
    """The checker's log -> {provider: {"as_is": {...}, "if_shapes_fixed": {...}}} (the latter only when the
    model still has dynamic shapes)."""
    out: dict = {}
    cur: dict | None = None
    for line in log.splitlines():
        text = line.replace("INFO:", "").strip()
        if m := _SECTION.search(text):
            out[_KEYS[m.group(1)]] = {"as_is": {}}
            cur = out[_KEYS[m.group(1)]]["as_is"]
        elif cur is None:
            continue
        elif text.startswith("Checking if model will perform better if the dynamic shapes are fixed"):
            section = out[list(out)[-1]]
            section["if_shapes_fixed"] = {}
            cur = section["if_shapes_fixed"]
        elif m := _PARTS.search(text):
            cur.update(partitions=int(m.group(1)), supported_nodes=int(m.group(2)), total_nodes=int(m.group(3)))
            cur["coverage"] = cur["supported_nodes"] / cur["total_nodes"] if cur["total_nodes"] else 0.0
        elif m := _SIZES.search(text):
            cur["partition_sizes"] = [int(s) for s in m.group(1).split(",") if s.strip()]
        elif m := _OPS.search(text):
            cur["unsupported_ops"] = [o.split(":")[-1] for o in m.group(1).split(",") if o]
        elif m := _DYN.search(text):
            cur["dynamic_shape_nodes"] = int(m.group(1))
        elif m := _VERDICT.search(text):
            cur["recommended"] = m.group(2) == "YES"
    return out


def check_onnx(path: Path) -> dict:
    """Run ORT's mobile usability checker on one ONNX file; parsed results, or an error entry. In-process, its
    log caught by a private logger (the same lines its command-line entry prints): a subprocess per file cost
    about 3 s of Python and onnxruntime start-up against 0.06-0.3 s of checking."""
    import io
    import logging

    from onnxruntime.tools.mobile_helpers import usability_checker

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname)s:  %(message)s"))
    logger = logging.Logger("pocketformer.usability_checker", logging.INFO)  # not registered: nothing propagates
    logger.addHandler(handler)
    try:
        usability_checker.analyze_model(Path(path), skip_optimize=False, logger=logger)
    except Exception as e:  # noqa: BLE001 - the checker's failure is this file's readiness entry, not the bench's
        first = (str(e).strip().splitlines() or [""])[0]
        return {"error": f"checker failed: {type(e).__name__}: {first[:200]}"}
    parsed = parse_usability(buf.getvalue())
    if not parsed:
        tail = buf.getvalue().strip().splitlines()[-1:] or ["no output"]
        return {"error": f"checker gave no verdict: {tail[0][:200]}"}
    return parsed


def fix_shapes(src: Path, dst: Path, batch: int, seq_len: int) -> Path:
    """Copy of an ONNX model with input_ids/attention_mask fixed to (batch, seq_len), outputs re-inferred:
    NNAPI and the CoreML EP only take nodes whose shapes are all known."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_input_shape_fixed

    model = onnx.load(str(src))
    for inp in model.graph.input:
        if inp.name in ("input_ids", "attention_mask", "token_type_ids"):
            make_input_shape_fixed(model.graph, inp.name, [batch, seq_len])
    fix_output_shapes(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return dst


# Core ML ops that the Neural Engine does not run: recurrent cells go to the CPU.
ANE_UNSUPPORTED_OPS = {"lstm", "gru", "rnn"}


def _ops(block) -> list[str]:
    out = []
    for op in block.operations:
        out.append(op.type)
        for inner in op.blocks:  # control flow nests blocks
            out.extend(_ops(inner))
    return out


def coreml_readiness(package: Path) -> dict:
    """Ops and input shapes of a Core ML package that keep it off the Neural Engine, read from its spec
    (works on Linux: nothing is compiled or run)."""
    import coremltools as ct

    spec = ct.models.MLModel(str(package), skip_model_load=True).get_spec()
    ops: list[str] = []
    if spec.WhichOneof("Type") == "mlProgram":
        for fn in spec.mlProgram.functions.values():
            for block in fn.block_specializations.values():
                ops.extend(_ops(block))
    blockers = [f"{t} op x{ops.count(t)} (recurrent cells run on the CPU, not the Neural Engine)"
                for t in sorted({o for o in ops if o in ANE_UNSUPPORTED_OPS})]
    shapes = {}
    for inp in spec.description.input:
        arr = inp.type.multiArrayType
        kind = arr.WhichOneof("ShapeFlexibility")
        if kind == "shapeRange":
            ranges = [(r.lowerBound, r.upperBound) for r in arr.shapeRange.sizeRanges]
            shapes[inp.name] = {"flexibility": "range", "ranges": ranges}
            if any(lo != hi for lo, hi in ranges):
                blockers.append(f"input {inp.name} has a range-flexible shape {ranges} (the Neural Engine needs "
                                f"fixed or enumerated shapes)")
        elif kind == "enumeratedShapes":
            shapes[inp.name] = {"flexibility": "enumerated",
                                "shapes": [list(s.shape) for s in arr.enumeratedShapes.shapes]}
        else:
            shapes[inp.name] = {"flexibility": "fixed", "shape": list(arr.shape)}
    return {"ops": len(ops), "op_types": sorted(set(ops)), "inputs": shapes, "ane_blockers": blockers,
            "ane_ready": not blockers}


def load_devices(path: str | Path = "") -> dict[str, dict]:
    p = Path(path) if path else DEFAULT_DEVICES
    if not p.is_file():
        raise PipelineError(f"NPU device profiles file {p} does not exist; set bench.devices_file to a TOML "
                            f"file like configs/devices.toml")
    like = f"each device a [table] like those of {DEFAULT_DEVICES.relative_to(DEFAULT_DEVICES.parents[1])}"
    try:
        devices = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:  # a traceback from deep in the config checks
        raise PipelineError(f"NPU device profiles file {p} (bench.devices_file) is not valid TOML ({e}); fix it: "
                            f"{like}") from None
    need = {"name", "peak_int8_tops", "peak_fp16_tops", "memory_gb_s", "source"}
    for key, d in devices.items():
        if not isinstance(d, dict):
            raise PipelineError(f"{p}: '{key}' is not a device [table] but {d!r}; {like}")
        missing = need - d.keys()
        if missing:
            raise PipelineError(f"{p}: device [{key}] lacks {', '.join(sorted(missing))}; add them ({like})")
        # the bench's roofline estimate divides by them (roofline_ms): a string there failed after training
        bad = [k for k in ("peak_int8_tops", "peak_fp16_tops", "memory_gb_s")
               if isinstance(d[k], bool) or not isinstance(d[k], (int, float)) or not d[k] > 0]
        if bad:
            raise PipelineError(f"{p}: device [{key}] {bad[0]} = {d[bad[0]]!r}: give a positive number "
                                f"(e.g. {bad[0]} = 35.0)")
    return devices


def get_device(devices: dict[str, dict], name: str) -> dict:
    return {"id": name, **lookup(devices, name, f"NPU device profile '{name}' in bench.npu_device")}


def roofline_ms(flops: float, weight_bytes: float, device: dict, precision: str) -> dict:
    """Lower bound on one inference: compute at the vendor's peak, or streaming the weights once from
    memory, whichever is slower. Real NPUs reach a fraction of peak on small batch-1 models."""
    tops = device["peak_int8_tops"] if precision == "int8" else device["peak_fp16_tops"]
    compute = flops / (tops * 1e12) * 1e3
    memory = weight_bytes / (device["memory_gb_s"] * 1e9) * 1e3
    return {"estimate_ms": max(compute, memory), "compute_ms": compute, "memory_ms": memory,
            "bound": "compute" if compute >= memory else "memory"}
