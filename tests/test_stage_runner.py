"""The runner's promises: dependency order, skip when up to date, re-run on change, nothing half-written."""
import json

import pytest

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from pipeline.manifest import read_manifest
from pipeline.stage import run, status
from conftest import use_toy_stages


@pytest.fixture
def toy_stages(monkeypatch):
    calls = []

    def make(name, fail=False):
        def fn(ctx):
            calls.append(name)
            (ctx.out / "out.txt").write_text(name)
            if fail:
                raise PipelineError(f"{name} failed")
            return {"ok": True}
        return fn

    use_toy_stages(monkeypatch, [(name, make(name), deps, secs)
                                 for name, deps, secs in (("a", (), ("data",)), ("b", ("a",), ("distill",)),
                                                          ("c", ("b",), ()))])
    yield calls, make


def test_order_skip_and_rerun(toy_stages, tmp_path):
    calls, make = toy_stages
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    assert run(cfg, ["c"]) == ["a", "b", "c"]
    assert run(cfg, ["c"]) == []
    cfg2 = config_from_dict({"run": {"runs_dir": str(tmp_path)}, "distill": {"epochs": 9}})
    assert status(cfg2, "b") == (False, "its settings changed")
    # a is untouched by [distill]; b wrote the same out.txt, so c, keyed on b's files, is still up to date
    assert run(cfg2, ["c"]) == ["b"]
    (cfg2.run_dir / "b" / "out.txt").write_text("tampered!")
    assert status(cfg2, "b")[1].startswith("its files were changed or removed (out.txt changed")
    m = read_manifest(cfg2.run_dir / "c")
    assert m["inputs"]["b"] and "versions" in m and m["summary"] == {"ok": True}


def test_failed_stage_leaves_nothing_and_keeps_previous(toy_stages, tmp_path):
    calls, make = toy_stages
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    run(cfg, ["b"])
    from pipeline.task import Step
    from pipeline.tasks import TASKS

    TASKS["classification"].steps["b"] = Step(make("b", fail=True), ("distill",))
    with pytest.raises(PipelineError, match="b failed"):
        run(cfg, ["b"], force=("b",))
    assert not (cfg.run_dir / ".b.partial").exists()
    assert (cfg.run_dir / "b" / "manifest.json").exists()  # the earlier finished result is still intact
    with pytest.raises(PipelineError, match="unknown stage 'zzz'. Known stages: a, b, c"):
        run(cfg, ["zzz"])


def test_a_killed_rerun_of_an_up_to_date_stage_leaves_no_scratch_behind(toy_stages, tmp_path):
    """`--force` killed mid-stage leaves .<stage>.partial; the next run finds the stage up to date and drops it."""
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    run(cfg, ["b"])
    (cfg.run_dir / ".a.partial").mkdir()
    (cfg.run_dir / ".a.partial" / "half.bin").write_bytes(b"x" * 10)
    assert run(cfg, ["b"]) == []
    assert not (cfg.run_dir / ".a.partial").exists() and (cfg.run_dir / "a" / "out.txt").read_text() == "a"


