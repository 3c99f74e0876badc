"""A tiny run through every stage up to the bundle with the compact options on: student.vocab = "training"
with a cap below the training vocabulary, a factorized embedding, a 64-position table trained at 32 tokens,
and restricted-vocabulary RNNs serving 48 tokens. The bundle stage itself compares the string-in model
(tokenizer graph, then the model with its id -> row table) with tokenizer + model on the whole test split."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.errors import PipelineError
from test_bundle_stage import tiny_run_dict

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def run_cfg(tmp_path_factory):
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    d = tiny_run_dict(tmp_path_factory.mktemp("vocab_run"))
    d["student"].update(vocab="training", vocab_size_max=24, embedding_dim=8, max_positions=64)
    d["baseline"].update(vocab="training", vocab_size_max=20, max_length=48)
    d["bench"]["seq_lengths"] = [32, 64]
    cfg = config_from_dict(d, "tiny-vocab-config")
    run(cfg, ["bundle"])
    return cfg


def _manifest(cfg, stage: str) -> dict:
    return json.loads((cfg.run_dir / stage / "manifest.json").read_text())


def test_student_and_rnns_record_their_vocabulary(run_cfg):
    from distill.vocab import VocabMap
    from distill.models import load_model

    summary = _manifest(run_cfg, "distill")["summary"]
    emb = summary["embedding"]
    assert emb["vocab"] == "training" and emb["rows"] == 24 and emb["positions"] == 64
    assert emb["training_ids_dropped"] > 0  # the cap really cut the tiny vocabulary
    student = load_model(run_cfg.run_dir / "distill" / "student", "student")
    assert student.max_length == 64
    assert student.model.hf.config.max_position_embeddings == 64
    vmap = VocabMap.load(student.folder)
    assert vmap.size == 24 and vmap.has_other and vmap.teacher_vocab == len(student.tokenizer)
    for name in ("lstm", "lstm_distilled"):
        rnn = load_model(run_cfg.run_dir / "baseline" / name, name)
        assert rnn.max_length == 48 and VocabMap.load(rnn.folder).has_other
    # eval counts the smaller tables
    rows = {r["model"]: r for r in json.loads((run_cfg.run_dir / "eval" / "accuracy.json").read_text())}
    assert rows["student"]["embedding_params"] < rows["teacher"]["embedding_params"]


def test_exports_bench_and_bundle_take_tokenizer_ids(run_cfg):
    import onnxruntime as ort

    variants = json.loads((run_cfg.run_dir / "quantize" / "variants.json").read_text())
    student = [v for v in variants if v["model"] == "student"]
    assert student and all(v["accuracy"] is not None for v in student)
    # the bench ran the student at 64 tokens: its position table reaches that far now
    results = json.loads((run_cfg.run_dir / "report" / "results.json").read_text())
    row = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) == ("student", "int8-dynamic", "ort"))
    assert row["latency"]["mobile-cpu"]["64"]["p50_ms"] > 0, row["latency"]["mobile-cpu"]
    # the formula counts the factorized projection, so it still matches the MatMuls in the graph
    fp32 = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) == ("student", "fp32", "onnx"))
    assert abs(fp32["flops_graph_check"]["ratio_to_formula"] - 1) < 0.02, fp32["flops_graph_check"]
    meta = json.loads((run_cfg.run_dir / "bundle" / "metadata.json").read_text())
    assert meta["vocabulary"]["rows"] == 24 and meta["vocabulary"]["kept_ids_file"] == "tokenizer/vocab_map.json"
    assert (run_cfg.run_dir / "bundle" / "tokenizer" / "vocab_map.json").is_file()
    agreement = meta["string_model_check"]
    assert agreement["agreement"] >= 0.99 and agreement["texts"] > 0
    # the string-in model takes raw text, including words the student's vocabulary dropped
    text_model = next((run_cfg.run_dir / "bundle" / "model").glob("*-text.onnx"))
    from onnxruntime_extensions import get_library_path

    so = ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    sess = ort.InferenceSession(str(text_model), so, providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: np.array(["excellent wonderful fun day"])})
    assert out[0].shape[-1] == 3


def _toml(d: dict) -> str:
    """The run dict as TOML (strings, numbers, booleans and lists of them are all it holds)."""
    def lit(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(lit(x) for x in v) + "]"
        return json.dumps(v)
    return "\n".join(f"[{name}]\n" + "\n".join(f"{k} = {lit(v)}" for k, v in sec.items()) + "\n"
                     for name, sec in d.items())


def test_compact_probe_scores_the_run_and_refuses_posthoc_on_a_compact_student(run_cfg, tmp_path, capsys):
    from tools.compact_probe import main
    from pipeline.config import dumps

    cfg_file = tmp_path / "run.toml"
    raw = json.loads(dumps(run_cfg))
    cfg_file.write_text(_toml({k: raw[k] for k in ("run", "data", "teacher", "student", "quantize", "export")}))
    main(["--config", str(cfg_file), "--reference", str(run_cfg.run_dir), "--rounds", "1", "--calls", "3"])
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"PyTorch", "fp32", "optimized", "int8-dynamic", "int8-dynamic.ort"} <= set(rows)
    assert '"rows": 24' in out and "ratio" in out
    with pytest.raises(PipelineError, match="already has a restricted or factorized one"):
        main(["--config", str(cfg_file), "--reference", str(run_cfg.run_dir), "--posthoc"])
