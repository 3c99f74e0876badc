"""The NPU student (student.arch = "npu"): its static ONNX files compute what PyTorch computes, ORT's mobile
usability checker puts every node of each provider's int8 file in one partition, and the pipeline's
distill and quantize stages train, save, reload and export it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from distill.npu_student import NpuStudent, NpuStudentConfig
from eval.npu import check_onnx
from export.npu import NPU_VARIANTS, NpuRunner, export_static, int8_weights, torch_logits, write_variant


# the variants ORT's mobile usability checker has a section for (qnn-w8a16 is checked by compiling it for the
# HTP, tests/test_npu_qnn.py)
CHECKER_VARIANTS = {k: v for k, v in NPU_VARIANTS.items() if v.provider in ("nnapi", "coreml_mlprogram")}


def tiny_student(seed: int = 0) -> NpuStudent:
    torch.manual_seed(seed)
    return NpuStudent(NpuStudentConfig(vocab_size=300, num_labels=3, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)).eval()


def texts(n: int, max_len: int, seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[2] + rng.integers(5, 300, int(rng.integers(1, max_len - 1))).tolist() + [3] for _ in range(n)]


def test_padding_does_not_change_the_logits():
    m = tiny_student()
    ids = torch.tensor([[2, 17, 40, 99, 3]])
    alone = m(ids, torch.ones_like(ids))
    padded = torch.cat([ids, torch.zeros(1, 11, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones_like(ids), torch.zeros(1, 11, dtype=torch.long)], 1)
    assert torch.allclose(m(padded, mask), alone, atol=1e-5)


@pytest.mark.parametrize("cls_only", [False, True])
@pytest.mark.parametrize("name", list(NPU_VARIANTS))
def test_static_fp32_file_matches_pytorch(tmp_path, name, cls_only):
    """With cls_only (quantize.cls_only_last_layer, the default) the last layer computes [CLS] alone: same
    logits, fewer FLOPs, and the model's switch is off again afterwards."""
    import onnx
    import onnxruntime as ort

    from eval.flops import graph_flops
    from export.cls_only import cls_only_last_layer

    m = tiny_student()
    v = NPU_VARIANTS[name]
    with cls_only_last_layer(m, cls_only) as applied:
        assert applied is cls_only and m.cls_only is cls_only
        path = export_static(m, tmp_path / "f.onnx", 16, v, 17)
    assert m.cls_only is False
    if cls_only:  # 2 layers: the second does a fraction of its work
        full = export_static(m, tmp_path / "full.onnx", 16, v, 17)
        assert graph_flops(path, 16) < 0.85 * graph_flops(full, 16)
    graph = onnx.load(str(path)).graph
    ops = {n.op_type for n in graph.node}
    # what the providers reject, and the dynamic-shape plumbing, must be gone
    assert not ops & {"LayerNormalization", "Erf", "Where", "Expand", "Shape", "Gelu"}
    assert ("Gather" in ops) == v.lookup_in_graph
    dims = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.input]
    assert all(d > 0 for shape in dims for d in shape)  # every input dimension fixed
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for ids in texts(6, 16):
        x = np.zeros((1, 16), np.int32)
        mask = np.zeros((1, 16), np.int32)
        x[0, :len(ids)], mask[0, :len(ids)] = ids, 1
        first = x if v.lookup_in_graph else m.embed(torch.from_numpy(x)).detach().numpy()
        got = sess.run(["logits"], {graph.input[0].name: first, "attention_mask": mask})[0]
        want = torch_logits(m, [ids])
        assert np.abs(got - want).max() < 1e-4