def test_cli_reports_errors_in_one_line(capsys, tmp_path):
    from pipeline.cli import main

    assert main(["data", "--config", str(tmp_path / "none.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config file") and err.count("\n") == 1


def test_a_stage_run_at_an_older_step_revision_re_runs(toy_stages, tmp_path):
    """A fix in what a step writes (Step.revision raised) re-runs the stages a run finished before it, and what
    reads them when their files change; a manifest from before revisions existed counts as revision 1."""
    from dataclasses import replace

    from pipeline.tasks import TASKS

    calls, make = toy_stages
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    run(cfg, ["c"])
    assert read_manifest(cfg.run_dir / "b")["revision"] == 1
    manifest = cfg.run_dir / "a" / "manifest.json"  # as written before manifests recorded a revision
    m = json.loads(manifest.read_text())
    del m["revision"]
    manifest.write_text(json.dumps(m))
    assert run(cfg, ["c"]) == []

    def fixed(ctx):  # what the fixed step writes differs from what revision 1 wrote
        calls.append("b")
        (ctx.out / "out.txt").write_text("b, fixed")
        return {"ok": True}

    steps = dict(TASKS["classification"].steps)
    steps["b"] = replace(steps["b"], fn=fixed, revision=2)
    TASKS["classification"] = replace(TASKS["classification"], steps=steps)
    assert status(cfg, "b") == (False, "what its step writes changed in this pocketformer (revision 1 -> 2)")
    assert status(cfg, "a") == (True, "up to date")
    assert run(cfg, ["c"]) == ["b", "c"]
    assert read_manifest(cfg.run_dir / "b")["revision"] == 2 and run(cfg, ["c"]) == []
    m = json.loads((cfg.run_dir / "b" / "manifest.json").read_text())
    (cfg.run_dir / "b" / "manifest.json").write_text(json.dumps({**m, "revision": "2"}))  # hand-edited: not a revision
    assert status(cfg, "b") == (False, "not run yet")


def test_installing_a_tool_a_step_depends_on_re_runs_it_and_the_same_install_re_runs_nothing(
        toy_stages, tmp_path, monkeypatch):
    """A step's Step.environment (the compile stage's onnxruntime-qnn) is part of its key: a result made without
    the tool (a skip) re-runs once it is installed or upgraded; what reads it follows only if its files change."""
    from dataclasses import replace

    from pipeline.tasks import TASKS

    installed = {"tool": "absent"}
    steps = dict(TASKS["classification"].steps)
    steps["b"] = replace(steps["b"], environment={"onnxruntime-qnn": lambda cfg: installed["tool"]})
    monkeypatch.setitem(TASKS, "classification", replace(TASKS["classification"], steps=steps))
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path)}})
    assert run(cfg, ["c"]) == ["a", "b", "c"]
    assert read_manifest(cfg.run_dir / "b")["sources"] == {"onnxruntime-qnn": "absent"}
    assert run(cfg, ["c"]) == []  # the same install: nothing re-runs
    installed["tool"] = "2.7.0"
    assert status(cfg, "b") == (False, "the installed onnxruntime-qnn changed (absent -> 2.7.0)")
    assert status(cfg, "a") == (True, "up to date")
    assert run(cfg, ["c"]) == ["b"]  # b wrote the same out.txt: c, keyed on b's files, stays up to date
    assert read_manifest(cfg.run_dir / "b")["sources"] == {"onnxruntime-qnn": "2.7.0"} and run(cfg, ["c"]) == []
    manifest = cfg.run_dir / "b" / "manifest.json"  # as written before the step recorded the tool
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "sources": {}}))
    assert status(cfg, "b") == (False, "its run did not record the installed onnxruntime-qnn (now 2.7.0)")


def test_a_generation_teacher_from_before_the_tokenizer_fixes_re_runs(tmp_path):
    """A generation teacher stage finished before revision 2 (<bos> and the GGUF eos) keeps the old tokenizer:
    its manifest, written without a revision, makes `run` re-run it (and so everything that read it)."""
    import time

    from pipeline.manifest import write_manifest
    from pipeline.stage import STAGES, config_hash, stage_inputs

    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path), "task": "generation"}})
    folder = cfg.run_dir / "data"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text("{}\n")
    write_manifest(folder, stage="data", config={}, config_hash=config_hash(cfg, STAGES["data"])[1], inputs={},
                   summary={}, started=time.time())
    folder = cfg.run_dir / "teacher"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "tokenizer.json").write_text("{}")
    relevant, chash = config_hash(cfg, STAGES["teacher"])
    write_manifest(folder, stage="teacher", config=relevant, config_hash=chash, summary={}, started=time.time(),
                   inputs=stage_inputs(cfg.run_dir, STAGES["teacher"]))
    assert status(cfg, "teacher") == (False, "what its step writes changed in this pocketformer (revision 1 -> 2)")
    m = json.loads((folder / "manifest.json").read_text())
    m["revision"] = 2
    (folder / "manifest.json").write_text(json.dumps(m))
    assert status(cfg, "teacher") == (True, "up to date")
