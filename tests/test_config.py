import logging

import numpy as np
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


def test_overrides_use_the_same_checks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text("text,label\n")  # a data path that does not exist is refused at load
    cfg = load_config(None, ["distill.temperature=4", "run.name=other", 'data.source="csv"', 'data.train_path="t.csv"',
                             "augment.enabled=false"])
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


def test_shipped_configs_load(tmp_path, monkeypatch):
    from pathlib import Path

    # configs/own-csv.toml is a template naming data/train.csv, a file of the user's: a missing one is refused
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("text,label\n")
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


def test_generation_bench_settings_rerun_the_generation_bench_only():
    """lm.bench_* are timing settings: they must not re-train the models (report and bundle follow bench's
    output); lm.context_length reaches every stage that cuts windows and the bundle, and no other (tests/test_fingerprints.py
    has the whole table)."""
    from pipeline.cli import _stages
    from pipeline.stage import config_hash

    STAGES = _stages()

    gen = {"run": {"task": "generation"}}
    a = config_from_dict(gen, "a.toml")
    timing = config_from_dict({**gen, "lm": {"bench_iterations": 4}}, "b.toml")
    corpus = config_from_dict({**gen, "lm": {"context_length": 64}}, "c.toml")
    for name in ("data", "teacher", "logits", "distill", "baseline", "eval", "quantize", "export", "report"):
        assert config_hash(a, STAGES[name])[1] == config_hash(timing, STAGES[name])[1], name
    # the bundle: its metadata's trained_context_length
    for name in ("logits", "distill", "baseline", "eval", "quantize", "export", "bench", "bundle"):
        assert config_hash(a, STAGES[name])[1] != config_hash(corpus, STAGES[name])[1], name
    for name in ("data", "teacher", "report"):
        assert config_hash(a, STAGES[name])[1] == config_hash(corpus, STAGES[name])[1], name
    assert config_hash(a, STAGES["bench"])[1] != config_hash(timing, STAGES["bench"])[1]


@pytest.mark.parametrize("raw,msg", [
    ({"teacher": {"lr": -1e-5}}, r"'teacher.lr' = -1e-05 must be > 0"),
    ({"distill": {"lr": 0.0}}, r"'distill.lr' = 0.0 must be > 0"),
    ({"baseline": {"lr": -2e-3}}, r"'baseline.lr' = -0.002 must be > 0"),
    ({"data": {"test_fraction": 1.0}}, r"'data.test_fraction' = 1.0 must be in \[0, 1\)"),
    ({"data": {"validation_fraction": -0.1}}, r"'data.validation_fraction' = -0.1 must be in \[0, 1\)"),
    ({"data": {"validation_fraction": 0.5, "test_fraction": 0.5}}, "nothing is left for training"),
    ({"teacher": {"epochs": 0}}, r"'teacher.epochs' = 0.0 must be > 0"),
    ({"distill": {"epochs": -1}}, r"'distill.epochs'"),
    ({"distill": {"temperature": 0}}, r"'distill.temperature' = 0.0 must be > 0"),
    ({"distill": {"alpha": -0.1}}, r"'distill.alpha' = -0.1 must be in \[0, 1\]"),
    ({"distill": {"layer_map": [1, 0]}}, r"'distill.layer_map' = \[1, 0\] item 1 \(0\) must be >= 1"),
    ({"augment": {"p_mask": 1.5}}, r"'augment.p_mask'"),
    ({"teacher": {"lr": float("nan")}}, r"'teacher.lr' = nan; give a finite number"),
    ({"student": {"arch": "transformer-xl"}},
     r"unknown student architecture 'transformer-xl' in 'student.arch'. Known: bert"),
    ({"quantize": {"variants": ["fp32", "int4"]}},
     r"unknown ONNX variant 'int4' in 'quantize.variants'. Known: fp32, optimized"),
    ({"export": {"ort_variants": ["fp33"]}}, r"unknown ONNX variant 'fp33' in 'export.ort_variants'"),
    ({"quantize": {"models": ["teacher", "studnet"]}}, r"unknown model 'studnet' in 'quantize.models'"),
    ({"bench": {"targets": ["host-cpu", "tpu"]}}, r"unknown target 'tpu' in 'bench.targets'"),
    ({"data": {"source": "excel"}}, r"unknown data.source 'excel' for run.task = 'classification'. Known: csv, jsonl"),
    ({"export": {"ort_target_platform": "riscv"}}, r"unknown ORT platform 'riscv'.*Known: arm, amd64"),
    ({"quantize": {"variants": ["int8-dynamic"], "models": ["student"]}}, r"lacks 'fp32'"),
    ({"student": {"layers": 3}, "distill": {"layer_map": [2, 4]}}, r"'distill.layer_map' has 2 entries but"),
    ({"data": {"label_variants": "ignore"}}, r"'data.label_variants' = 'ignore' must be one of merge, error, keep"),
])
def test_every_setting_is_checked_at_load_time(raw, msg):
    """Ranges and registry names fail when the config loads, not after training."""
    with pytest.raises(PipelineError, match=msg):
        config_from_dict(raw, "c.toml")


