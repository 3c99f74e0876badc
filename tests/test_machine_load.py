"""The bench records how much of the machine other processes took while it ran, not only in the second
before it started; the report warns when either share is above a quarter of the cores."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from eval import machine as M

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_other_load_is_the_machines_busy_time_minus_this_process_trees(monkeypatch):
    clock = iter([10.0, 20.0])  # 10 s of wall time
    busy = iter([100.0, 109.0])  # the machine: 9 busy CPU seconds
    own = iter([50.0, 54.0])  # ours: 4 of them
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(M, "_busy_seconds", lambda: next(busy))
    monkeypatch.setattr(M, "_own_seconds", lambda: next(own))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert M.OtherLoad().percent() == 25.0  # 5 CPU seconds of others over 10 s of 2 cores


def test_a_child_counts_as_ours_and_a_detached_process_does_not():
    """What the bench starts (Chromium, Node) is its own work; a process it did not start is other load."""
    before = M._own_seconds()
    subprocess.run([sys.executable, "-c", BURN.format(s=0.6)], check=True)
    assert M._own_seconds() - before >= 0.5
    before, machine = M._own_seconds(), M._busy_seconds()
    # started by a shell that exits at once: re-parented, no longer this process's descendant
    subprocess.run(["sh", "-c", f'{sys.executable} -c "{BURN.format(s=0.6)}" > /dev/null 2>&1 &'], check=True)
    time.sleep(1.5)
    assert M._own_seconds() - before < 0.2
    assert M._busy_seconds() - machine >= 0.5  # it ran: the machine's busy time holds it


@pytest.mark.parametrize("start, during, busy", [(0.0, 40.0, True), (40.0, None, True), (0.0, 10.0, False),
                                                 (None, None, False)])
def test_busy_at_the_start_or_while_the_bench_ran(start, during, busy):
    m = {"cpu_busy_percent": start, "cpu_busy_during_percent": during, "load_average_1m": 0.1, "usable_cores": 2}
    assert M.is_busy(m) is busy


def test_the_report_warns_of_load_that_came_while_the_bench_ran():
    from eval.report import blocks, to_markdown
    from tests.test_report_render import _doc, _row, classified

    doc = _doc([_row("teacher", "fp32", "onnx", "accuracy", 0.8, 4000, {64: 10.0}, {64: 20.0})])
    doc["machine"].update(cpu_busy_percent=0.0, cpu_busy_during_percent=48.5, load_average_1m=2.68, usable_cores=2)
    md = to_markdown(blocks(classified(doc), {}))
    assert ("WARNING: the machine was busy (other processes used 0.0% of 2 cores when the bench started, 48.5% "
            "while it ran; load average 2.68)") in md
    doc["machine"]["cpu_busy_during_percent"] = 3.0
    assert "WARNING: the machine was busy" not in to_markdown(blocks(classified(doc), {}))
