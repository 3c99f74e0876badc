"""A lossy file that fails its check does not stop the run: it is recorded as failed with its numbers in
variants.json and the report, not converted to .ort, not timed, and never shipped in the bundle.

The failure is real, not a mocked check: the student's int8-dynamic file gets its logits negated (a Neg node
on the output), so its argmax disagrees with the PyTorch model and the unchanged check rejects it."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import negate_logits
from test_bundle_stage import bundled_run

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    """A copy of the tiny bundled run whose quantize stage re-runs with a broken student int8-dynamic file."""
    from export import registry
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    d, cfg = bundled_run(tmp_path_factory)
    d = json.loads(json.dumps(d))
    d["run"]["name"] = "tiny-failed"
    d["bundle"]["dist_dir"] = str(tmp_path_factory.mktemp("dist_failed"))
    new = config_from_dict(d, "tiny-failed-config")
    shutil.copytree(cfg.run_dir, new.run_dir, ignore=shutil.ignore_patterns(".lock"))
    real = registry.EXPORTERS["int8-dynamic"]

    def broken(job):
        details = real.fn(job)
        if job.model_name == "student":
            negate_logits(job.out)
        return details

    registry.EXPORTERS["int8-dynamic"] = registry.Exporter(broken, real.format, real.lossless, real.transformer_only)
    try:
        ran = run(new, ["bundle"], force=("quantize",))
    finally:
        registry.EXPORTERS["int8-dynamic"] = real
    return d, new, ran


def test_run_goes_on_and_records_the_failure(failed_run):
    _, cfg, ran = failed_run
    assert ran == ["quantize", "compile", "export", "bench", "report", "bundle"]  # the peer reads no quantize file
    rows = {(r["model"], r["variant"]): r for r in json.loads((cfg.run_dir / "quantize" / "variants.json").read_text())}
    bad = rows[("student", "int8-dynamic")]
    assert bad["status"] == "failed" and bad["check"]["passed"] is False
    assert bad["check"]["value"] < bad["check"]["tolerance"] == 0.9 and bad["check"]["max_abs_diff"] > 0
    assert "student int8-dynamic (quantize/student/int8-dynamic.onnx): argmax agrees" in bad["check"]["reason"]
    assert 0 <= bad["accuracy"] <= 1 and bad["size_bytes"] > 0  # its numbers are kept
    assert all(r["status"] == "passed" for k, r in rows.items() if k != ("student", "int8-dynamic"))
    summary = json.loads((cfg.run_dir / "quantize" / "manifest.json").read_text())["summary"]
    assert [(f["model"], f["variant"]) for f in summary["failed"]] == [("student", "int8-dynamic")]


def test_failed_variant_is_not_converted_or_timed(failed_run):
    _, cfg, _ = failed_run
    export_rows = json.loads((cfg.run_dir / "export" / "variants.json").read_text())
    assert ("student", "int8-dynamic", "ort") not in {(r["model"], r["variant"], r["format"]) for r in export_rows}
    assert ("teacher", "int8-dynamic", "ort") in {(r["model"], r["variant"], r["format"]) for r in export_rows}
    assert not (cfg.run_dir / "export" / "student" / "int8-dynamic.ort").exists()
    skipped = json.loads((cfg.run_dir / "export" / "manifest.json").read_text())["summary"]["skipped"]
    # nor made into the browser FastGelu file (export.fast_gelu_variants), with the reason
    assert {(s["model"], s["variant"]) for s in skipped} == {("student", "int8-dynamic"),
                                                           ("student", "int8-dynamic-fastgelu")}
    assert not (cfg.run_dir / "export" / "student" / "int8-dynamic-fastgelu.ort").exists()
    results = json.loads((cfg.run_dir / "report" / "results.json").read_text())
    onnx_row = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) ==
                    ("student", "int8-dynamic", "onnx"))
    assert onnx_row["status"] == "failed"
    for target, entry in onnx_row["latency"].items():  # no target timed it
        assert entry["status"] == "skipped" and entry["reason"].startswith("not timed: the file failed its check")
    ort_row = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) ==
                   ("student", "int8-dynamic", "ort"))
    assert ort_row["missing"] and "failed its check in the quantize stage" in ort_row["latency"]["mobile-cpu"]["reason"]


def test_report_shows_the_failure(failed_run):
    _, cfg, _ = failed_run
    md = (cfg.run_dir / "report" / "report.md").read_text()
    section = md.split("## Variants that failed their check (not timed, not shipped)")[1].split("\n## ")[0]
    line = next(x for x in section.splitlines() if x.startswith("| student | int8-dynamic | onnx |"))
    assert "argmax_agreement" in line and "90.0%" in line
    assert "int8-dynamic (FAILED check)" in md
    assert "Variants that failed their check" in (cfg.run_dir / "report" / "report.html").read_text()


def test_bundle_never_ships_it(failed_run):
    from pipeline.config import config_from_dict
    from pipeline.errors import PipelineError
    from pipeline.stage import run_stage

    d, cfg, _ = failed_run
    meta = json.loads((cfg.run_dir / "bundle" / "metadata.json").read_text())
    assert meta["model"]["name"] == "student" and meta["model"]["variant"] != "int8-dynamic"
    assert "int8-dynamic" not in {c["variant"] for c in meta["model"]["choice"]["candidates"]}
    assert not any("int8-dynamic" in f for f in meta["files"])
    d = json.loads(json.dumps(d))
    d["bundle"]["variant"] = "int8-dynamic"  # asking for it by name is refused, with the reason
    with pytest.raises(PipelineError, match=r"bundle.variant = 'int8-dynamic': student int8-dynamic failed its check "
                                            r"and is never shipped \(student int8-dynamic .*argmax agrees"):
        run_stage(config_from_dict(d, "tiny-failed-config"), "bundle")