def test_int8_weights_are_int8_and_close(tmp_path):
    import onnx

    m = tiny_student()
    src = export_static(m, tmp_path / "f.onnx", 16, NPU_VARIANTS["coreml-int8w"], 17)
    n = int8_weights(src, tmp_path / "w.onnx", min_elements=256)
    assert n == 2 * 6 + 1  # q, k, v, o, ff1, ff2 per layer and the pooler; the 32 x 3 classifier stays float
    model = onnx.load(str(tmp_path / "w.onnx"))
    assert sum(t.data_type == onnx.TensorProto.INT8 for t in model.graph.initializer) == n
    runner = NpuRunner({16: tmp_path / "w.onnx"}, NPU_VARIANTS["coreml-int8w"], None)
    runner.lookup = None  # fed below with PyTorch's own lookup
    for ids in texts(5, 16):
        x = np.zeros((1, 16), np.int64)
        mask = np.zeros((1, 16), np.int32)
        x[0, :len(ids)], mask[0, :len(ids)] = ids, 1
        emb = m.embed(torch.from_numpy(x)).detach().numpy()
        got = runner.sessions[16].run(["logits"], {"embeddings": emb, "attention_mask": mask})[0]
        assert np.abs(got - torch_logits(m, [ids])).max() < 0.05  # int8 rounding, not a different model


def test_each_int8_file_is_one_partition_for_its_provider(tmp_path):
    """The deterministic readiness check: every node of the int8 file at 64 tokens goes to its provider,
    in one partition (NNAPI for the QDQ file, the CoreML EP's MLProgram for the int8-weight file)."""
    m = tiny_student()
    calib = texts(16, 64)
    for name, v in CHECKER_VARIANTS.items():
        made = write_variant(m, tmp_path / "npu", name, [64], 17, calib, 0, "student", cls_only=True)
        assert made["details"]["cls_only_last_layer"] is True
        res = check_onnx(made["files"][64])
        mine = res[v.provider]["as_is"]
        assert mine["partitions"] == 1 and mine["supported_nodes"] == mine["total_nodes"] > 50, (name, mine)
        if v.quantize == "qdq":
            import onnx

            ops = [n.op_type for n in onnx.load(str(made["files"][64])).graph.node]
            assert ops.count("QuantizeLinear") > 10 and "DequantizeLinear" in ops
        # and the file still computes the model: argmax agreement with PyTorch on padded single texts
        runner = NpuRunner(made["files"], v, made["lookup"])
        ids = texts(20, 64, seed=5)
        got, want = runner.logits(ids, 0), torch_logits(m, ids)
        assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.9


def test_save_load_round_trip(tmp_path):
    from distill.models import load_model, save_model
    from tests.conftest import write_tokenizer

    m = tiny_student()
    tok = write_tokenizer(tmp_path / "tok")
    save_model(tmp_path / "s", m, tok, ["a", "b", "c"], "npu", 64)
    back = load_model(tmp_path / "s", "student")
    assert back.kind == "npu" and isinstance(back.model, NpuStudent)
    ids = torch.tensor([[2, 5, 9, 3]])
    assert torch.equal(back.model(ids, torch.ones_like(ids)), m(ids, torch.ones_like(ids)))


@pytest.mark.e2e
def test_distill_and_quantize_stages_with_the_npu_student(tiny_cfg_dict):
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    d = json.loads(json.dumps(tiny_cfg_dict))
    d["student"]["arch"] = "npu"
    d["distill"].update(epochs=6.0, lr=5e-3)  # the tiny config's 3 epochs leave any student near chance
    d["quantize"] = {"models": ["student"], "variants": ["fp32", "optimized", "int8-dynamic", "int8-static"],
                     "npu_lengths": [16, 32], "check_samples": 24, "calibration_samples": 32}
    cfg = config_from_dict(d, "tiny-test-config")
    run(cfg, ["quantize"])
    run_dir = cfg.run_dir
    summary = json.loads((run_dir / "distill" / "manifest.json").read_text())
    assert "intermediate" in json.dumps(summary)  # the hidden-state and attention transfer phase ran
    meta = json.loads((run_dir / "distill" / "student" / "pocketformer.json").read_text())
    assert meta["kind"] == "npu"
    acc = {r["model"]: r["accuracy"] for r in json.loads((run_dir / "eval" / "accuracy.json").read_text())}
    assert acc["student"] > 0.9  # three separable classes: it learned from the teacher
    rows = json.loads((run_dir / "quantize" / "variants.json").read_text())
    assert {r["variant"] for r in rows} == {"fp32", "int8-dynamic", "int8-static"}  # nothing to fuse
    npu = json.loads((run_dir / "quantize" / "npu.json").read_text())
    assert {r["variant"] for r in npu} == {"npu-nnapi-int8", "npu-coreml-int8w", "npu-qnn-w8a16"}  # the defaults
    for r in npu:
        assert set(r["files"]) == {"16", "32"} and all((run_dir / f).is_file() for f in r["files"].values())
        assert r["check"]["passed"] and abs(r["accuracy"] - acc["student"]) < 0.1
        if r["provider"] == "qnn":  # the usability checker has no QNN section (tests/test_npu_qnn.py compiles it)
            continue
        mine = r["readiness"]["32"][r["provider"]]["as_is"]
        assert mine["partitions"] == 1 and mine["supported_nodes"] == mine["total_nodes"]
    assert (run_dir / npu[1]["lookup"]).is_file()


