"""export/web_model.py: the student's browser variant with GELU as FastGelu (tanh), written and checked by the
export stage (pipeline/tasks/classification/fast_gelu.py) and recorded in the web bundle's metadata; and
tools/wasm_profile.py's aggregation of ONNX Runtime profiler events. Tiny random-weight models, no timing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from test_export_onnx import LABELS, models  # noqa: F401  (the tiny random-weight student)


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


def test_gelu_check_passes_within_the_window_and_names_each_failure():
    from export.web_model import gelu_check

    gold = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    old = list(gold[:9]) + [1]  # as trained: 0.9
    ok = gelu_check(list(old), old, gold, reference=0.9, window=0.01, min_agreement=0.9)
    assert ok["passed"] and ok["accuracy"] == 0.9 and ok["agreement_with_as_trained"] == 1.0 and ok["reason"] == ""
    worse = [1] + old[1:]  # one more mistake: 0.8 < 0.9 - 0.01, and 90% agreement
    bad = gelu_check(worse, old, gold, reference=0.9, window=0.01, min_agreement=0.95)
    assert not bad["passed"] and bad["accuracy"] == pytest.approx(0.8)
    assert "test accuracy 0.8000 < 0.8900 (its source's 0.9000 - bundle.accuracy_window 0.01)" in bad["reason"] and "agree with the as-trained file on 90.00%" in bad["reason"]
    assert gelu_check(worse, old, gold, reference=0.9, window=0.1, min_agreement=0.9)["passed"]


@pytest.fixture(scope="module")
def fake_run(models, tmp_path_factory):
    """A run folder with what the export stage reads for the FastGelu variant: data/ (labels, test split),
    quantize/student/int8-dynamic.onnx with its tokenizer copy and quantize/variants.json."""
    from conftest import make_texts
    from export.registry import ExportJob, get_exporter
    from pipeline.config import ExportSection, QuantizeSection

    run = tmp_path_factory.mktemp("fastgelu_run")
    m = models["bert"]
    (run / "data").mkdir()
    (run / "data" / "labels.json").write_text(json.dumps(LABELS))
    (run / "data" / "test.jsonl").write_text("".join(json.dumps({"text": t, "label": lab}) + "\n"
                                                     for t, lab in make_texts(80, seed=3)))
    q = run / "quantize" / "student"
    m.tokenizer.save_pretrained(q / "tokenizer")
    (q / "tokenizer" / "pocketformer.json").write_text(json.dumps({"kind": "hf", "max_length": 32}))
    sources: dict = {}
    for v, key in (("fp32", "onnx"), ("int8-dynamic", "int8-dynamic")):
        get_exporter(key).fn(ExportJob("student", m, q / f"{v}.onnx", QuantizeSection(), ExportSection(), v, sources))
        sources[v] = q / f"{v}.onnx"
    return run


def _ctx(run, tmp_path, **over):
    from pipeline.config import config_from_dict
    from pipeline.stage import STAGES
    from pipeline.task import StageContext

    cfg = config_from_dict({"quantize": {"check_samples": 16}, **over}, "t")
    (tmp_path / "export").mkdir(parents=True)
    return StageContext(cfg, "export", tmp_path / "export", run, STAGES["export"].deps)


def _qrow(acc: float, status: str = "passed") -> dict:
    return {"model": "student", "variant": "int8-dynamic", "format": "onnx", "file": "quantize/student/int8-dynamic.onnx",
            "status": status, "accuracy": acc, "opset": 17, "params": 1, "non_embedding_params": 1,
            "check": {"reason": "argmax agrees on only 50%"} if status == "failed" else {}}


def _texts(run) -> list[str]:
    return [json.loads(line)["text"] for line in (run / "data" / "test.jsonl").read_text().splitlines()][:16]


def test_export_writes_and_checks_the_fastgelu_variant(fake_run, tmp_path):
    from export.web_model import gelu_record
    from pipeline.tasks.classification.fast_gelu import export_fast_gelu

    ctx = _ctx(fake_run, tmp_path)
    src_acc = _source_accuracy(fake_run)
    rows, skipped = export_fast_gelu(ctx, [_qrow(src_acc)], _texts(fake_run))
    assert skipped == [] and len(rows) == 1
    r = rows[0]
    assert (r["variant"], r["format"], r["file"]) == ("int8-dynamic-fastgelu", "ort", "export/student/int8-dynamic-fastgelu.ort")
    assert (ctx.out / "student" / "int8-dynamic-fastgelu.ort").read_bytes()[4:8] == b"ORTM"
    assert r["status"] == "passed" and r["check"]["kind"] == "argmax_agreement" and r["check"]["passed"]
    g = r["check"]["gelu"]
    assert g["passed"] and g["texts"] == 80 and g["as_trained_accuracy"] == pytest.approx(src_acc)
    assert g["accuracy"] == pytest.approx(r["accuracy"]) and g["accuracy_floor"] == pytest.approx(src_acc - 0.01)
    assert r["details"]["source"] == "quantize/student/int8-dynamic.onnx" and r["details"]["browser_only"]
    assert r["details"]["disabled_optimizers"] == ["SkipLayerNormFusion"] and r["details"]["target_platform"] == "arm"
    # the web bundle's record when it ships this row
    rec = gelu_record(r, rows)
    assert rec["form"] == "FastGelu (tanh approximation)" and rec["check"] == g


def _source_accuracy(run) -> float:
    """The int8-dynamic source's test accuracy, as the quantize stage scores it."""
    from export.checks import ort_runner, predict
    from export.ort_session import ort_session
    from transformers import AutoTokenizer

    rows = [json.loads(line) for line in (run / "data" / "test.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(run / "quantize" / "student" / "tokenizer")
    got = predict(ort_runner(ort_session(run / "quantize" / "student" / "int8-dynamic.onnx")), tok,
                  [r["text"] for r in rows], 32).argmax(1)
    return float(np.mean([LABELS[i] == r["label"] for i, r in zip(got, rows)]))


def test_a_fastgelu_variant_that_fails_its_check_is_recorded_failed(fake_run, tmp_path):
    """Held to a source accuracy it cannot reach: the row is kept with its numbers, status failed and the
    reason; the web bundle's record names it. A source that failed in quantize gets no file, with the reason."""
    from export.web_model import gelu_record
    from pipeline.tasks.classification.fast_gelu import export_fast_gelu

    ctx = _ctx(fake_run, tmp_path, bundle={"accuracy_window": 0.0})
    rows, _ = export_fast_gelu(ctx, [_qrow(1.01)], _texts(fake_run))
    r = rows[0]
    assert r["status"] == "failed" and not r["check"]["passed"] and r["check"]["kind"] == "argmax_agreement"
    assert "student int8-dynamic-fastgelu (export/student/int8-dynamic-fastgelu.ort vs int8-dynamic.onnx): " \
           "test accuracy" in r["check"]["reason"] and "its source's 1.0100 - bundle.accuracy_window 0" in r["check"]["reason"]
    assert r["check"]["gelu"]["passed"] is False
    plain = {"model": "student", "variant": "int8-dynamic", "format": "ort", "check": {},
             "choice": {"rule": "fastest browser-wasm p50"}}
    rec = gelu_record(plain, [plain, r])
    assert rec["form"] == "as trained (erf)" and rec["reason"].startswith("the FastGelu file failed its check: "
                                                                          "int8-dynamic-fastgelu: ")
    assert gelu_record(plain, [plain])["reason"].startswith("no FastGelu file of student was made")
    assert "passed its check but was not chosen: fastest browser-wasm p50" in \
        gelu_record(plain, [plain, {**r, "status": "passed"}])["reason"]
    # its source failed in quantize: no file, a skip with the reason; none asked for: nothing
    ctx2 = _ctx(fake_run, tmp_path / "b")
    rows, skipped = export_fast_gelu(ctx2, [_qrow(0.5, "failed")], _texts(fake_run))
    assert rows == [] and skipped == [{"model": "student", "variant": "int8-dynamic-fastgelu", "format": "ort",
                                       "reason": "no FastGelu file from student int8-dynamic.onnx: it failed its "
                                                 "check in the quantize stage"}]
    assert not (ctx2.out / "student").exists()
    assert export_fast_gelu(_ctx(fake_run, tmp_path / "c", export={"fast_gelu_variants": []}), [_qrow(0.5)],
                            _texts(fake_run)) == ([], [])


@pytest.mark.parametrize("error", [RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Failed to save ORT format model"),
                                   OSError(28, "No space left on device")], ids=["ort", "os"])
def test_a_fastgelu_file_that_could_not_be_written_fails_the_stage(fake_run, tmp_path, monkeypatch, error):
    """A full disk while the .ort was written was recorded as a skipped variant, and the finished stage kept it."""
    from dataclasses import replace

    import export.registry as registry
    from pipeline.errors import PipelineError
    from pipeline.tasks.classification import fast_gelu

    real = registry.get_exporter

    def fail(job):
        raise error
    monkeypatch.setattr(registry, "get_exporter", lambda name: replace(real(name), fn=fail))
    with pytest.raises((PipelineError, OSError)) as e:
        fast_gelu.export_fast_gelu(_ctx(fake_run, tmp_path), [_qrow(0.5)], _texts(fake_run))
    if isinstance(error, RuntimeError):
        assert "student -> ort-fastgelu: writing" in str(e.value) and "a full disk or a folder it may not write" \
            in str(e.value)
    else:
        assert e.value is error


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


@pytest.mark.parametrize("over, message", [
    ({"export": {"fast_gelu_variants": ["int8-static"]}},
     r"unknown FastGelu source variant 'int8-static' in 'export.fast_gelu_variants'. Known: fp32, optimized, int8-dynamic"),
])
def test_fast_gelu_variants_are_checked_when_the_config_loads(over, message):
    from pipeline.config import config_from_dict
    from pipeline.errors import PipelineError

    with pytest.raises(PipelineError, match=message):
        config_from_dict({**over, "bundle": {"web": False}}, "t")
    assert config_from_dict({"export": {"fast_gelu_variants": []}}, "t").export.fast_gelu_variants == []
    # a source quantize.variants does not make is no load error (the default names int8-dynamic, which a config
    # trimming quantize.variants need not repeat): the export stage records a skip with the reason (test above)
    cfg = config_from_dict({"quantize": {"variants": ["fp32"]}, "export": {"ort_variants": ["fp32"]}, "bundle": {"web": False}}, "t")
    assert cfg.export.fast_gelu_variants == ["int8-dynamic"]


def _feeds(batch: int, length: int, pad: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), np.int64)
    mask[1:, length - pad:] = 0  # every row but the first padded at the end (the tiny vocabulary: 41 ids)
    return {"input_ids": rng.integers(1, 40, size=(batch, length)).astype(np.int64), "attention_mask": mask}


def _ort_run(path: Path, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_web_file_drops_the_mask_expansion_and_the_token_type_gather_with_the_same_logits(fake_run, tmp_path):
    """The browser file's graph trims (export/web_graph.py) on the tiny student's int8-dynamic export: the
    attention mask is no longer expanded to [B, 1, S, S] (no Expand, none of its shape nodes), the all-zero
    token type row is a constant (no ConstantOfShape / Gather), the heads' reshapes take constant shapes,
    LayerNormalization is ReduceMean + Sub + SimplifiedLayerNormalization + Add; logits within float rounding
    (re-rounded by the int8 activations) of the untrimmed FastGelu file's on padded batches, same labels."""
    from export.web_model import fast_gelu_file

    src = fake_run / "quantize" / "student" / "int8-dynamic.onnx"
    before = {n.op_type for n in onnx.load(src).graph.node}
    assert {"Expand", "ConstantOfShape", "LayerNormalization"} <= before  # what the HF export computes on every call
    plain, trimmed = tmp_path / "plain.onnx", tmp_path / "trimmed.onnx"
    assert fast_gelu_file(src, plain, "onnx", "arm", ["SkipLayerNormFusion"], trim=False) == {"skipped": "not asked"}
    record = fast_gelu_file(src, trimmed, "onnx", "arm", ["SkipLayerNormFusion"])
    assert record["mask_expands_dropped"] == 1 and record["constant_rows_folded"] == 1
    assert record["reshape_shapes_constant"] >= 2  # the attention heads' split and merge
    assert record["layer_norms_as_centered_rms"] == 5  # embeddings + 2 per layer
    assert record["nodes_after"] < record["nodes_before"] and record["max_relative_difference"] <= 1e-2
    ops = [n.op_type for n in onnx.load(trimmed).graph.node]
    assert "Expand" not in ops and "ConstantOfShape" not in ops and "Equal" not in ops and "Concat" not in ops
    assert "LayerNormalization" not in ops and ops.count("SimplifiedLayerNormalization") == 5 and "FastGelu" in ops
    for batch, length, pad, seed in ((1, 12, 0, 0), (3, 20, 9, 1), (2, 32, 31, 2)):
        feeds = _feeds(batch, length, pad, seed)
        a, b = _ort_run(plain, feeds), _ort_run(trimmed, feeds)
        np.testing.assert_allclose(b, a, atol=1e-2 * np.abs(a).max())
        assert (a.argmax(-1) == b.argmax(-1)).all()


def test_graph_trims_compute_the_same_function_on_the_float_graph(fake_run, tmp_path):
    """On the fp32 export (no dynamic int8 activations to re-round) every trim, the LayerNorm rewrite
    included, gives the source's logits to float rounding."""
    from export.web_graph import trim_web_graph

    src, out = fake_run / "quantize" / "student" / "fp32.onnx", tmp_path / "trimmed.onnx"
    record = trim_web_graph(src, out)
    assert record["mask_expands_dropped"] == 1 and record["layer_norms_as_centered_rms"] == 5
    assert record["max_relative_difference"] <= 1e-5
    for batch, length, pad, seed in ((1, 12, 0, 3), (4, 25, 11, 4)):
        feeds = _feeds(batch, length, pad, seed)
        np.testing.assert_allclose(_ort_run(out, feeds), _ort_run(src, feeds), rtol=1e-5, atol=1e-5)


def test_prune_drops_dead_nodes_and_unread_initializers_but_keeps_what_a_subgraph_reads():
    """A folded token-type table leaves its initializer unread (ONNX Runtime warns about it at every load):
    prune removes it with the dead nodes, and keeps an outer initializer that only an If branch reads."""
    from export.web_graph import prune

    one = np.ones(2, np.float32)
    branch = lambda name: h.make_graph([h.make_node("Add", ["x", "outer"], [name])], name, [],  # noqa: E731
                                       [h.make_tensor_value_info(name, T.FLOAT, [2])])
    nodes = [h.make_node("Mul", ["x", "table"], ["dead"]), h.make_node("Neg", ["dead"], ["dead2"]),
             h.make_node("If", ["cond"], ["y"], then_branch=branch("a"), else_branch=branch("b"))]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2]),
                                      h.make_tensor_value_info("cond", T.BOOL, [])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2])],
                         [nh.from_array(one, "table"), nh.from_array(one, "outer"), nh.from_array(one, "unread")])
    model = h.make_model(graph)
    assert prune(model) == 2
    assert [n.op_type for n in model.graph.node] == ["If"]
    assert [t.name for t in model.graph.initializer] == ["outer"]


