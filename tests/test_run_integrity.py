"""Status compares file contents (sha256), not sizes; one process at a time writes a run folder."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from pipeline.hashcache import CACHE_NAME, HashCache
from pipeline.lock import LOCK_NAME, run_lock
from conftest import use_toy_stages
from pipeline.stage import run, run_stage, status, statuses

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def label_stages(monkeypatch):
    """Two toy stages: 'data' writes labels.json, 'train' copies the label list it read."""
    from pipeline import cli
    from pipeline import stage as st

    cli._stages()  # register the real stages first, so no later import adds them to the toy registry
    calls: list[str] = []

    def data(ctx):
        calls.append("data")
        (ctx.out / "labels.json").write_text(json.dumps(["negative", "positive"]))
        return {}

    def train(ctx):
        calls.append("train")
        labels = json.loads((ctx.input("data") / "labels.json").read_text())
        (ctx.out / "model.json").write_text(json.dumps({"labels": labels}))
        return {}

    use_toy_stages(monkeypatch, [("data", data, (), ("data",)), ("train", train, ("data",), ())])
    return calls


def test_same_size_edit_is_stale_and_reruns(label_stages, tmp_path):
    calls = label_stages
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    assert run(cfg, ["train"]) == ["data", "train"]
    labels = cfg.run_dir / "data" / "labels.json"
    assert (cfg.run_dir / CACHE_NAME).is_file()  # the finished stages' hashes were remembered
    assert statuses(cfg, ["train"]) == {"data": (True, "up to date"), "train": (True, "up to date")}
    before = labels.stat().st_size
    # two labels of equal length swapped: same size, different meaning
    labels.write_text(json.dumps(["positive", "negative"]))
    assert labels.stat().st_size == before
    fresh, why = status(cfg, "data")
    assert not fresh and why == ("its files were changed or removed (labels.json changed (its sha256 differs "
                                 "from the manifest's))")
    # the stage after it is reported too: `run` would re-run it after its input
    assert statuses(cfg, ["train"])["train"] == (False, "its input 'data' will re-run")
    # data writes the labels train was built from again: train, keyed on that content, stays as it is
    assert run(cfg, ["train"]) == ["data"]
    assert json.loads(labels.read_text()) == ["negative", "positive"]  # the stage wrote it again
    assert calls == ["data", "train", "data"]
    assert run(cfg, ["train"]) == []


def test_cli_status_names_the_changed_file(label_stages, tmp_path, capsys, monkeypatch):
    from pipeline import cli
    from pipeline import stage as st

    monkeypatch.setattr(cli, "_stages", lambda: st.STAGES)
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(f'[run]\nruns_dir = "{tmp_path}"\n')
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    run(cfg, ["train"])
    model = cfg.run_dir / "train" / "model.json"
    model.write_text(model.read_text().replace("negative", "NEGATIVE"))
    assert cli.main(["status", "--config", str(cfg_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["stage", "last", "run", "began", "took", "state"]
    # each stage's line: when its manifest says it last ran, and for how long
    data = json.loads((cfg.run_dir / "data" / "manifest.json").read_text())
    began = data["started"].replace("T", " ")[:16]
    assert out[1].split() == ["data", *began.split(), f"{data['seconds']:.1f}", "s", "up", "to", "date"]
    assert out[2].startswith("train") and "model.json changed" in out[2]
    train = json.loads((cfg.run_dir / "train" / "manifest.json").read_text())
    assert out[3].split() == ["in", "all", f"{data['seconds'] + train['seconds']:.1f}", "s", "(the", "last", "run",
                              "of", "every", "stage", "listed)"]
    (cfg.run_dir / ".train.partial").mkdir()  # what a killed stage leaves
    assert cli.main(["status", "--config", str(cfg_file)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"note: {cfg.run_dir / '.train.partial'} is what an interrupted stage left; the next run of that stage (or a "
        f"run that finds it up to date) removes it")


@pytest.mark.parametrize("bad", ["[]", '"done"', "null", '{"config_hash": 1}',
                                 '{"config_hash": "x", "inputs": {}, "summary": {}, "outputs": "labels.json"}',
                                 '{"config_hash": "x", "inputs": [], "summary": {}, "outputs": {}}',
                                 '{"config_hash": "x", "inputs": {}, "summary": {}, "outputs": {"a": 3}}'])
def test_manifest_of_another_shape_is_not_run_yet(label_stages, tmp_path, bad):
    """Valid JSON of the wrong shape (a list, outputs as a string) is a damaged manifest, as invalid JSON is:
    status says the stage has not run, and run re-runs it (both failed with an AttributeError)."""
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    assert run(cfg, ["train"]) == ["data", "train"]
    (cfg.run_dir / "train" / "manifest.json").write_text(bad)
    assert status(cfg, "train") == (False, "not run yet")
    assert run(cfg, ["train"]) == ["train"]
    assert statuses(cfg, ["train"])["train"] == (True, "up to date")


def test_hash_cache_is_used_and_invalidated(tmp_path, monkeypatch):
    from pipeline import hashcache

    f = tmp_path / "w.bin"
    f.write_bytes(b"a" * 100)
    cache = HashCache(tmp_path)
    first = cache.sha256(f)
    cache.save()
    hashed = []
    monkeypatch.setattr(hashcache, "sha256_file", lambda p: hashed.append(p) or "recomputed")
    again = HashCache(tmp_path)
    assert again.sha256(f) == first and hashed == []  # unchanged stat: the cached value, no hashing
    f.write_bytes(b"b" * 100)  # same size, new content: the signature moved
    assert again.sha256(f) == "recomputed" and hashed == [f]
    (tmp_path / CACHE_NAME).write_text("{not json")  # a damaged cache only costs a re-hash
    assert HashCache(tmp_path).sha256(f) == "recomputed"


def test_lock_is_reentrant_and_exclusive_within_a_process(tmp_path):
    run_dir = tmp_path / "r"
    with run_lock(run_dir, "outer"):
        with run_lock(run_dir, "inner"):  # run() holding it, then run_stage() taking it again
            pass
        assert f"pid {os.getpid()}" in (run_dir / LOCK_NAME).read_text()
    with run_lock(run_dir, "again"):  # released: can be taken again
        pass


def test_second_process_gets_a_clear_lock_error(label_stages, tmp_path):
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    # another process holds the run folder (as a run busy in a long stage would)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from pipeline.lock import run_lock
            with run_lock(Path({str(cfg.run_dir)!r}), "teacher of configs/own.toml"):
                print("locked", flush=True)
                sys.stdin.readline()
        """)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(PipelineError) as err:
            run(cfg, ["train"])
        msg = str(err.value)
        assert f"pid {holder.pid}" in msg and "teacher of configs/own.toml" in msg
        assert "in use by another pocketformer process" in msg and "wait for it to finish" in msg
        assert "kill" in msg and "run.name" in msg
        with pytest.raises(PipelineError, match=f"pid {holder.pid}"):
            run_stage(cfg, "data")
        assert not (cfg.run_dir / "data").exists() and not (cfg.run_dir / ".data.partial").exists()
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    # the holder has exited, so its lock is gone with it
    assert run(cfg, ["train"]) == ["data", "train"]


