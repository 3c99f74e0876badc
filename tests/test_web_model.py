"""export/web_model.py: the web bundle's file re-made with GELU as FastGelu (tanh), and its check; and
tools/wasm_profile.py's aggregation of ONNX Runtime profiler events. Tiny random-weight graphs, no timing."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _gelu_model(path: Path, op: str) -> None:
    """x [1, n, 8] -> MatMul W [8, 16] -> BiasGelu(+b) (or Add + Gelu) -> MatMul [16, 3] -> logits [1, n, 3]."""
    rng = np.random.default_rng(0)
    w1 = nh.from_array(rng.normal(size=(8, 16)).astype(np.float32), "w1")
    b = nh.from_array(rng.normal(size=16).astype(np.float32), "b")
    w2 = nh.from_array(rng.normal(size=(16, 3)).astype(np.float32), "w2")
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m"])]
    if op == "BiasGelu":
        nodes.append(h.make_node("BiasGelu", ["m", "b"], ["g"], domain="com.microsoft"))
    else:
        nodes += [h.make_node("Add", ["m", "b"], ["a"]), h.make_node("Gelu", ["a"], ["g"], domain="com.microsoft")]
    nodes.append(h.make_node("MatMul", ["g", "w2"], ["logits"]))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, "n", 8])],
                     [h.make_tensor_value_info("logits", T.FLOAT, [1, "n", 3])], [w1, b, w2])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, path)


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("op", ["BiasGelu", "Gelu"])
def test_fast_gelu_file_swaps_gelu_for_fastgelu_and_keeps_the_outputs_close(tmp_path, op):
    from export.web_model import fast_gelu_file

    src, out = tmp_path / "m.onnx", tmp_path / "web.onnx"
    _gelu_model(src, op)
    fast_gelu_file(src, out, "onnx", "arm", ["SkipLayerNormFusion"])
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert "FastGelu" in ops and not {"Gelu", "BiasGelu"} & ops
    x = np.random.default_rng(1).normal(size=(1, 5, 8)).astype(np.float32)
    a, b = _run(src, x), _run(out, x)
    assert not np.array_equal(a, b)  # the approximation did change the arithmetic
    np.testing.assert_allclose(b, a, atol=2e-2, rtol=1e-3)  # tanh GELU is within ~5e-4 of erf GELU per value


def test_fast_gelu_file_writes_an_ort_file_onnxruntime_loads(tmp_path):
    from export.web_model import fast_gelu_file

    src, out = tmp_path / "m.onnx", tmp_path / "web.ort"
    _gelu_model(src, "BiasGelu")
    fast_gelu_file(src, out, "ort", "arm", [])
    x = np.random.default_rng(2).normal(size=(1, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(src, x), atol=2e-2, rtol=1e-3)


def test_source_onnx_of_onnx_and_ort_rows(tmp_path):
    from export.web_model import source_onnx

    assert source_onnx({"format": "onnx", "file": "quantize/student/int8-dynamic.onnx"}, tmp_path) == \
        tmp_path / "quantize/student/int8-dynamic.onnx"
    assert source_onnx({"format": "ort", "file": "export/student/fp32.ort", "model": "student", "variant": "fp32",
                        "details": {"source": "quantize/student/fp32.onnx"}}, tmp_path) == tmp_path / "quantize/student/fp32.onnx"


def test_gelu_check_passes_within_the_window_and_names_each_failure():
    from export.web_model import gelu_check

    gold = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    old = list(gold[:9]) + [1]  # as trained: 0.9
    ok = gelu_check(list(old), old, gold, best=0.9, window=0.01, min_agreement=0.9)
    assert ok["passed"] and ok["accuracy"] == 0.9 and ok["agreement_with_as_trained"] == 1.0 and ok["reason"] == ""
    worse = [1] + old[1:]  # one more mistake: 0.8 < 0.9 - 0.01, and 90% agreement
    bad = gelu_check(worse, old, gold, best=0.9, window=0.01, min_agreement=0.95)
    assert not bad["passed"] and bad["accuracy"] == pytest.approx(0.8)
    assert "test accuracy 0.8000 < 0.8900" in bad["reason"] and "agree with the as-trained file on 90.00%" in bad["reason"]
    assert gelu_check(worse, old, gold, best=0.9, window=0.1, min_agreement=0.9)["passed"]


def _events(warmup: int, runs: list[dict[str, float]]) -> list[dict]:
    """Profiler events: one model_run per run, kernels inside it (Add then Gelu per run)."""
    ev, ts = [], 0
    for r in [{"n1": 999.0, "n2": 999.0}] * warmup + runs:
        ev.append({"cat": "Session", "name": "model_run", "ts": ts, "dur": 100, "args": {}})
        t = ts + 1
        for node, dur in r.items():
            ev.append({"cat": "Node", "name": f"{node}_kernel_time", "ts": t, "dur": dur,
                       "args": {"op_name": {"n1": "Add", "n2": "Gelu", "n3": "Gelu"}[node]}})
            t += 1
        ts += 1000
    return ev


def test_aggregate_drops_warmup_takes_node_medians_and_sums_per_op():
    from tools.wasm_profile import aggregate

    runs = [{"n1": 10, "n2": 30, "n3": 20}, {"n1": 10, "n2": 500, "n3": 20}, {"n1": 12, "n2": 30, "n3": 20}]
    p = aggregate(_events(2, runs), warmup=2)
    assert p["runs"] == 3 and p["kernels_per_run"] == 3
    assert [(o["op"], o["us"], o["count"]) for o in p["ops"]] == [("Gelu", 50, 2), ("Add", 10, 1)]  # 500: preempted
    assert p["kernel_ms"] == pytest.approx(0.06) and p["nodes"][0] == {"node": "n2", "op": "Gelu", "us": 30, "share": 0.5}
    with pytest.raises(ValueError, match="no profiled run"):
        aggregate(_events(2, []), warmup=2)


def test_ratios_are_medians_of_same_round_ratios_to_the_last_file():
    from tools.wasm_profile import ratios

    r = ratios({"ours": [2.0, 4.0, 2.1], "theirs": [3.0, 5.0, 3.0]})
    assert r["theirs"]["ratio"] == 1.0 and r["ours"]["ratio"] == pytest.approx(0.7)
    assert r["ours"]["median_ms"] == 2.1
