"""The student search (pipeline/search.py): a tiny study end to end through the CLI, resuming a study, and
candidates over the latency budget pruned before any training."""
from __future__ import annotations

import json

import pytest

from tests.conftest import tiny_run_config


@pytest.fixture(scope="module")
def search_cfg(tiny_bert_dir, tiny_csv, tmp_path_factory):
    """One run folder for the module: data, teacher and logits are made once; each test its own study."""
    from pipeline.config import config_from_dict
    from pipeline.search_report import dumps_toml

    d = tiny_run_config(tiny_bert_dir, tiny_csv, tmp_path_factory.mktemp("search") / "runs")
    d["teacher"]["epochs"] = 3.0
    d["quantize"] = {"npu_lengths": [16]}  # within student.max_length (32), so 'npu' candidates are valid
    d["augment"] = {"copies": 0}
    d["distill"] = {"epochs": 2.0, "batch_size": 32, "lr": 3e-3}
    d["bench"] = {"warmup": 1, "iterations": 3, "min_iterations": 1, "headline_length": 16}
    path = tmp_path_factory.mktemp("search_cfg") / "tiny.toml"
    path.write_text(dumps_toml(d))
    return path, config_from_dict(d, str(path))


@pytest.fixture
def distill_calls(monkeypatch):
    import distill.distiller as dd

    calls = []
    real = dd.distill_student

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dd, "distill_student", counting)
    return calls


def test_tiny_search_end_to_end(search_cfg, capsys):
    from pipeline.cli import main
    from pipeline.config import load_config

    path, cfg = search_cfg
    rc = main(["search", "--config", str(path), "--target", "host-cpu", "--budget-ms", "1000", "--trials", "3",
               "--space", "tiny", "--fraction", "1.0"])
    assert rc == 0
    out = cfg.run_dir / "search"
    doc = json.loads((out / "trials.json").read_text())
    assert len(doc["trials"]) == 3 and doc["target"] == "host-cpu"
    for t in doc["trials"]:
        assert t["status"] in ("complete", "pruned")
        assert t["latency_ms"] > 0 and t["size_bytes"] > 0 and set(t["params"]) >= {"hidden", "layers", "arch"}
    complete = [t for t in doc["trials"] if t["status"] == "complete"]
    assert complete and all(0.0 <= t["validation_accuracy"] <= 1.0 for t in complete)
    assert all(len(t["validation_accuracy_per_rung"]) == 2 for t in complete)  # 2 epochs * 1.0 -> 2 rungs
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = out / "best-host-cpu.toml"
    printed = capsys.readouterr().out
    assert str(best) in printed and f"make all CONFIG={best}" in printed
    best_cfg = load_config(best)
    top = doc["trials"][doc["best_trial"]]
    assert top["validation_accuracy"] == max(t["validation_accuracy"] for t in complete)
    assert {k: getattr(best_cfg.student, k) for k in top["student"]} == top["student"]
    assert best_cfg.run.name == cfg.run.name and best_cfg.teacher == cfg.teacher  # the rest is the user's config
    cache = json.loads((out / "measurements.json").read_text())
    assert all(json.loads(k)["target"] == "host-cpu" and json.loads(k)["variant"] == "int8-dynamic" for k in cache)


def _trained(rows: list[dict]) -> int:
    """Trials that distilled a student (a re-sampled shape reuses its twin's score: same_as_trial)."""
    return sum(t["status"] == "complete" and t["same_as_trial"] is None for t in rows)


def test_search_resumes_its_study(search_cfg, distill_calls):
    from pipeline.search import SearchRequest, run_search

    _, cfg = search_cfg
    r = SearchRequest("mobile-cpu", 1000.0, trials=2, space="tiny", fraction=0.5)
    first = run_search(cfg, r)["trials"]
    assert len(first) == 2
    trained_first = len(distill_calls)
    assert trained_first == _trained(first)  # 1 rung each (2 epochs * 0.5)
    again = run_search(cfg, SearchRequest("mobile-cpu", 1000.0, trials=4, space="tiny", fraction=0.5))
    rows = again["trials"]
    assert len(rows) == 4
    assert rows[:2] == first  # the first two trials are kept as they were, not redone
    assert len(distill_calls) - trained_first == _trained(rows[2:])
    # the same command once more finds its trials done and trains nothing
    before = len(distill_calls)
    assert len(run_search(cfg, SearchRequest("mobile-cpu", 1000.0, trials=4, space="tiny", fraction=0.5))["trials"]) == 4
    assert len(distill_calls) == before


def test_over_budget_prunes_before_training(search_cfg, distill_calls, capsys):
    from pipeline.search import SearchRequest, run_search

    _, cfg = search_cfg
    result = run_search(cfg, SearchRequest("mobile-cpu", 0.0001, trials=3, space="tiny"))
    assert distill_calls == []
    assert result["best_config"] is None
    assert [t["status"] for t in result["trials"]] == ["pruned"] * 3
    assert all(t["pruned_because"].startswith("over budget: latency") for t in result["trials"])
    assert not (cfg.run_dir / "search" / "best-mobile-cpu.toml").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--target", "edge-npu", "--budget-ms", "2"], "mobile-cpu, host-cpu"),
    (["--target", "mobile-cpu", "--budget-ms", "0"], "positive latency budget"),
    (["--target", "mobile-cpu", "--budget-ms", "2", "--space", "huge"], "unknown search space 'huge'"),
])
def test_bad_search_arguments_are_one_error(search_cfg, capsys, argv, needle):
    from pipeline.cli import main

    path, _ = search_cfg
    assert main(["search", "--config", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


def test_size_limit_prunes_before_training(search_cfg, distill_calls):
    from pipeline.search import SearchRequest, run_search

    _, cfg = search_cfg
    result = run_search(cfg, SearchRequest("host-cpu", 1000.0, max_mb=1e-6, trials=2, space="tiny"))
    assert distill_calls == [] and result["best_config"] is None
    assert all(t["pruned_because"].startswith("over budget: size") for t in result["trials"])


def test_a_trial_cut_off_by_a_kill_is_not_counted(search_cfg):
    """A killed search leaves its trial RUNNING in study.db: the next run marks it failed and still runs
    --trials finished ones."""
    import optuna

    from pipeline.search import NEEDS, SearchRequest, run_search, study_name
    from pipeline.stage import run

    _, cfg = search_cfg
    r = SearchRequest("host-cpu", 0.0001, trials=2, space="tiny")  # over budget: no training, fast
    run(cfg, NEEDS)  # the study's name hashes the logits
    (cfg.run_dir / "search").mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(study_name=study_name(cfg, r), direction="maximize", load_if_exists=True,
                                storage=f"sqlite:///{cfg.run_dir / 'search' / 'study.db'}")
    study.ask()  # the trial a kill interrupted
    rows = run_search(cfg, r)["trials"]
    assert [t["status"] for t in rows] == ["fail", "pruned", "pruned"]
