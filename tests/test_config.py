import pytest

from pipeline.config import config_from_dict, load_config
from pipeline.errors import PipelineError


def test_defaults_and_file_round_trip(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[run]\nname = "x"\n[distill]\nepochs = 2\nlayer_map = [2, 4]\n[student]\nlayers = 2\n')
    cfg = load_config(p)
    assert cfg.run.name == "x"
    assert cfg.distill.epochs == 2.0 and isinstance(cfg.distill.epochs, float)  # int accepted for a float key
    assert cfg.distill.layer_map == [2, 4]
    assert cfg.teacher.max_length == 128  # default kept


def test_overrides_use_the_same_checks(tmp_path):
    cfg = load_config(None, ["distill.temperature=4", "run.name=other", 'data.source="csv"', "augment.enabled=false"])
    assert cfg.distill.temperature == 4.0 and cfg.run.name == "other" and cfg.data.source == "csv"
    assert cfg.augment.enabled is False
    with pytest.raises(PipelineError, match="unknown key 'distill.temprature'"):
        load_config(None, ["distill.temprature=4"])
    with pytest.raises(PipelineError, match="section.key=value"):
        load_config(None, ["distill"])


@pytest.mark.parametrize("raw,msg", [
    ({"nope": {}}, "unknown section \\[nope\\]"),
    ({"teacher": {"epochs": "two"}}, "'teacher.epochs': expected a number"),
    ({"teacher": {"batch_size": 3.5}}, "'teacher.batch_size': expected an integer"),
    ({"augment": {"enabled": 1}}, "expected true or false"),
    ({"distill": {"layer_map": [1, "a"]}}, "layer_map\\[1\\]"),
    ({"student": {"init": "magic"}}, "choose one of random, teacher-pca, teacher-layers"),
    ({"student": {"hidden": 130, "heads": 4}}, "divisible"),
    ({"distill": {"alpha": 1.5}}, "alpha"),
    ({"run": {"name": "../evil"}}, "plain folder name"),
    ({"lm": {"teacher_precision": "fp16"}}, "choose one of fp32, bf16"),
])
def test_bad_config_is_one_clear_error(raw, msg):
    with pytest.raises(PipelineError, match=msg):
        config_from_dict(raw, "c.toml")


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(PipelineError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\nname=")
    with pytest.raises(PipelineError, match="not valid TOML"):
        load_config(bad)


def test_shipped_configs_load():
    from pathlib import Path

    for p in sorted(Path(__file__).parents[1].glob("configs/*.toml")):
        if p.name == "devices.toml":
            continue
        load_config(p)


def test_generation_training_stages_rerun_when_train_settings_change():
    """train.precision changes what distill and baseline learn in both tasks, so it is in their hash."""
    from pipeline.cli import _stages
    from pipeline.stage import config_hash

    STAGES = _stages()  # every stage module, as the CLI registers them (the graph depends on all of them)

    for task in ("classification", "generation"):
        a = config_from_dict({"run": {"task": task}}, "a.toml")
        b = config_from_dict({"run": {"task": task}, "train": {"precision": "bf16"}}, "b.toml")
        for name in ("distill", "baseline"):
            assert config_hash(a, STAGES[name])[1] != config_hash(b, STAGES[name])[1], (task, name)
    assert not STAGES["bench"].always  # the classification bench re-runs only when its inputs change


def test_lm_bench_settings_rerun_the_generation_bench_only():
    """lm.bench_* are timing settings: they must not re-train the models (report and bundle follow bench's
    output), while every other [lm] key still reaches every generation stage."""
    from pipeline.cli import _stages
    from pipeline.stage import config_hash

    STAGES = _stages()

    gen = {"run": {"task": "generation"}}
    a = config_from_dict(gen, "a.toml")
    timing = config_from_dict({**gen, "lm": {"bench_iterations": 4}}, "b.toml")
    corpus = config_from_dict({**gen, "lm": {"context_length": 64}}, "c.toml")
    for name in ("data", "teacher", "logits", "distill", "baseline", "eval", "quantize", "export", "report"):
        assert config_hash(a, STAGES[name])[1] == config_hash(timing, STAGES[name])[1], name
        assert config_hash(a, STAGES[name])[1] != config_hash(corpus, STAGES[name])[1], name
    assert config_hash(a, STAGES["bench"])[1] != config_hash(timing, STAGES["bench"])[1]
