"""tools/fusion_probe.py on the tiny random-weight BERT: the variants it builds really differ in the fused
ops they hold, every file is timed, and a run without files is one clear error. No speed is asserted."""
from __future__ import annotations

import pytest

from pipeline.config import ExportSection, QuantizeSection
from pipeline.errors import PipelineError
from test_export_onnx import inputs, models, onnx_files  # noqa: F401  (module fixtures shared with the ONNX tests)


def test_probe_builds_the_variants_with_and_without_fusions(models, inputs, onnx_files, tmp_path):
    from tools import fusion_probe as F
    from eval.latency import Plan
    from export.optimize import op_counts

    cfg = models["bert"].model.hf.config
    files = F.build_files(onnx_files["bert"]["fp32"], cfg.num_attention_heads, cfg.hidden_size, "bert",
                          QuantizeSection(), ExportSection(), "student", tmp_path)
    assert len(files) == 9 and all(p.is_file() for p in files.values())
    every = op_counts(files["fp32, every fusion"])
    default = op_counts(files["fp32, optimized (skip skip_layer_norm, embed_layer_norm)"])
    assert every.get("SkipLayerNormalization") and every.get("EmbedLayerNormalization")
    assert default.get("Attention") and not default.get("SkipLayerNormalization")
    # the exporter's file: the [CLS]-only layer's mask expansion trimmed after the fusions
    assert "Expand" not in every and "Expand" not in default
    assert op_counts(files["int8 from the optimized graph"]).get("QAttention")
    assert not op_counts(files["int8 from the unfused graph"]).get("QAttention")

    ids, mask = inputs.batches[0]
    times = F.time_files({k: files[k] for k in list(files)[:2]}, ids[:1], mask[:1], [1], 2, Plan(1, 3, 5.0, 3))
    assert all(t[1] > 0 for t in times.values())
    kern = F.kernel_times(cfg.hidden_size, 8, 1, 2, Plan(1, 3, 5.0, 3))
    assert set(kern) == {F.KERNEL_FUSED, F.KERNEL_UNFUSED} and min(kern.values()) > 0


def test_probe_on_an_unfinished_run_names_the_stage_to_run(tmp_path):
    from pathlib import Path

    from tools import fusion_probe as F

    demo = Path(__file__).parents[1] / "configs" / "demo.toml"
    with pytest.raises(PipelineError, match=r"quantize/student/fp32.onnx is missing: run `python -m pipeline quantize"):
        F.main(["--config", str(demo), "--set", f'run.runs_dir="{tmp_path}"'])
