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


@pytest.mark.parametrize("own", [[(50.0, 20.0), (54.0, 23.0)], [(50.0, 20.0), (51.0, 24.0)]])
def test_other_load_is_the_machines_busy_time_minus_this_process_trees(monkeypatch, own):
    """Ours is the larger of the two counts of this tree's time (waited for, or seen alive): 4 of the 9."""
    clock = iter([10.0, 20.0])  # 10 s of wall time
    busy = iter([100.0, 109.0])  # the machine: 9 busy CPU seconds
    own = iter(own)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(M, "_busy_seconds", lambda: next(busy))
    monkeypatch.setattr(M, "_own_seconds", lambda: next(own))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert M.OtherLoad().percent() == 25.0  # 5 CPU seconds of others over 10 s of 2 cores


def test_a_child_counts_as_ours_and_a_detached_process_does_not():
    """What the bench starts (Chromium, Node) is its own work; a process it did not start is other load."""
    before = M._own_seconds()
    subprocess.run([sys.executable, "-c", BURN.format(s=0.6)], check=True)
    assert M._own_seconds()[0] - before[0] >= 0.5
    before, machine = M._own_seconds(), M._busy_seconds()
    # started by a shell that exits at once: re-parented, no longer this process's descendant
    subprocess.run(["sh", "-c", f'{sys.executable} -c "{BURN.format(s=0.6)}" > /dev/null 2>&1 &'], check=True)
    time.sleep(1.5)
    assert all(now - then < 0.2 for now, then in zip(M._own_seconds(), before))
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


# a parent that starts a burner, leaves it unwaited for and exits after it: the burner's time reaches no one
ABANDON = ("import os, subprocess, sys, time\n"
           "subprocess.Popen([sys.executable, '-c', {burn!r}])\n"
           "time.sleep({s} + 0.8)\n"
           "os._exit(0)\n")


def test_a_watched_run_counts_the_work_of_descendants_nobody_waited_for():
    """Chromium's renderers run the browser bench's WASM and are never waited for up to the bench (the
    browser ends their parent first): seen alive every half second by run_watched, their time is the bench's."""
    argv = [sys.executable, "-c", ABANDON.format(burn=BURN.format(s=1.5), s=1.5)]
    (reaped, seen), machine = M._own_seconds(), M._busy_seconds()
    subprocess.run(argv, check=True)
    (reaped_after, seen_after), machine_after = M._own_seconds(), M._busy_seconds()
    assert machine_after - machine >= 1.4  # the burner ran on this machine ...
    assert reaped_after - reaped < 0.6 and seen_after - seen < 0.6  # ... and an unwatched run loses it
    (reaped, seen) = M._own_seconds()
    proc = M.run_watched(argv, timeout_s=30)
    assert proc.returncode == 0
    reaped_after, seen_after = M._own_seconds()
    assert reaped_after - reaped < 0.6
    assert seen_after - seen >= 1.0  # seen alive until its last half second


def test_a_watched_run_past_its_time_is_killed_and_raises():
    t = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        M.run_watched([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=1.2)
    assert time.monotonic() - t < 10


def test_a_watched_run_returns_what_the_command_printed():
    proc = M.run_watched([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); "
                          "sys.exit(3)"], timeout_s=30)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_an_interrupted_watched_run_leaves_no_process_behind(monkeypatch, tmp_path):
    """Ctrl-C while Node runs: as with subprocess.run, the command is killed, not left running or waited for."""
    import psutil

    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def interrupt():
        if pid_file.is_file() and pid_file.read_text():
            raise KeyboardInterrupt

    monkeypatch.setattr(M, "note_descendants", interrupt)
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        M.run_watched([sys.executable, "-c", script], timeout_s=60)
    assert time.monotonic() - t < 30
    assert not psutil.pid_exists(int(pid_file.read_text()))