def test_graph_trim_leaves_a_mask_it_cannot_prove_broadcast_alone(tmp_path):
    """An Expand of the mask whose result is used as a whole (here: a graph output) keeps its full shape; a
    graph with nothing to trim is copied unchanged and says so."""
    from export.web_graph import trim_web_graph, unexpand_mask

    nodes = [h.make_node("Unsqueeze", ["attention_mask", "ax"], ["u"]),
             h.make_node("Shape", ["input_ids"], ["s"]),
             h.make_node("Concat", ["s", "s"], ["shape4"], axis=0),
             h.make_node("Expand", ["u", "shape4"], ["e"]),
             h.make_node("Cast", ["e"], ["out"], to=T.FLOAT)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("input_ids", T.INT64, [1, "n"]),
                                  h.make_tensor_value_info("attention_mask", T.INT64, [1, "n"])],
                     [h.make_tensor_value_info("out", T.FLOAT, None)], [nh.from_array(np.array([1, 2], np.int64), "ax")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    assert unexpand_mask(m) == 0 and "Expand" in [n.op_type for n in m.graph.node]
    onnx.save(m, tmp_path / "m.onnx")
    record = trim_web_graph(tmp_path / "m.onnx", tmp_path / "out.onnx")
    assert "nothing to trim" in record["skipped"]
    assert (tmp_path / "out.onnx").read_bytes() == (tmp_path / "m.onnx").read_bytes()


def test_a_trimmed_graph_whose_outputs_are_nan_fails_its_check(tmp_path):
    """max_difference took max(worst, nan), which keeps worst (0.0): a trimmed graph that outputs NaN measured
    0 away from its source and was used. A NaN output is infinitely far."""
    from export.web_graph import _differs, max_difference

    def graph(path: Path, scale: float) -> Path:
        nodes = [h.make_node("Cast", ["input_ids"], ["f"], to=T.FLOAT), h.make_node("Mul", ["f", "k"], ["logits"])]
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("input_ids", T.INT64, ["b", "n"])],
                         [h.make_tensor_value_info("logits", T.FLOAT, None)],
                         [nh.from_array(np.array(scale, np.float32), "k")])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, path)
        return path

    src, same, nan = graph(tmp_path / "a.onnx", 1.0), graph(tmp_path / "b.onnx", 1.0), graph(tmp_path / "c.onnx", np.nan)
    assert max_difference(src, same) == 0.0 and _differs(src, same, 1e-4) == ""
    assert max_difference(src, nan) == float("inf")
    assert "differ from its source's by inf" in _differs(src, nan, 1e-4)


