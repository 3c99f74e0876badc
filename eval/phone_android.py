"""The bundled .ort model timed on an Android phone with ONNX Runtime's own onnxruntime_perf_test, via adb.

Host side: every adb call is an argument list (no local shell; the serial and paths are separate
arguments). Device side: `adb shell` hands its arguments to the phone's sh, so each remote argument is
quoted with shlex.quote (a QNN option such as backend_path|libQnnHtp.so would otherwise be a pipe).
"""
from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError

PROVIDERS = ("cpu", "xnnpack", "qnn", "nnapi")  # perf_test's -e names
# NPU providers run the fixed-shape static-QDQ file (what they can take) with CPU fallback disabled: a node
# the provider rejects would otherwise run on the phone's CPU and the row would time the CPU under an NPU
# label. QNN comes first: NNAPI is deprecated (Android 15), QNN is Qualcomm's supported NPU path.
NPU_PROVIDERS = ("qnn", "nnapi")
NO_CPU_FALLBACK = "session.disable_cpu_ep_fallback|1"  # perf_test -C "<key>|<value>": a session config entry
CPU_MODEL, NPU_MODEL = "model.ort", "model_npu.onnx"
# what ONNX Runtime says when the provider leaves nodes for the CPU and fallback is disabled
NO_FALLBACK_REFUSAL = re.compile(r"fallback to CPU EP has been explicitly disabled", re.I)
SAFE_REMOTE = re.compile(r"^/[A-Za-z0-9_./-]+$")
PROPS = {"model": "ro.product.model", "manufacturer": "ro.product.manufacturer", "soc_model": "ro.soc.model",
         "soc_manufacturer": "ro.soc.manufacturer", "board": "ro.board.platform", "hardware": "ro.hardware",
         "android": "ro.build.version.release", "abi": "ro.product.cpu.abi"}
# what a perf_test build without the provider prints (ort_test_session.cc: "<EP> is not supported in this build")
NOT_BUILT = re.compile(r"not supported in this build|is not supported|not enabled in this build", re.I)