def test_killed_holder_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "r"
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import time; from pathlib import Path; from pipeline.lock import run_lock\n"
                               f"with run_lock(Path({str(run_dir)!r}), 'x'):\n print('locked', flush=True)\n"
                               f" time.sleep(600)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait(timeout=60)
    with run_lock(run_dir, "after a crash"):  # the kernel released the dead process's flock
        assert "after a crash" in (run_dir / LOCK_NAME).read_text()


def test_an_edited_data_file_or_teacher_folder_re_runs_its_stage(tiny_bert_dir, tmp_path):
    """The data stage is keyed on the CSV's bytes, not only its path; the teacher on its folder's files."""
    import os
    import shutil

    from conftest import tiny_run_config, write_tiny_csv
    from pipeline.stage import source_digests

    csv = write_tiny_csv(tmp_path / "reviews.csv")
    cfg = config_from_dict(tiny_run_config(tiny_bert_dir, csv, tmp_path / "runs"))
    run(cfg, ["data"])
    before = (cfg.run_dir / "data" / "train.jsonl").read_bytes()
    stat = csv.stat()
    os.utime(csv, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched, same bytes: nothing to do
    assert status(cfg, "data") == (True, "up to date")
    lines = csv.read_text().splitlines()
    flipped = lines[1].rsplit(",", 1)[0] + "," + ("negative" if lines[1].endswith("positive") else "positive")
    csv.write_text("\n".join([lines[0], flipped, *lines[2:]]) + "\n")
    assert status(cfg, "data") == (False, f"the content of data.train_path ({csv}) changed")
    assert run(cfg, ["data"]) == ["data"] and (cfg.run_dir / "data" / "train.jsonl").read_bytes() != before
    assert status(cfg, "data") == (True, "up to date")

    teacher = shutil.copytree(tiny_bert_dir, tmp_path / "teacher")
    cfg = config_from_dict({**tiny_run_config(teacher, csv, tmp_path / "runs")})
    first = source_digests(cfg, "teacher")
    assert list(first) == ["teacher.model"] and source_digests(cfg, "data").keys() == {"data.train_path"}
    (teacher / "config.json").write_text((teacher / "config.json").read_text().replace("0.1", "0.3"))
    assert source_digests(cfg, "teacher") != first
    hub = config_from_dict({**tiny_run_config(teacher, csv, tmp_path / "runs"), "teacher": {"model": "org/name"}})
    assert source_digests(hub, "teacher") == {}  # a hub id is no local path: pinned by its id


def test_status_table_durations_and_total(tmp_path):
    """`status` reads each stage's time from its manifest: minutes from 60 s on, '-' for a stage that has not run
    (or whose manifest lacks the fields), and the total of the stages that have run."""
    from pipeline.cli import status_table

    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path), "name": "r"}})
    base = {"config_hash": "x", "summary": {}, "inputs": {}, "outputs": {}}
    for name, extra in {"a": {"started": "2026-11-27T09:05:07", "seconds": 3725.4},
                        "b": {"started": "2026-11-27T10:07:12", "seconds": 12.25}, "c": {}}.items():
        (cfg.run_dir / name).mkdir(parents=True)
        (cfg.run_dir / name / "manifest.json").write_text(json.dumps({**base, **extra}))
    table = status_table(cfg, {"a": (True, "up to date"), "b": (False, "its settings changed"),
                               "c": (False, "x"), "d": (False, "not run yet")}).splitlines()
    assert table[1] == "a          2026-11-27 09:05   62 min 5 s  up to date"
    assert table[2] == "b          2026-11-27 10:07       12.2 s  its settings changed"
    assert table[3].split() == ["c", "-", "-", "x"]
    assert table[4].split() == ["d", "-", "-", "not", "run", "yet"]
    assert table[5].split()[:5] == ["in", "all", "62", "min", "18"]  # 3725.4 + 12.25 = 3737.65 s
    from pipeline.cli import _duration

    assert (_duration(59.94), _duration(119.7), _duration(60)) == ("59.9 s", "2 min 0 s", "1 min 0 s")


