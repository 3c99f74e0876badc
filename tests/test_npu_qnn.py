"""The NPU student's files compile whole for Qualcomm's HTP (ONNX Runtime's QNN provider with its x86 HTP
compiler, onnxruntime-qnn), CPU fallback disabled: nnapi-int8 (uint8 QDQ) and qnn-w8a16 (uint16 activations),
the token lookup in the graph. Skipped where onnxruntime_qnn is not installed."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_npu_student import compact_student, texts

qnn = pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (Qualcomm's HTP compiler) is not installed")


def htp_compiles(path, soc: str = "57", arch: str = "75") -> bool:
    """True when the whole file compiles for the HTP of one chip (8 Gen 3: soc 57, arch 75); False when any
    node would need the CPU (the session then refuses to start)."""
    import onnxruntime as ort

    if not any(d.ep_name == "QNNExecutionProvider" for d in ort.get_ep_devices()):
        ort.register_execution_provider_library("QNNExecutionProvider", qnn.get_library_path())
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(devs, {"backend_path": qnn.get_qnn_htp_path(), "soc_model": soc, "htp_arch": arch})
    try:
        ort.InferenceSession(str(path), so)
    except Exception as e:  # noqa: BLE001 - ORT raises a bare Fail when a node is left for the CPU
        if "fallback to CPU EP has been explicitly disabled" in str(e):
            return False
        raise
    return True


def trained_like(m):
    """A random student's biases are all zero, and ONNX Runtime then shares one zero initializer between
    unrelated nodes; a trained model has no such coincidence. Small random biases stand in for training."""
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.02)
    return m


@pytest.mark.parametrize("name", ["nnapi-int8", "qnn-w8a16"])
def test_npu_student_files_compile_whole_for_the_htp(tmp_path, name):
    """The compact-embedding student (student.vocab, student.embedding_dim, as the demo trains it): before
    its id -> row table was widened to int32, the HTP rejected the int16 Gather (error 3110) and the session
    could not start with fallback disabled."""
    from export.npu import NPU_VARIANTS, NpuRunner, torch_logits, write_variant

    m = trained_like(compact_student())
    made = write_variant(m, tmp_path / "npu", name, [16], 17, texts(16, 16), 0, "student", cls_only=True)
    assert htp_compiles(made["files"][16])
    ids = texts(20, 16, seed=5)
    runner = NpuRunner(made["files"], NPU_VARIANTS[name], made["lookup"])
    assert (runner.logits(ids, 0).argmax(-1) == torch_logits(m, ids).argmax(-1)).mean() >= 0.9


def _id_map_model(path, table_type):
    """input_ids -> Gather on a constant id -> row table of table_type -> Cast int32 -> Gather on a float table:
    the compact embedding's lookup alone."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    table = (np.arange(500) % 40).astype(table_type)
    rows = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    nodes = [h.make_node("Gather", ["row_of_id", "ids"], ["r"], axis=0),
             h.make_node("Cast", ["r"], ["r32"], to=T.INT32),
             h.make_node("Gather", ["rows", "r32"], ["y"], axis=0)]
    g = h.make_graph(nodes, "lookup", [h.make_tensor_value_info("ids", T.INT32, [1, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 16, 8])],
                     [nh.from_array(table, "row_of_id"), nh.from_array(rows, "rows")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return model


@pytest.mark.parametrize("table_type", [np.int16, np.uint8])
def test_widened_id_table_compiles_for_the_htp(tmp_path, table_type):
    """Regression: a Gather on a 16- or 8-bit integer table does not compile for the HTP (error 3110); the
    same table widened to int32 does, its Cast is gone and the lookup returns the same rows."""
    import onnx
    import onnxruntime as ort

    from export.index_tables import widen_index_tables

    model = _id_map_model(tmp_path / "narrow.onnx", table_type)
    assert not htp_compiles(tmp_path / "narrow.onnx")
    assert widen_index_tables(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Gather", "Gather"]
    onnx.save(model, str(tmp_path / "wide.onnx"))
    assert htp_compiles(tmp_path / "wide.onnx")
    ids = {"ids": np.array([[0, 1, 39, 40, 41, 499] + [7] * 10], np.int32)}
    run = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, ids)[0]  # noqa: E731
    assert np.array_equal(run(tmp_path / "narrow.onnx"), run(tmp_path / "wide.onnx"))