def test_bundle_gets_the_npu_files_with_their_io(tmp_path):
    from export.npu_bundle import add_npu_files

    m = tiny_student()
    run = tmp_path / "run"
    qdir = run / "quantize"
    rows = []
    for name, v in NPU_VARIANTS.items():
        made = write_variant(m, qdir / "student" / "npu", name, [16, 32], 17, texts(8, 16), 0, "student")
        rows.append({"model": "student", "variant": f"npu-{name}", "provider": v.provider, "lengths": [16, 32],
                     "files": {str(n): p.relative_to(run).as_posix() for n, p in made["files"].items()},
                     "lookup": made["lookup"].relative_to(run).as_posix() if made["lookup"] else None,
                     "accuracy": 0.5, "readiness": {}})
    (qdir / "npu.json").write_text(json.dumps(rows))
    out = tmp_path / "bundle"
    assert add_npu_files(run, qdir, "lstm", out) is None  # another model: nothing to add
    entry = add_npu_files(run, qdir, "student", out)
    nnapi, coreml = entry["nnapi-int8"], entry["coreml-int8w"]
    assert (out / nnapi["files"]["32"]["file"]).is_file() and nnapi["lookup"] is None
    assert [i["name"] for i in nnapi["files"]["16"]["inputs"]] == ["input_ids", "attention_mask"]
    assert nnapi["files"]["16"]["inputs"][0]["shape"] == [1, 16] and "int32" in nnapi["files"]["16"]["inputs"][0]["type"]
    assert [i["name"] for i in coreml["files"]["32"]["inputs"]] == ["embeddings", "attention_mask"]
    assert coreml["files"]["32"]["inputs"][0]["shape"] == [1, 32, 32]
    assert (out / coreml["lookup"]["file"]).is_file() and coreml["lookup"]["outputs"][0]["name"] == "embeddings"


def compact_student(seed: int = 0) -> NpuStudent:
    """tiny_student with a restricted (120 of 300 ids + "other") and factorized (E = 16) embedding, as
    student.vocab = "training" and student.embedding_dim = 16 make it in the distill stage."""
    from distill.embeddings import compact_embeddings
    from distill.vocab import VocabMap

    m = tiny_student(seed)
    kept = np.array([0, 1, 2, 3] + list(range(5, 121)), dtype=np.int64)
    compact_embeddings(m, VocabMap(kept, 300, has_other=True), 16, 0)
    return m.eval()


def test_compact_embedding_npu_files_stay_one_partition(tmp_path):
    """student.arch = "npu" with the vocabulary options: the id -> row table and the E x H projection go
    into the NNAPI file (still one partition) and into lookup.onnx for the CoreML file; both files keep
    computing the PyTorch model, and an id outside the kept set reads the "other" row in every file."""
    from distill.embeddings import find_compact

    m = compact_student()
    assert find_compact(m).spec == {"rows": 121, "dim": 16, "out_dim": 32, "teacher_vocab": 300}
    calib = texts(16, 64)
    ids = texts(20, 64, seed=5)
    for name, v in CHECKER_VARIANTS.items():
        made = write_variant(m, tmp_path / "npu", name, [64], 17, calib, 0, "student", cls_only=True)
        mine = check_onnx(made["files"][64])[v.provider]["as_is"]
        assert mine["partitions"] == 1 and mine["supported_nodes"] == mine["total_nodes"], (name, mine)
        runner = NpuRunner(made["files"], v, made["lookup"])
        got, want = runner.logits(ids, 0), torch_logits(m, ids)
        assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.9
        # 250 and 299 are not kept: both read the "other" row, so the two texts give the same logits
        a, b = runner.logits([[2, 7, 250, 3], [2, 7, 299, 3]], 0)
        assert np.allclose(a, b)


