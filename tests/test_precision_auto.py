"""train.precision / lm.teacher_precision = "auto" on this machine's kind of hardware, with /proc/cpuinfo
replaced by recorded ones (tests/fixtures/cpuinfo/) and CUDA faked: the choice, and its logged reason."""
from __future__ import annotations

import logging
from pathlib import Path

import eval.machine
from distill.precision import choose_precision

CPUINFO = Path(__file__).parent / "fixtures" / "cpuinfo"


def _fake_cpuinfo(monkeypatch, name: str) -> None:
    real = eval.machine.Path
    monkeypatch.setattr(eval.machine, "Path", lambda p: CPUINFO / name if str(p) == "/proc/cpuinfo" else real(p))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)


def test_auto_sees_avx512_bf16_and_logs_why(monkeypatch, caplog):
    """The bug: a Zen 4 EPYC with avx512_bf16 (no AMX) got fp32, because the flag list precision read was the
    report's short list, which lacked avx512_bf16."""
    _fake_cpuinfo(monkeypatch, "zen4-epyc-avx512bf16.txt")
    with caplog.at_level(logging.INFO, logger="pocketformer"):
        assert choose_precision("auto").precision == "bf16"
        choice = choose_precision("auto", "lm.teacher_precision")
    assert choice.precision == "bf16" and "avx512_bf16" in choice.reason
    assert any("lm.teacher_precision = auto -> bf16" in r.getMessage() and "avx512_bf16" in r.getMessage()
               for r in caplog.records)
    assert "avx512_bf16" in eval.machine.cpu_flags()  # the report's list shows it too
    _fake_cpuinfo(monkeypatch, "epyc-7763-avx2-only.txt")
    assert choose_precision("auto").precision == "fp32"
    assert choose_precision("fp32").reason == "set in the config"


def test_auto_on_a_gpu_that_only_emulates_bf16(monkeypatch):
    """torch.cuda.is_bf16_supported() is True on a T4 (it counts emulation); auto must still pick fp32."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "Tesla T4")
    monkeypatch.setattr("torch.cuda.get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr("torch.version.hip", None)
    assert choose_precision("auto").precision == "fp32"
    from distill.precision import gpu_bf16_choice

    assert "7.5" in choose_precision("auto").reason
    assert gpu_bf16_choice("NVIDIA H100", (9, 0), False).precision == "bf16"
    assert gpu_bf16_choice("NVIDIA A100", (8, 0), False).precision == "bf16"


def test_teacher_precision_runs_the_logits_pass_in_bf16(tiny_bert_dir, tiny_csv, tmp_path):
    """teacher.precision = "bf16": the logits stage's teacher pass runs under bf16 autocast (the cached soft
    targets move by bf16 rounding, not more) and says so in its summary; fp32 stays the default."""
    import numpy as np

    from conftest import tiny_run_config
    from pipeline.config import config_from_dict
    from pipeline.manifest import read_manifest
    from pipeline.stage import run

    logits, summaries = {}, {}
    for precision in ("fp32", "bf16"):
        d = tiny_run_config(tiny_bert_dir, tiny_csv, tmp_path / precision)
        d["teacher"]["precision"] = precision
        cfg = config_from_dict(d, f"tiny-{precision}")
        run(cfg, ["logits"])
        logits[precision] = np.load(cfg.run_dir / "logits" / "teacher_logits.npy")
        summaries[precision] = read_manifest(cfg.run_dir / "logits")["summary"]
        # the teacher stage's validation score runs in the same precision, and says which
        assert read_manifest(cfg.run_dir / "teacher")["summary"]["validation"]["precision"] == precision
    assert summaries["fp32"]["precision"] == "fp32" and summaries["bf16"]["precision"] == "bf16"
    assert summaries["bf16"]["precision_reason"] == "set in the config"
    diff = np.abs(logits["bf16"] - logits["fp32"])
    assert 0 < diff.max() < 0.1  # bf16 keeps 8 bits of mantissa: logits of order 1 move by ~1e-2 at most
    assert (logits["bf16"].argmax(-1) == logits["fp32"].argmax(-1)).mean() > 0.9
