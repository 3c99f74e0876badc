"""The student search for generation (pipeline/tasks/generation/search.py behind pipeline/search.py): a tiny
study on the tiny generation config of tests/test_gpt_pipeline.py runs as the stage `search` and writes
trials.json (validation perplexity, decode ms per token), the Pareto plot and a best-<target>.toml that loads;
a candidate over the decode budget is pruned before any training."""
from __future__ import annotations

import json
import math

import pytest

from pipeline.config import config_from_dict
from tests.test_gpt_pipeline import corpus, gen_cfg, tiny_llama_dir  # noqa: F401  (module fixtures)


@pytest.fixture(scope="module")
def gen_search_cfg(tmp_path_factory, corpus, tiny_llama_dir):  # noqa: F811
    from pipeline.search_report import dumps_toml

    d = gen_cfg(tmp_path_factory.mktemp("gen_search"), corpus, tiny_llama_dir,
                distill__epochs=2.0, lm__eval_windows=8, lm__bench_decode_tokens=4, lm__bench_iterations=1)
    path = tmp_path_factory.mktemp("gen_search_cfg") / "tinygen.toml"
    path.write_text(dumps_toml(d))
    return path, config_from_dict(d, str(path))


@pytest.fixture
def distill_calls(monkeypatch):
    import distill.distiller as dd

    calls = []
    real = dd.distill_lm

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dd, "distill_lm", counting)
    return calls


def test_tiny_generation_search_end_to_end(gen_search_cfg, distill_calls, capsys):
    from pipeline.cli import main
    from pipeline.config import load_config

    path, cfg = gen_search_cfg
    rc = main(["search", "--config", str(path), "--target", "host-cpu", "--budget-ms", "10000", "--trials", "3",
               "--space", "tiny", "--fraction", "0.5"])
    assert rc == 0
    out = cfg.run_dir / "search"
    assert json.loads((out / "manifest.json").read_text())["stage"] == "search"  # a stage like the others
    doc = json.loads((out / "trials.json").read_text())
    assert len(doc["trials"]) == 3 and doc["target"] == "host-cpu" and doc["lower_is_better"] is True
    assert "perplexity" in doc["metric"]
    complete = [t for t in doc["trials"] if t["status"] == "complete"]
    assert complete
    for t in doc["trials"]:
        assert t["status"] in ("complete", "pruned"), t
        assert set(t["params"]) == {"arch", "hidden", "layers", "heads", "ffn_ratio"}
        assert t["student"]["arch"] == "llama" and t["student"]["ffn"] == t["student"]["hidden"] * t["params"]["ffn_ratio"]
        # the budget is in ms per decode token: the two columns agree
        assert t["decode_tokens_per_s"] > 0 and math.isclose(t["latency_ms"], 1000 / t["decode_tokens_per_s"])
        assert t["ttft_ms"] > 0 and t["size_bytes"] > 0
    for t in complete:  # 2 epochs * 0.5 -> one rung; perplexity between perfect and uniform over the vocabulary
        assert len(t["validation_perplexity_per_rung"]) == 1
        assert 1.0 < t["validation_perplexity"] == t["validation_perplexity_per_rung"][-1] < 64
        assert "validation_accuracy" not in t
    trained = [t for t in complete if t["same_as_trial"] is None]
    # search.survivors (default 3): the best short-schedule trials trained again on the whole budget, one call each
    survivors = sorted(complete, key=lambda t: t["validation_perplexity"])[:3]
    assert doc["survivors"] == [t["number"] for t in survivors]
    # search.reference (default on): the config's own decoder trained the same way, unless a survivor shares its shape
    ref = doc["reference"]
    own = ref["student"] in [t["student"] for t in survivors]
    assert len(distill_calls) == len(trained) + len(survivors) + (0 if own else 1)
    assert 1.0 < ref["validation_perplexity_full"] < 64 and ref["latency_ms"] > 0 and ref["size_bytes"] > 0
    assert doc["verdict"].startswith(f"the result (trial #{doc['best_trial']}, validation perplexity")
    assert all(1.0 < t["validation_perplexity_full"] < 64 for t in survivors)
    top = doc["trials"][doc["best_trial"]]
    assert top["validation_perplexity_full"] == min(t["validation_perplexity_full"] for t in survivors)  # lower wins
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = out / "best-host-cpu.toml"
    printed = capsys.readouterr().out
    assert f"make all CONFIG={best}" in printed and f"search: {doc['verdict']}" in printed
    assert "validation perplexity" in best.read_text().splitlines()[0]
    best_cfg = load_config(best)  # a valid generation config with the best decoder
    assert best_cfg.run.task == "generation"
    assert {k: getattr(best_cfg.student, k) for k in top["student"]} == top["student"]
    assert best_cfg.lm == cfg.lm and best_cfg.teacher == cfg.teacher  # the rest is the user's config
    cache = json.loads((out / "measurements.json").read_text())
    assert cache and all(json.loads(k)["target"] == "host-cpu" for k in cache)


def test_generation_candidate_over_budget_is_pruned_before_training(gen_search_cfg, distill_calls, capsys):
    from pipeline.cli import main

    path, cfg = gen_search_cfg
    rc = main(["search", "--config", str(path), "--target", "host-cpu", "--budget-ms", "0.000001", "--trials", "2",
               "--space", "tiny", "--fraction", "0.5"])
    assert rc == 1
    assert "no trial met the budget on host-cpu" in capsys.readouterr().out
    out = cfg.run_dir / "search"
    rows = json.loads((out / "trials.json").read_text())["trials"]
    assert len(rows) == 2 and all(t["status"] == "pruned" for t in rows)
    assert all(t["pruned_because"].startswith("over budget: decode ") and "ms/token" in t["pruned_because"]
               for t in rows)
    assert all(t["validation_perplexity"] is None and t["validation_perplexity_per_rung"] == [] for t in rows)
    assert distill_calls == []  # measured, never trained
    assert not (out / "best-host-cpu.toml").exists()  # the earlier search's best is not this one's


def test_a_candidate_wider_than_the_teacher_is_pruned_not_an_abort(gen_search_cfg, distill_calls, capsys):
    """The default space's decoders (hidden 64-384) are all wider than the tiny teacher (32): with student.init =
    'teacher-pca' each is pruned naming why (the search stopped with an Optuna traceback before)."""
    from pipeline.cli import main

    path, cfg = gen_search_cfg
    rc = main(["search", "--config", str(path), "--target", "host-cpu", "--budget-ms", "1000", "--trials", "2",
               "--fraction", "0.5"])
    out = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out.err
    assert "search: every candidate was a student this config cannot build (invalid student: " in out.out
    rows = json.loads((cfg.run_dir / "search" / "trials.json").read_text())["trials"]
    assert len(rows) == 2 and all(t["status"] == "pruned" for t in rows)
    # refused by the config load a run of the candidate gets (its local teacher folder's config.json)
    assert all(t["pruned_because"].startswith("invalid student: search: student.init = 'teacher-pca' projects the "
                                              "teacher's 32-wide embeddings") for t in rows)
    assert distill_calls == []


def test_generation_search_space_is_checked_at_load_time(gen_search_cfg):
    from pipeline.errors import PipelineError

    _, cfg = gen_search_cfg
    d = cfg.to_dict()
    d["search"] = {**d["search"], "space": "tiny-rnn"}
    with pytest.raises(PipelineError, match=r"search --space 'tiny-rnn' \('search.space'\) is a classification "
                                            r"search space; run.task = 'generation' has: default, tiny$"):
        config_from_dict(d, "x")