def test_a_cache_save_killed_before_its_rename_is_cleaned_up(tmp_path):
    """A kill between writing the hash cache and renaming it left .sha256-cache.json.<pid>.part for good; the next
    save removes it, unless that process is alive (it is saving now)."""
    import os

    dead = tmp_path / f"{CACHE_NAME}.999999999.part"
    dead.write_text("{}")
    live = tmp_path / f"{CACHE_NAME}.{os.getppid()}.part"
    live.write_text("{}")
    (tmp_path / "f.txt").write_text("x")
    cache = HashCache(tmp_path)
    cache.sha256(tmp_path / "f.txt")
    cache.save()
    assert not dead.exists() and live.exists() and (tmp_path / CACHE_NAME).is_file()


def test_a_cache_save_under_a_reused_pid_is_cleaned_up(tmp_path):
    """A killed save's .part named by its pid alone stayed once that pid went to another process: the name holds
    the pid and its start time now, and a file of the older name counts only if that pid's process started
    before the file was written."""
    import os

    import psutil

    ppid = os.getppid()  # a live process: pytest's parent
    started = int(psutil.Process(ppid).create_time())
    reused = tmp_path / f"{CACHE_NAME}.{ppid}-{started - 3600}.part"
    old_name = tmp_path / f"{CACHE_NAME}.{ppid}.part"
    live = tmp_path / f"{CACHE_NAME}.{ppid}-{started}.part"
    for f in (reused, old_name, live):
        f.write_text("{}")
    os.utime(old_name, (started - 3600, started - 3600))  # written an hour before that process started
    (tmp_path / "f.txt").write_text("x")
    cache = HashCache(tmp_path)
    cache.sha256(tmp_path / "f.txt")
    cache.save()
    assert not reused.exists() and not old_name.exists() and live.exists()
    assert (tmp_path / CACHE_NAME).is_file()


