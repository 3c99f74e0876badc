"""Every registered exporter has a test: a key added to export.registry.EXPORTERS without a function
test_exporter_<key, - as _> in tests/test_export_*.py fails here."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pipeline.errors import PipelineError

TESTS = Path(__file__).parent


def exporter_tests() -> set[str]:
    names = set()
    for path in sorted(TESTS.glob("test_export_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_exporter_"):
                names.add(node.name)
    return names


def test_every_registered_exporter_has_a_test():
    from export.registry import EXPORTERS

    assert {"onnx", "onnx-optimized", "int8-dynamic", "int8-static", "fp16", "ort", "coreml"} <= set(EXPORTERS)
    missing = [k for k in EXPORTERS if f"test_exporter_{k.replace('-', '_')}" not in exporter_tests()]
    assert not missing, f"exporters without a test_exporter_<name> in tests/test_export_*.py: {missing}"


def test_the_check_itself_catches_a_new_untested_exporter(monkeypatch):
    from export import registry

    monkeypatch.setitem(registry.EXPORTERS, "tflite", registry.Exporter(lambda job: {}, "tflite", True))
    with pytest.raises(AssertionError, match="tflite"):
        test_every_registered_exporter_has_a_test()


def test_unknown_names_list_the_known_ones():
    from export.registry import for_variant, get_exporter

    with pytest.raises(PipelineError, match="unknown exporter 'tflite'. Known exporters: onnx, onnx-optimized"):
        get_exporter("tflite")
    with pytest.raises(PipelineError, match="unknown ONNX variant 'int4'.*fp32, optimized, int8-dynamic"):
        for_variant("int4")
    assert get_exporter("ort").format == "ort" and get_exporter("coreml").format == "coreml"
    assert for_variant("fp32").lossless and not for_variant("int8-dynamic").lossless
