"""Restricted vocabulary, factorized embeddings and long inputs (distill/vocab.py, distill/embeddings.py) on
tiny random-weight models: the id -> row table travels inside the model, its saved folder and its exported
ONNX graphs, so the tokenizer's own ids go in everywhere."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import make_texts, tiny_bert_config, write_tokenizer
from export.optimize import op_counts
from pipeline.config import ExportSection, QuantizeSection, config_from_dict
from pipeline.errors import PipelineError

LABELS = ["negative", "neutral", "positive"]
# texts that use only part of the tiny vocabulary: the "other" row is really exercised
TRAIN = ["good great love happy the a", "bad awful hate sad this is", "table car road my day"] * 3


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("vtok"))


def _bert(**kw):
    from transformers import BertForSequenceClassification

    from distill.models import HFLogits

    torch.manual_seed(0)
    return HFLogits(BertForSequenceClassification(tiny_bert_config(num_labels=3, initializer_range=0.3, **kw))).eval()


def test_training_vocab_keeps_used_ids_and_caps_by_frequency(tok):
    from distill.vocab import row_table, training_vocab

    vmap, info = training_vocab(tok, TRAIN, 32, 10_000)
    used = {i for s in tok(TRAIN)["input_ids"] for i in s}
    assert set(vmap.teacher_ids.tolist()) == used | set(tok.all_special_ids)
    assert vmap.has_other and vmap.size == len(vmap.teacher_ids) + 1
    assert info["training_ids_dropped"] == 0 and info["training_token_coverage"] == 1.0
    table = row_table(vmap)
    assert table.dtype == np.int32 and table.shape == (len(tok),)
    unused = tok.convert_tokens_to_ids("excellent")
    assert table[unused] == vmap.size - 1  # every id the texts never use -> "other"
    # a cap keeps the most frequent ids and the special tokens
    small, info = training_vocab(tok, TRAIN + ["good good good"], 32, 16)
    assert small.size == 16 and set(tok.all_special_ids) <= set(small.teacher_ids.tolist())
    assert tok.convert_tokens_to_ids("good") in small.teacher_ids
    assert info["training_ids_dropped"] > 0 and info["training_token_coverage"] < 1.0


@pytest.mark.parametrize("dim", [0, 8])
def test_compact_embedding_starts_as_the_table_it_replaces(tok, dim):
    from distill.embeddings import compact_embeddings
    from distill.vocab import training_vocab

    model = _bert()
    ids = torch.tensor(tok(["good love the a", "table car my"], padding=True)["input_ids"])
    mask = (ids != 0).long()
    before = model(ids, mask)
    vmap, _ = training_vocab(tok, TRAIN, 32, 10_000)
    emb = compact_embeddings(model.hf, vmap, dim, tok.pad_token_id)
    after = model(ids, mask)
    if dim == 0:  # kept rows copied: same logits for texts made of kept ids
        torch.testing.assert_close(after, before, atol=1e-5, rtol=0)
    else:  # rank-8 of a 32-wide table: close, not equal
        assert emb.proj.weight.shape == (32, 8) and emb.table.weight.shape == (vmap.size, 8)
    # an id outside the kept set reads the "other" row
    other = tok.convert_tokens_to_ids("excellent")
    assert emb.row_of_id[other].item() == vmap.size - 1
    torch.testing.assert_close(emb(torch.tensor([[other]])), emb(torch.tensor([[tok.convert_tokens_to_ids("ugly")]])))


def test_saved_student_and_lstm_round_trip_with_their_vocab_map(tok, tmp_path):
    from distill.embeddings import compact_embeddings
    from distill.vocab import VocabMap
    from distill.lstm import RNNClassifier, RNNConfig
    from distill.models import count_params, load_model, save_model
    from distill.vocab import training_vocab

    vmap, _ = training_vocab(tok, TRAIN, 32, 10_000)
    bert = _bert(max_position_embeddings=512)
    compact_embeddings(bert.hf, vmap, 8, tok.pad_token_id)
    rnn = RNNClassifier(RNNConfig(vocab_size=len(tok), num_labels=3, embed_dim=8, hidden=8)).eval()
    rnn.restrict_vocab(vmap)
    x = torch.tensor(tok(["good excellent the", "sad"], padding=True)["input_ids"])
    m = (x != 0).long()
    for name, model, kind in (("student", bert, "hf"), ("lstm", rnn, "rnn")):
        save_model(tmp_path / name, model, tok, LABELS, kind, 512)
        meta = json.loads((tmp_path / name / "pocketformer.json").read_text())
        assert meta["embedding"]["rows"] == vmap.size and meta["embedding"]["teacher_vocab"] == len(tok)
        saved = VocabMap.load(tmp_path / name)
        assert saved.teacher_ids.tolist() == vmap.teacher_ids.tolist() and saved.has_other
        loaded = load_model(tmp_path / name, name)
        torch.testing.assert_close(loaded.model(x, m), model(x, m))
        counts = count_params(loaded.model)
        assert counts["params"] == count_params(model)["params"]
    # the factorized student's E x H projection counts as embedding (ALBERT's convention)
    assert count_params(bert)["embedding_params"] >= vmap.size * 8 + 8 * 32


def _compact(tok, folder, positions: int):
    """A saved tiny student with a restricted, factorized embedding, loaded back."""
    from distill.embeddings import compact_embeddings
    from distill.models import load_model, save_model
    from distill.vocab import training_vocab

    bert = _bert(max_position_embeddings=positions)
    compact_embeddings(bert.hf, training_vocab(tok, TRAIN, 32, 10_000)[0], 8, tok.pad_token_id)
    save_model(folder, bert, tok, LABELS, "hf", positions)
    return load_model(folder, "student")


@pytest.fixture(scope="module")
def compact_student(tok, tmp_path_factory):
    return _compact(tok, tmp_path_factory.mktemp("compact") / "student", 128)


def _run(key, model, out, sources=None, calibration=()):
    from export.registry import ExportJob, get_exporter

    job = ExportJob("student", model, out, QuantizeSection(), ExportSection(), sources=dict(sources or {}),
                    calibration_texts=list(calibration))
    return get_exporter(key).fn(job)


def test_exported_graphs_take_tokenizer_ids_and_run_512_tokens(compact_student, tmp_path):
    """fp32, optimized and int8 files of the compact student: the id -> row Gather is in the graph, the
    int8 file quantizes the embedding table (not the int16 row table), and a 512-token input runs."""
    import onnx

    from export.checks import check_inputs, ort_runner, torch_runner
    from export.ort_session import ort_session

    fp32, opt, q8 = tmp_path / "fp32.onnx", tmp_path / "opt.onnx", tmp_path / "q8.onnx"
    _run("onnx", compact_student, fp32)
    _run("onnx-optimized", compact_student, opt, {"fp32": fp32})
    _run("int8-dynamic", compact_student, q8, {"fp32": fp32, "optimized": opt})
    texts = [t for t, _ in make_texts(30, seed=4)] + ["excellent wonderful fun"]  # ids outside the kept set too
    inputs = check_inputs(compact_student.tokenizer, texts, 32)
    ref = np.concatenate([torch_runner(compact_student.model)(x, m) for x, m in inputs.batches])
    for path in (fp32, opt):
        got = np.concatenate([ort_runner(ort_session(path))(x, m) for x, m in inputs.batches])
        np.testing.assert_allclose(got, ref, atol=1e-4)
    got = np.concatenate([ort_runner(ort_session(q8))(x, m) for x, m in inputs.batches])
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9
    fp16 = tmp_path / "fp16.onnx"  # half precision leaves the int16 row table alone
    _run("fp16", compact_student, fp16, {"fp32": fp32, "optimized": opt})
    half = np.concatenate([ort_runner(ort_session(fp16))(x, m) for x, m in inputs.batches])
    np.testing.assert_allclose(half, ref, atol=2e-2)
    model = onnx.load(str(q8))
    types = {t.name: t.data_type for t in model.graph.initializer}
    rows = [n for n, t in types.items() if t == onnx.TensorProto.INT16 and "row_of_id" in n]
    assert rows, "the id -> row table is not a constant of the int8 graph"
    assert types.get("hf.bert.embeddings.word_embeddings.table.weight_quantized") in (onnx.TensorProto.INT8,
                                                                                     onnx.TensorProto.UINT8)
    assert "hf.bert.embeddings.word_embeddings.table.weight" not in types  # no fp32 copy left
    # 512 tokens (the position table's end of a student.max_positions = 512 model) through the fp32 and int8
    # files, the fp32 one matching PyTorch
    long = _compact(compact_student.tokenizer, tmp_path / "long", 512)
    _run("onnx", long, fp32)
    _run("int8-dynamic", long, q8, {"fp32": fp32})
    ids = torch.randint(5, 30, (1, 512))
    ids[0, 0], ids[0, -1] = 2, 3
    mask = torch.ones_like(ids)
    want = torch_runner(long.model)(ids.numpy(), mask.numpy())
    np.testing.assert_allclose(ort_runner(ort_session(fp32))(ids.numpy(), mask.numpy()), want, atol=1e-4)
    assert ort_runner(ort_session(q8))(ids.numpy(), mask.numpy()).shape == (1, 3)


def test_int8_static_keeps_the_row_table_exact(compact_student, tmp_path):
    from export.checks import check_inputs, ort_runner, torch_runner
    from export.ort_session import ort_session

    fp32, qdq = tmp_path / "fp32.onnx", tmp_path / "qdq.onnx"
    _run("onnx", compact_student, fp32)
    _run("int8-static", compact_student, qdq, {"fp32": fp32}, calibration=[t for t, _ in make_texts(32, seed=2)])
    inputs = check_inputs(compact_student.tokenizer, [t for t, _ in make_texts(30, seed=4)], 32)
    ref = np.concatenate([torch_runner(compact_student.model)(x, m) for x, m in inputs.batches])
    got = np.concatenate([ort_runner(ort_session(qdq))(x, m) for x, m in inputs.batches])
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9
    assert op_counts(qdq).get("QuantizeLinear")


def test_config_checks_the_new_settings():
    base = {"student": {"hidden": 32, "heads": 2}}
    cfg = config_from_dict({"student": {**base["student"], "vocab": "training", "embedding_dim": 8,
                                        "max_positions": 512}, "baseline": {"vocab": "training", "max_length": 256}})
    assert cfg.student.vocab_size_max == 16384
    from pipeline.config import student_positions, student_serving_length

    assert student_positions(cfg.student) == 512 == student_serving_length(cfg.student)
    assert student_positions(config_from_dict({}).student) == 128 == student_serving_length(config_from_dict({}).student)
    bad = [({"student": {"vocab": "train"}}, "'student.vocab' = 'train'; choose one of teacher, training"),
           ({"baseline": {"vocab_size_max": 4}}, "'baseline.vocab_size_max' = 4 cannot hold"),
           ({"student": {**base["student"], "embedding_dim": 64}}, "'student.embedding_dim' = 64 must be 0"),
           ({"student": {"max_positions": 64}}, "'student.max_positions' = 64 is below 'student.max_length' = 128"),
           ({"baseline": {"max_length": -1}}, "must be >= 0"),
           ({"student": {"max_positions": -1}}, "'student.max_positions' and 'baseline.max_length' must be >= 0"),
           ({"quantize": {"embedding_bits": 6}}, "'quantize.embedding_bits' = 6; choose 8 or 4")]
    for raw, msg in bad:
        with pytest.raises(PipelineError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            config_from_dict(raw)


def test_int8_dynamic_with_a_4bit_embedding_table(compact_student, tok, tmp_path):
    """quantize.embedding_bits = 4: the word table becomes a GatherBlockQuantized (4-bit, blocks of 16 or 32),
    the int16 row table stays exact, the file runs in ONNX Runtime and converts to .ort."""
    import onnx

    from distill.embeddings import compact_embeddings
    from distill.models import load_model, save_model
    from distill.vocab import training_vocab
    from export.checks import check_inputs, ort_runner, torch_runner
    from export.ort_session import ort_session
    from export.registry import ExportJob, get_exporter

    bert = _bert()
    compact_embeddings(bert.hf, training_vocab(tok, TRAIN, 32, 10_000)[0], 16, tok.pad_token_id)
    save_model(tmp_path / "s16", bert, tok, LABELS, "hf", 128)
    m = load_model(tmp_path / "s16", "student")
    fp32, q4, q8 = tmp_path / "fp32.onnx", tmp_path / "q4.onnx", tmp_path / "q8.onnx"
    _run("onnx", m, fp32)

    def dyn(model, out, bits):
        job = ExportJob("student", model, out, QuantizeSection(embedding_bits=bits, dynamic_source="fp32"),
                        ExportSection(), sources={"fp32": fp32})
        return get_exporter("int8-dynamic").fn(job)

    details = dyn(m, q4, 4)
    assert details["embedding_4bit"]["block"] == 16 and details["embedding_4bit"]["dim"] == 16
    assert details["quantized_ops"]["GatherBlockQuantized"] == 1
    dyn(m, q8, 8)
    graph = onnx.load(str(q4)).graph
    names = {t.name: t.data_type for t in graph.initializer}
    assert names["hf.bert.embeddings.word_embeddings.table.weight_Q4"] == onnx.TensorProto.UINT8  # 2 values a byte
    assert "hf.bert.embeddings.word_embeddings.table.weight" not in names
    assert any(t == onnx.TensorProto.INT16 for n, t in names.items() if "row_of_id" in n)
    texts = [t for t, _ in make_texts(30, seed=4)] + ["excellent wonderful fun"]
    inputs = check_inputs(tok, texts, 32)
    ref = np.concatenate([torch_runner(m.model)(x, k) for x, k in inputs.batches])
    got = np.concatenate([ort_runner(ort_session(q4))(x, k) for x, k in inputs.batches])
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9
    # the table's share of the file halves: 4 bits per value against 8
    table8 = next(t for t in onnx.load(str(q8)).graph.initializer if t.name.endswith("table.weight_quantized"))
    assert len(graph_bytes := next(t for t in graph.initializer if t.name.endswith("_Q4")).raw_data) * 2 == \
        len(table8.raw_data) == np.prod(table8.dims)
    # and the .ort conversion (contrib op, uint4 tensor) keeps it
    from export.ort_format import convert_to_ort

    ort_file = tmp_path / "q4.ort"
    convert_to_ort([("student", q4, ort_file)], "arm", ["SkipLayerNormFusion"])
    again = np.concatenate([ort_runner(ort_session(ort_file))(x, k) for x, k in inputs.batches])
    assert (again.argmax(-1) == got.argmax(-1)).mean() >= 0.9
    # rows that no block size divides are one clear error
    with pytest.raises(PipelineError, match="blocks of 16 or 32 values, but the embedding rows are 8 wide"):
        fp8 = tmp_path / "fp8.onnx"
        _run("onnx", compact_student, fp8)
        job = ExportJob("student", compact_student, tmp_path / "x.onnx", QuantizeSection(embedding_bits=4),
                        ExportSection(), sources={"fp32": fp8})
        get_exporter("int8-dynamic").fn(job)


@pytest.mark.parametrize("dim,block", [(32, 32), (48, 16), (64, 32)])
def test_4bit_rows_match_onnxruntimes_kernel(dim, block):
    """Our packing (odd block counts included) is what GatherBlockQuantized reads: its output equals the
    dequantized table, and the quantization error is within half a step."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from export.embed4 import pack_uint4, quantize_rows_4bit

    w = np.random.default_rng(0).normal(size=(10, dim)).astype(np.float32)
    w[0] = 0.0  # a padding row stays exactly zero
    q, s, zp = quantize_rows_4bit(w, block)
    deq = ((q.reshape(10, -1, block).astype(np.float32) - zp[..., None]) * s[..., None]).reshape(10, dim)
    assert np.all(np.abs(deq - w) <= s.repeat(block, axis=1) / 2 + 1e-6) and not deq[0].any()
    node = helper.make_node("GatherBlockQuantized", ["d", "i", "s", "z"], ["y"], domain="com.microsoft",
                            gather_axis=0, quantize_axis=1, block_size=block, bits=4)
    inits = [numpy_helper.from_array(pack_uint4(q), "d"), numpy_helper.from_array(s, "s"),
             numpy_helper.from_array(pack_uint4(zp), "z")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("i", TensorProto.INT64, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rows = np.array([0, 3, 9])
    np.testing.assert_array_equal(sess.run(None, {"i": rows})[0], deq[rows])


def test_shape_files_builds_a_students_files_from_its_config(tmp_path):
    """tools.shape_files: the files of a student shape with random weights, with the config's vocabulary
    and [CLS] settings applied, so the old full-vocabulary student can be timed against a new one."""
    import onnx

    from tools.shape_files import build

    tok = tmp_path / "tok"
    vocab = len(write_tokenizer(tok))
    base = {"student": {"layers": 2, "hidden": 32, "heads": 2, "ffn": 64, "max_length": 32}}
    full = build(config_from_dict(dict(base, quantize={"cls_only_last_layer": False}), "t"), tok, tmp_path / "full")
    small = build(config_from_dict({"student": dict(base["student"], embedding_dim=16)}, "t"), tok, tmp_path / "small")
    assert all(p.is_file() for p in [*full.values(), *small.values()])
    ops = lambda p: [n.op_type for n in onnx.load(str(p)).graph.node]  # noqa: E731
    assert ops(full["optimized"]).count("Attention") == 2 and ops(small["optimized"]).count("Attention") == 1
    # the factorized table: vocab x 16 rows and a 16 x 32 projection instead of the vocab x 32 table
    dims = {tuple(t.dims) for t in onnx.load(str(small["fp32"])).graph.initializer}
    assert (vocab, 16) in dims and (16, 32) in dims and (vocab, 32) not in dims
    assert (vocab, 32) in {tuple(t.dims) for t in onnx.load(str(full["fp32"])).graph.initializer}