def test_status_shows_the_stage_a_live_process_runs(tmp_path, capsys, monkeypatch):
    """`status` during a run said the running stage had not run and called its scratch folder what an interrupted
    stage left: the runner marks the stage it runs (pid and start time) and status says "running now (pid N)".
    A marker whose process is gone, or whose pid went to another process, is an interrupted stage again, and no
    marker makes the runner take a stage as finished."""
    import psutil

    from pipeline import cli
    from pipeline import stage as st

    cli._stages()
    seen: list[list[str]] = []

    def data(ctx):
        (ctx.out / "labels.json").write_text("[]")
        return {}

    def train(ctx):  # `status` from inside the stage: this process runs it now
        assert cli.main(["status", "--config", str(cfg_file)]) == 0
        seen.append(capsys.readouterr().out.splitlines())
        (ctx.out / "model.json").write_text("{}")
        return {}

    use_toy_stages(monkeypatch, [("data", data, (), ("data",)), ("train", train, ("data",), ())])
    monkeypatch.setattr(cli, "_stages", lambda: st.STAGES)
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(f'[run]\nruns_dir = "{tmp_path}"\n')
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    marker = cfg.run_dir / ".train.running"
    assert run(cfg, ["train"]) == ["data", "train"]
    (lines,) = seen
    assert lines[2].startswith("train") and lines[2].endswith(f"running now (pid {os.getpid()})")
    assert not any(line.startswith("note:") for line in lines)  # its .train.partial is its work in progress
    assert not marker.exists()  # removed when the stage ended

    # a kill leaves the marker: its pid dead, or its pid reused by another process (started at another time)
    ppid = os.getppid()
    started = int(psutil.Process(ppid).create_time())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    shutil.rmtree(cfg.run_dir / "train")
    (cfg.run_dir / ".train.partial").mkdir()
    for pid, start in ((int(dead.stdout), started), (ppid, started - 3600)):
        marker.write_text(json.dumps({"pid": pid, "start": start, "host": socket.gethostname()}))
        assert cli.main(["status", "--config", str(cfg_file)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[2].split() == ["train", "-", "-", "not", "run", "yet"]
        assert out[-1].startswith(f"note: {cfg.run_dir / '.train.partial'} is what an interrupted stage left")
    # a live process's marker (pytest's parent's) changes nothing for the runner: no manifest, no finished stage
    marker.write_text(json.dumps({"pid": ppid, "start": started, "host": socket.gethostname()}))
    assert st.running(cfg.run_dir, "train") == f"running now (pid {ppid})"
    assert status(cfg, "train") == (False, "not run yet")
    assert run(cfg, ["train"]) == ["train"] and len(seen) == 2
    assert not marker.exists()


def test_status_of_a_run_folder_that_does_not_exist_says_so(tmp_path, capsys):
    """A mistyped run.name showed every stage "not run yet", as if the run had never been made: status now says
    there is no such folder and names the runs that are there."""
    from pipeline import cli

    (tmp_path / "demo").mkdir()
    (tmp_path / ".cache").mkdir()  # hidden folders are no runs
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(f'[run]\nruns_dir = "{tmp_path}"\nname = "dmeo"\n')
    assert cli.main(["status", "--config", str(cfg_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"note: there is no run folder {tmp_path / 'dmeo'} yet; the runs in {tmp_path}: demo"
    assert not (tmp_path / "dmeo").exists()  # status creates nothing
    cfg_file.write_text(f'[run]\nruns_dir = "{tmp_path}"\nname = "demo"\n')
    assert cli.main(["status", "--config", str(cfg_file)]) == 0
    assert "no run folder" not in capsys.readouterr().out