def test_compact_npu_student_save_load_round_trip(tmp_path):
    from distill.embeddings import CompactEmbedding
    from distill.models import count_params, load_model, save_model
    from tests.conftest import write_tokenizer

    m = compact_student()
    tok = write_tokenizer(tmp_path / "tok")
    save_model(tmp_path / "s", m, tok, ["a", "b", "c"], "npu", 64)
    back = load_model(tmp_path / "s", "student")
    assert isinstance(back.model.get_input_embeddings(), CompactEmbedding)
    ids = torch.tensor([[2, 5, 9, 250, 3]])
    assert torch.equal(back.model(ids, torch.ones_like(ids)), m(ids, torch.ones_like(ids)))
    # 121 x 16 rows + the 16 x 32 projection replace the 300 x 32 table
    assert count_params(back.model)["embedding_params"] == 121 * 16 + 16 * 32


def test_compare_files_feeds_static_and_dynamic_files(tmp_path):
    """tools.compare_files times a dynamic-shape file against a static int32 NPU file on the same ids (the
    static one padded to its length) and reports both p50s and the round ratios."""
    from tools.compare_files import compare

    m = tiny_student()
    dyn = tmp_path / "dyn.onnx"
    with torch.no_grad():
        torch.onnx.export(m, (torch.tensor([[2, 5, 3]]), torch.ones(1, 3, dtype=torch.long)), str(dyn),
                          dynamo=False, input_names=["input_ids", "attention_mask"], output_names=["logits"],
                          dynamic_axes={"input_ids": {1: "t"}, "attention_mask": {1: "t"}}, opset_version=17)
    static = export_static(m, tmp_path / "static.onnx", 32, NPU_VARIANTS["nnapi-int8"], 17)
    res = compare([dyn, static], np.array([[2, 9, 14, 77, 3]]), 0, threads=1, rounds=2, calls=3)
    assert len(res["p50_ms"]) == 2 and all(p > 0 for p in res["p50_ms"])
    lo, hi = res["ratio_range"]
    assert lo <= res["ratio_second_to_first"] <= hi and res["length"] == 5
    from pipeline.errors import PipelineError

    with pytest.raises(PipelineError, match="fixed at 32 tokens"):
        compare([dyn, static], np.full((1, 40), 7), 0, threads=1, rounds=1, calls=1)


def test_compare_files_bad_input_is_one_message(tmp_path):
    """A file that is not a model, an empty texts file and a line without 'text' each end in one error."""
    from tools.compare_files import _texts, compare
    from pipeline.errors import PipelineError

    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    with pytest.raises(PipelineError, match="bad.onnx is not a model ONNX Runtime can load"):
        compare([bad, bad], np.array([[2, 3]]), 0, threads=1, rounds=1, calls=1)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(PipelineError, match="has no texts"):
        _texts(tmp_path / "empty.jsonl")
    (tmp_path / "x.jsonl").write_text('{"text": "fine"}\n{"label": 1}\n')
    with pytest.raises(PipelineError, match="line 2 is not a JSON object with a 'text' field"):
        _texts(tmp_path / "x.jsonl")


def test_in_process_checker_reads_as_its_command_line(tmp_path):
    """check_onnx runs ORT's usability checker in-process; its reading of a file equals what the checker's own
    command line prints, parsed the same way. A file it cannot read is an error entry, not an exception."""
    import subprocess
    import sys

    from eval.npu import parse_usability

    made = write_variant(tiny_student(), tmp_path / "npu", "nnapi-int8", [16], 17, texts(8, 16), 0, "student",
                         cls_only=True)
    path = made["files"][16]
    proc = subprocess.run([sys.executable, "-m", "onnxruntime.tools.check_onnx_model_mobile_usability", str(path)],
                          capture_output=True, text=True, timeout=300)
    cli = parse_usability(proc.stdout + "\n" + proc.stderr)
    assert set(cli) == {"nnapi", "coreml_neuralnetwork", "coreml_mlprogram"}
    assert check_onnx(path) == cli
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    assert check_onnx(tmp_path / "broken.onnx")["error"].startswith("checker failed: ")