@dataclass
class Adb:
    exe: str
    serial: str
    timeout_s: int = 600

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [self.exe, "-s", self.serial, *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise PipelineError(f"adb {' '.join(args[:2])} on {self.serial} gave no answer in {self.timeout_s:g} s; "
                                f"check the phone is connected and unlocked (`adb devices`)") from None
        if check and proc.returncode != 0:
            raise PipelineError(f"adb {' '.join(args[:2])} failed on {self.serial}: "
                                f"{(proc.stderr or proc.stdout).strip()[-300:]}; check the phone is unlocked and "
                                f"USB debugging is allowed")
        return proc

    def shell(self, *remote_args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("shell", *(shlex.quote(a) for a in remote_args), check=check)


def devices(adb_exe: str) -> list[str]:
    """Serials `adb devices` lists as ready ("device" state; unauthorized / offline ones are left out)."""
    try:
        proc = subprocess.run([adb_exe, "devices"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise PipelineError(f"`{adb_exe} devices` gave no answer in 60 s: restart the adb server (`adb kill-server`) "
                            f"or pass the right adb with --adb PATH") from None
    except OSError as e:  # not executable, not a program
        raise PipelineError(f"`{adb_exe} devices` cannot run ({e.strerror or e}): pass Android platform-tools' adb "
                            f"with --adb PATH") from None
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()[-300:] or f"exit code {proc.returncode}, no output"
        raise PipelineError(f"`{adb_exe} devices` failed: {said}; is {adb_exe} Android platform-tools' adb? pass it "
                            f"with --adb PATH")
    # adb separates with a tab
    rows = [line.split("\t") if "\t" in line else line.split() for line in proc.stdout.splitlines()[1:]]
    return [parts[0] for parts in rows if len(parts) >= 2 and parts[1].strip() == "device"]


def device_info(adb: Adb) -> dict:
    info = {key: adb.shell("getprop", prop).stdout.strip() for key, prop in PROPS.items()}
    info["serial"] = adb.serial
    soc = " ".join(v for v in (info["soc_manufacturer"], info["soc_model"]) if v)
    info["soc"] = soc or info["board"] or info["hardware"]  # ro.soc.* exist from Android 12 on
    info["name"] = " ".join(v for v in (info["manufacturer"], info["model"]) if v) or adb.serial
    return info


def parse_perf_test(text: str) -> dict:
    """onnxruntime_perf_test's stdout (run with -s) -> latency entry in ms, or {} if it did not finish."""
    def num(pattern: str, flags: int = 0) -> float | None:
        m = re.search(pattern, text, flags)
        return float(m.group(1)) if m else None

    p = {key: sec * 1000.0 for key in ("Min", "Max", "P50", "P90", "P95", "P99")  # seconds -> ms
         if (sec := num(rf"^{key} Latency: ([0-9.eE+-]+) s\s*$", re.M)) is not None}
    if "P50" not in p:
        return {}
    runs = num(r"Total inference requests: (\d+)") or num(r"^Runs:\s*(\d+)")
    mean = num(r"Average inference time cost: ([0-9.eE+-]+) ms")
    rss = num(r"Peak working set size: (\d+) bytes")
    return {"p50_ms": p["P50"], "p90_ms": p.get("P90"), "p99_ms": p.get("P99"), "mean_ms": mean,
            "min_ms": p.get("Min"), "max_ms": p.get("Max"), "iterations": int(runs) if runs else None,
            "session_create_s": num(r"Session creation time cost: ([0-9.eE+-]+) s"),
            "peak_rss_mb": rss / 2**20 if rss else None}


def write_test_data(folder: Path, names: list[str], ids: list[int]) -> None:
    """perf_test reads inputs from test_data_set_0/input_<i>.pb beside the model (ONNX test-case layout)."""
    import numpy as np
    from onnx import numpy_helper

    x = np.array([ids], dtype=np.int64)  # (1, T)
    d = folder / "test_data_set_0"
    d.mkdir(parents=True, exist_ok=True)
    for i, (name, arr) in enumerate(zip(names, (x, np.ones_like(x)))):
        (d / f"input_{i}.pb").write_bytes(numpy_helper.from_array(arr, name).SerializeToString())


def run_android(adb: Adb, perf_test: Path, model_dir: Path, providers: list[str], threads: list[int], repeats: int,
                remote_dir: str, qnn_backend: str, npu_missing: str | None = None) -> list[dict]:
    """Push model_dir (model.ort, model_npu.onnx when there is one, test data) and perf_test, run every
    (provider, threads): CPU providers on model.ort, NPU providers on model_npu.onnx with CPU fallback
    disabled (npu_missing, when set, is why there is no NPU file: those runs become skips). One dict per run:
    provider, threads, the model file, and either the parsed entry or a status with its reason."""
    if not SAFE_REMOTE.match(remote_dir):
        raise PipelineError(f"phone.remote_dir = {remote_dir!r}: use an absolute path of letters, digits and ./_- "
                            f"(the phone's shell parses it), e.g. /data/local/tmp/pocketformer")
    bad = [p for p in providers if p not in PROVIDERS]
    if bad:
        raise PipelineError(f"unknown provider(s) {bad} in phone.providers. Known: {', '.join(PROVIDERS)}")
    has_npu_model = (model_dir / NPU_MODEL).is_file()
    if any(p in NPU_PROVIDERS for p in providers) and not has_npu_model and not npu_missing:
        raise ValueError(f"{model_dir} has no {NPU_MODEL} and no reason for its absence")
    remote_model_dir = f"{remote_dir}/model"
    binary = f"{remote_dir}/onnxruntime_perf_test"
    adb.shell("mkdir", "-p", remote_model_dir)
    adb.run("push", str(perf_test), binary)
    lib = perf_test.parent / "libonnxruntime.so"  # a shared-library build needs it beside the binary
    if lib.is_file():
        adb.run("push", str(lib), f"{remote_dir}/libonnxruntime.so")
    adb.shell("chmod", "755", binary)
    for path in sorted(model_dir.rglob("*")):
        if path.is_file():
            adb.run("push", str(path), f"{remote_model_dir}/{path.relative_to(model_dir).as_posix()}")
    out = []
    for ep in providers:
        npu = ep in NPU_PROVIDERS
        model = NPU_MODEL if npu else CPU_MODEL
        for n in threads:
            base = {"provider": ep, "threads": n, "model_file": model}
            if npu:
                base["session_config"] = {"session.disable_cpu_ep_fallback": "1"}
            if npu and not has_npu_model:
                out.append({**base, "status": "skipped", "reason": npu_missing})
                continue
            args = [f"LD_LIBRARY_PATH={remote_dir}", binary, "-e", ep, "-x", str(n), "-m", "times", "-r", str(repeats),
                    "-s", "-o", "99"]
            if ep == "qnn":
                args += ["-i", f"backend_path|{qnn_backend}"]
            if npu:
                args += ["-C", NO_CPU_FALLBACK]
            args.append(f"{remote_model_dir}/{model}")
            proc = adb.shell(*args, check=False)  # "VAR=value cmd ...": sh sets the variable for cmd
            text = (proc.stdout or "") + "\n" + (proc.stderr or "")
            entry = parse_perf_test(proc.stdout or "")
            if proc.returncode == 0 and entry:
                out.append({**base, "entry": entry})
            elif npu and NO_FALLBACK_REFUSAL.search(text):  # before NOT_BUILT: "op ... is not supported" lines
                out.append({**base, "status": "failed",
                            "reason": f"the {ep} provider cannot run every node of {model} (CPU fallback disabled, so "
                                      f"it was not timed on the CPU under the {ep} label)"})
            elif NOT_BUILT.search(text):
                out.append({**base, "status": "skipped",
                            "reason": f"this onnxruntime_perf_test build has no {ep} provider"})
            else:
                last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
                out.append({**base, "status": "failed", "reason": f"perf_test exit {proc.returncode}: {last[0][:300]}"})
    return out
