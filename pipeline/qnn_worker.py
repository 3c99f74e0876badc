"""The QNN side of eval/qnn.py and of verify-bundle's replay of the bundled HTP context binaries, run as its
own process (`python -m pipeline.qnn_worker JOB.json`): the Qualcomm
HTP compiler and its emulator are native code that can abort the process (QNN_COMMON_ERROR_MEM_ALLOC, a
segfault), and a crash here must not take the pipeline with it. The job file names what to do; the answer
is written to job["result"] (JSON), ONNX Runtime's log goes to stderr, which eval/qnn.py parses.

Two jobs:
- compile: the fixed-shape ONNX file for one chip: the real compile with CPU fallback disabled, writing the
  context model (embed mode 0: <name>_ctx.onnx + <name>_ctx_qnn.bin) and recording its node count; only when
  it is refused, a second session that may fall back to the CPU records which subgraphs each execution
  provider took (the node counts of a refused file). One session per passing compile halves the stage's
  compile time (the LSTMs take 1-10 s per compile).
- emulate: the context model run through the QNN provider (x86: the HTP emulator) and its source file on the
  CPU provider, on the same feeds (an .npz of samples); both sets of logits go to job["logits"] (.npz).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def _qnn():
    import onnxruntime as ort
    import onnxruntime_qnn as q

    ort.register_execution_provider_library("QNNExecutionProvider", q.get_library_path())  # once per process
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    return ort, q, devs


def _options(ort, q, devs, chip: dict, **entries: str):
    so = ort.SessionOptions()
    so.log_severity_level = 2  # warnings: the "Unsupported nodes" and validation lines eval/qnn.py parses
    for k, v in entries.items():
        so.add_session_config_entry(k, v)
    so.add_provider_for_devices(devs, {"backend_path": q.get_qnn_htp_path(), "soc_model": chip["soc_model"],
                                       "htp_arch": chip["htp_arch"]})
    return so


def compile_job(job: dict) -> dict:
    ort, q, devs = _qnn()
    src, ctx = job["onnx"], Path(job["context"])
    for p in (ctx, ctx.with_name(ctx.stem + "_qnn.bin")):  # the compiler refuses to overwrite its output
        p.unlink(missing_ok=True)
    ctx.parent.mkdir(parents=True, exist_ok=True)
    # The real compile, CPU fallback disabled, writing the context model; ORT's graph-assignment record
    # (ORT >= 1.32) of this session gives the node count when it compiles (every node on the HTP).
    record = {"session.record_ep_graph_assignment_info": "1"}
    so = _options(ort, q, devs, job["chip"], **record, **{"session.disable_cpu_ep_fallback": "1",
                                                          "ep.context_enable": "1", "ep.context_file_path": str(ctx),
                                                          "ep.context_embed_mode": "0"})
    t = time.perf_counter()
    try:
        assigned = ort.InferenceSession(src, so).get_provider_graph_assignment_info()
        out = {"compiled": True}
    except Exception as e:  # noqa: BLE001 - ORT raises its own Fail/RuntimeException types
        assigned, out = None, {"compiled": False, "error": str(e).strip().splitlines()[0][:400]}
    out["compile_seconds"] = time.perf_counter() - t
    if assigned is None:  # refused: which subgraphs each provider takes when the CPU may help
        assigned = ort.InferenceSession(src, _options(ort, q, devs, job["chip"], **record)) \
            .get_provider_graph_assignment_info()
    htp = [n for g in assigned if g.ep_name == "QNNExecutionProvider" for n in g.get_nodes()]
    cpu = [n for g in assigned if g.ep_name != "QNNExecutionProvider" for n in g.get_nodes()]
    out.update(nodes_on_htp=len(htp), nodes_total=len(htp) + len(cpu),
               htp_partitions=sum(g.ep_name == "QNNExecutionProvider" for g in assigned),
               cpu_nodes=[{"name": n.name, "type": n.op_type} for n in cpu])
    return out


def emulate_job(job: dict) -> dict:
    ort, q, devs = _qnn()
    feeds = np.load(job["feeds"])
    n = int(feeds["n"])
    htp = ort.InferenceSession(job["context"], _options(ort, q, devs, job["chip"]))
    # no source file: only the emulator's logits (verify-bundle compares them with the stored ones)
    cpu = ort.InferenceSession(job["onnx"], providers=["CPUExecutionProvider"]) if job.get("onnx") else None
    names = [i.name for i in (cpu or htp).get_inputs()]
    got, want, t = [], [], time.perf_counter()
    for i in range(n):
        feed = {k: feeds[f"{i}/{k}"] for k in names}
        got.append(htp.run(None, feed)[0].reshape(-1).astype(np.float32))
    seconds = time.perf_counter() - t
    for i in range(n if cpu is not None else 0):
        want.append(cpu.run(None, {k: feeds[f"{i}/{k}"] for k in names})[0].reshape(-1).astype(np.float32))
    empty = np.zeros((0, 0), dtype=np.float32)
    np.savez(job["logits"], emulator=np.stack(got) if got else empty, cpu=np.stack(want) if want else empty)
    return {"samples": n, "emulator_seconds_per_inference": seconds / max(n, 1)}


def die_with_parent(parent: int | None) -> None:
    """Linux: have the kernel kill this process when the pipeline that started it dies (a `kill`, a crash): a
    worker left running would go on compiling into the dead run's folder while the next run uses it."""
    import os
    import signal

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent and os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    die_with_parent(job.get("parent"))
    result = {"compile": compile_job, "emulate": emulate_job}[job["kind"]](job)
    Path(job["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def emulator_logits(context: Path, soc_model: str, htp_arch: str, feeds: list[dict[str, np.ndarray]],
                    timeout_s: float = 600) -> np.ndarray:
    """Logits (N, C) of a compiled context model on the HTP emulator, one feed per call, in this module's worker
    process (verify-bundle: needs numpy, onnxruntime and onnxruntime-qnn only). Raises RuntimeError with what the
    worker's log says when it dies, refuses the binary or times out."""
    from eval.qnn import run_emulator

    logits, _, error = run_emulator(context, None, {"soc_model": soc_model, "htp_arch": htp_arch}, feeds, timeout_s)
    if error:
        raise RuntimeError(error)
    return logits["emulator"]