def test_rule_tables_name_real_settings():
    """A misspelt key in a rule table would silently check nothing."""
    import dataclasses

    from pipeline.config import SECTIONS, read_keys
    from pipeline.config_rules import RANGES, REGISTRY_NAMES
    from pipeline.tasks import TASKS
    from pipeline.tasks.classification import checks as cls_checks
    from pipeline.tasks.generation import checks as gen_checks

    for dotted in [*RANGES, *REGISTRY_NAMES, *cls_checks.NAMES, *gen_checks.NAMES]:
        section, key = dotted.split(".")
        assert key in {f.name for f in dataclasses.fields(SECTIONS[section])}, dotted
    for task in TASKS.values():  # every step's declared reads are real keys (read_keys raises otherwise)
        for name, step in task.steps.items():
            assert {"run.seed", "run.task"} <= set(read_keys(step.reads)), (task.name, name)


def test_registry_names_are_read_from_the_registry(monkeypatch):
    """A new student architecture is accepted as soon as it is registered; nothing else to edit."""
    from distill import student

    with pytest.raises(PipelineError, match="unknown student architecture 'tiny'"):
        config_from_dict({"student": {"arch": "tiny"}}, "c.toml")
    monkeypatch.setitem(student.STUDENTS, "tiny", student.StudentArch(student.build_bert, ("classification",)))
    assert config_from_dict({"student": {"arch": "tiny"}}, "c.toml").student.arch == "tiny"


def test_generation_names_its_own_registries():
    """The classification-only registries do not apply to generation configs (a 'llama' student)."""
    cfg = config_from_dict({"run": {"task": "generation"}, "student": {"arch": "llama"}}, "g.toml")
    assert cfg.student.arch == "llama"
    with pytest.raises(PipelineError, match="unknown ONNX variant 'int3'"):
        config_from_dict({"run": {"task": "generation"}, "quantize": {"variants": ["int3"]}}, "g.toml")


def test_show_config_rejects_what_a_run_rejects(tmp_path, capsys):
    from pipeline.cli import main

    p = tmp_path / "c.toml"
    p.write_text('[run]\nname = "x"\n')
    assert main(["show-config", "--config", str(p)]) == 0
    capsys.readouterr()
    for override, msg in (("student.arch=nope", "unknown student architecture 'nope' in 'student.arch'"),
                          ("teacher.lr=-1", "'teacher.lr' = -1.0 must be > 0"),
                          ('quantize.variants=["fp32","int4"]', "unknown ONNX variant 'int4'")):
        assert main(["show-config", "--config", str(p), "--set", override]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err


def test_cli_drops_only_the_quantizers_preprocessing_note(tmp_path, caplog):
    """quantize_dynamic warns "consider pre-processing" once per file on the root logger; under the CLI that
    line is gone and other warnings still print."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from pipeline.cli import main

    p = tmp_path / "c.toml"
    p.write_text('[run]\nname = "x"\n')
    assert main(["show-config", "--config", str(p)]) == 0
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10),
              tmp_path / "f.onnx")
    with caplog.at_level(logging.WARNING):
        quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8)
        logging.warning("another library's warning")
    assert (tmp_path / "q.onnx").exists()
    assert [r.getMessage() for r in caplog.records] == ["another library's warning"]


def test_auto_precision_follows_the_hardware(monkeypatch):
    """'auto' is bf16 only where the CPU computes bf16 natively (AMX / AVX512-BF16), else fp32; explicit
    values pass through, and the config takes 'auto' for both keys."""
    import eval.machine
    from distill.precision import choose_precision
    from pipeline.config import config_from_dict

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(eval.machine, "all_cpu_flags", lambda: {"avx2", "fma"})
    assert choose_precision("auto").precision == "fp32"
    monkeypatch.setattr(eval.machine, "all_cpu_flags", lambda: {"avx2", "avx512_bf16", "amx_bf16"})
    assert choose_precision("auto").precision == "bf16"
    assert choose_precision("fp32").precision == "fp32" and choose_precision("bf16").precision == "bf16"
    cfg = config_from_dict({"run": {"task": "generation"}, "train": {"precision": "auto"},
                            "lm": {"teacher_precision": "auto"}}, "t")
    assert cfg.train.precision == cfg.lm.teacher_precision == "auto"


def test_a_step_can_take_a_key_back_out_of_a_wildcard():
    from pipeline.config import read_keys

    keys = read_keys(("data.*", "-data.max_unlabeled"))
    assert "data.max_train" in keys and "data.max_unlabeled" not in keys and "run.seed" in keys
    assert read_keys(("data.*", "-run.seed")) == read_keys(("data.*",))  # the always-read keys stay
    with pytest.raises(ValueError, match="unknown key"):
        read_keys(("data.*", "-data.no_such_key"))