@pytest.mark.parametrize("opset", [17, 18])
def test_layer_norm_as_centered_rms_is_the_same_function(opset):
    """LayerNormalization(x, scale, bias) -> SimplifiedLayerNormalization(x - mean(x), scale) + bias, with
    ReduceMean's axes as the attribute (opset 17) or the input (18+); a norm whose Mean output is used is
    left alone."""
    import onnxruntime as ort

    from export.web_graph import layer_norm_as_centered_rms

    rng = np.random.default_rng(opset)
    inits = [nh.from_array(rng.normal(size=16).astype(np.float32), "g"), nh.from_array(rng.normal(size=16).astype(np.float32), "b")]

    def graph(extra_output: bool):
        ln = h.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mean"] if extra_output else ["y"], axis=-1, epsilon=1e-5)
        outs = [h.make_tensor_value_info("y", T.FLOAT, None)] + ([h.make_tensor_value_info("mean", T.FLOAT, None)] if extra_output else [])
        g = h.make_graph([ln], "g", [h.make_tensor_value_info("x", T.FLOAT, [2, "n", 16])], outs, inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = 8
        return m

    m = graph(False)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert layer_norm_as_centered_rms(m) == 1
    assert [n.op_type for n in m.graph.node] == ["ReduceMean", "Sub", "SimplifiedLayerNormalization", "Add"]
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = (rng.normal(size=(2, 7, 16)) * 3 + 5).astype(np.float32)  # far from zero mean: the centring matters
    np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    kept = graph(True)
    assert layer_norm_as_centered_rms(kept) == 0 and [n.op_type for n in kept.graph.node] == ["LayerNormalization"]
