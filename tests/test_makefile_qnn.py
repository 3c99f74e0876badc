"""The Makefile's optional onnxruntime-qnn install (make install-qnn, run by the set-up): a failed install does not
stop the set-up, but says in one line that it failed, why (pip's first error), that the compile stage will be
skipped and how to retry, keeping pip's output. Run against a stand-in .venv whose pip fails for the .[qnn] extra."""
from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PIP_ERROR = "ERROR: Could not find a version that satisfies the requirement onnxruntime-qnn==2.7.0 (from versions: none)"

pytestmark = pytest.mark.skipif(shutil.which("make") is None or (platform.system(), platform.machine()) !=
                                ("Linux", "x86_64"), reason="needs make on Linux x86_64 (elsewhere no pip runs)")


def _venv(tmp_path: Path, qnn_fails: bool) -> Path:
    """A stand-in .venv: bin/pip records its arguments and fails for the .[qnn] extra when qnn_fails."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    pip = venv / "bin" / "pip"
    fail = f'echo "Looking in indexes: https://pypi.org/simple"; echo "{PIP_ERROR}"; exit 1' if qnn_fails else "exit 0"
    pip.write_text(f'#!/bin/sh\necho "$*" >> "{venv}/pip-calls"\ncase "$*" in *qnn*) {fail};; esac\nexit 0\n')
    pip.chmod(0o755)
    return venv


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), *args], capture_output=True,
                          text=True, timeout=120)


def test_a_failed_qnn_install_says_so_in_one_line_and_the_set_up_goes_on(tmp_path):
    venv = _venv(tmp_path, qnn_fails=True)
    # the whole set-up (the .venv stamp `make all` needs), with a python whose `-m venv` does nothing
    p = _make(f"VENV={venv}", "PYTHON=true", f"{venv}/.installed-stamp")
    assert p.returncode == 0, p.stderr
    assert (venv / ".installed-stamp").is_file()  # optional: the set-up finished
    assert "install --disable-pip-version-check -q -e .[qnn]" in (venv / "pip-calls").read_text()
    lines = [line for line in (p.stdout + p.stderr).splitlines() if "qnn" in line]
    assert len(lines) == 1, p.stdout + p.stderr
    log = venv / "qnn-install.log"
    assert lines[0] == (f"warning: the optional onnxruntime-qnn install failed ({PIP_ERROR}; pip's output: {log}): "
                        f"the compile stage will be skipped. Retry with 'make install-qnn' (wheels need Linux x86_64 "
                        f"with glibc >= 2.35)")
    assert PIP_ERROR in log.read_text()  # pip's whole output is kept


def test_a_qnn_install_that_works_prints_nothing_and_keeps_no_log(tmp_path):
    venv = _venv(tmp_path, qnn_fails=False)
    (venv / "qnn-install.log").write_text("from an earlier failed try")
    p = _make(f"VENV={venv}", "install-qnn")
    assert p.returncode == 0 and p.stdout == "" and p.stderr == ""
    assert not (venv / "qnn-install.log").exists()


def test_install_qnn_without_a_venv_says_to_set_up_first(tmp_path):
    p = _make(f"VENV={tmp_path / 'none'}", "install-qnn")
    assert p.returncode != 0 and "run 'make install' first" in p.stderr
