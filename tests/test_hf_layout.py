"""The bundle's files for existing clients, each proven by running that client on the tiny bundled run:
transformers.js in Node (clients/js, `make test` installs it) and Optimum load hf/ and label texts as the
pipeline's own ONNX Runtime reference does; huggingface_hub parses the model card's model-index; the
required_operators.config lists exactly the operators an ONNX Runtime session over the bundled .ort runs."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from test_bundle_stage import bundled_run

REPO = Path(__file__).resolve().parents[1]
JS_DIR = REPO / "clients" / "js"
# tiny-vocabulary texts: plain, upper case with punctuation, empty, and one far past max_length (32), which
# every client must truncate as training did (the student's position table ends at 64)
EXTRA_TEXTS = ["GOOD movie, really great!", "", "the awful awful train was so boring " * 12]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    _, cfg = bundled_run(tmp_path_factory)
    bundle = Path(cfg.bundle.dist_dir) / cfg.run.name
    return cfg, bundle, json.loads((bundle / "metadata.json").read_text())


def _texts(bundle: Path) -> list[str]:
    return [s["text"] for s in json.loads((bundle / "samples.json").read_text())] + EXTRA_TEXTS


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _session(cfg, meta: dict, variant: str):
    from export.checks import ort_runner
    from export.ort_session import ort_session

    return ort_runner(ort_session(cfg.run_dir / "quantize" / meta["model"]["name"] / f"{variant}.onnx"))


def _tokenizer(cfg, meta: dict):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(cfg.run_dir / "quantize" / meta["model"]["name"] / "tokenizer")


def _reference(cfg, meta: dict, variant: str, texts: list[str]) -> np.ndarray:
    """Probabilities from the pipeline's own path: the run's quantize file + the HF tokenizer, one text per call."""
    from export.checks import predict

    return _softmax(predict(_session(cfg, meta, variant), _tokenizer(cfg, meta), texts, meta["max_length"], 1))


def _reference_cut_after_specials(cfg, meta: dict, variant: str, texts: list[str]) -> np.ndarray:
    """transformers.js (4.3.1) truncates after adding [CLS] / [SEP], so a text longer than max_length loses its
    final [SEP] there (the Python tokenizers keep it); this is the reference for such texts."""
    run, tok = _session(cfg, meta, variant), _tokenizer(cfg, meta)
    out = []
    for t in texts:
        ids = np.array([tok(t)["input_ids"][: meta["max_length"]]], dtype=np.int64)
        out.append(run(ids, np.ones_like(ids))[0])
    return _softmax(np.stack(out))


def _check_labels(got: list[dict], probs: np.ndarray, labels: list[str], who: str) -> None:
    assert [g["label"] for g in got] == [labels[i] for i in probs.argmax(axis=1)], who
    np.testing.assert_allclose([g["score"] for g in got], probs.max(axis=1), atol=1e-4, err_msg=who)


def test_layout_files_labels_and_hashes(built):
    cfg, bundle, meta = built
    hf = bundle / "hf"
    labels = json.loads((bundle / "labels.json").read_text())
    config = json.loads((hf / "config.json").read_text())
    assert config["id2label"] == {str(i): lab for i, lab in enumerate(labels)}
    assert config["label2id"] == {lab: i for i, lab in enumerate(labels)}
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForSequenceClassification"]
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        assert (hf / name).is_file(), name
    # the training length travels with the tokenizer (save_pretrained had left "no limit" there)
    assert json.loads((hf / "tokenizer_config.json").read_text())["model_max_length"] == meta["max_length"] == 32
    assert meta["hf_layout"]["onnx"]["onnx/model.onnx"]["variant"] == "fp32"
    assert meta["hf_layout"]["onnx"]["onnx/model_quantized.onnx"]["variant"] == "int8-dynamic"
    # the copies are the run's files, and every new file is in metadata.json's hashed list
    from pipeline.manifest import sha256_file

    for rel, variant in (("onnx/model.onnx", "fp32"), ("onnx/model_quantized.onnx", "int8-dynamic")):
        assert sha256_file(hf / rel) == sha256_file(cfg.run_dir / "quantize" / "student" / f"{variant}.onnx")
    written = sorted(p.relative_to(bundle).as_posix() for p in (hf).rglob("*") if p.is_file())
    assert len(written) == 8 and all(meta["files"][rel]["sha256"] == sha256_file(bundle / rel)
                                     for rel in written + ["required_operators.config"])


def test_verify_bundle_names_a_changed_hf_file(built, tmp_path):
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    _, bundle, _ = built
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    verify_bundle(copy)
    path = copy / "hf" / "onnx" / "model_quantized.onnx"
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(PipelineError, match="hf/onnx/model_quantized.onnx"):
        verify_bundle(copy)


def test_optimum_loads_and_labels(built):
    from optimum.onnxruntime import ORTModelForSequenceClassification
    from transformers import AutoTokenizer, pipeline

    cfg, bundle, meta = built
    texts = _texts(bundle)
    tok = AutoTokenizer.from_pretrained(bundle / "hf")
    for file_name, variant in (("model.onnx", "fp32"), ("model_quantized.onnx", "int8-dynamic")):
        model = ORTModelForSequenceClassification.from_pretrained(bundle / "hf", subfolder="onnx", file_name=file_name)
        classify = pipeline("text-classification", model=model, tokenizer=tok)
        got = [classify(t, truncation=True)[0] for t in texts]
        _check_labels(got, _reference(cfg, meta, variant, texts), meta["labels"], f"optimum {file_name}")


def _node_or_skip() -> str:
    from eval.browser import node_path

    node = node_path()
    if node is None:
        pytest.skip("node is not installed: transformers.js cannot be run here (install Node.js 18+)")
    if not all((JS_DIR / "node_modules" / p).is_dir() for p in ("@huggingface/transformers", "onnxruntime-web")):
        pytest.skip("clients/js/node_modules is missing: run `make test` (it runs `npm ci --ignore-scripts` there) "
                    "or that command in clients/js")
    return node


def test_transformers_js_loads_and_labels(built, tmp_path):
    node = _node_or_skip()
    cfg, bundle, meta = built
    texts = _texts(bundle)
    tok = _tokenizer(cfg, meta)
    long = [len(tok(t)["input_ids"]) > meta["max_length"] for t in texts]
    assert sum(long) == 1  # the last extra text; the samples all fit
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    for dtype, variant in (("fp32", "fp32"), ("q8", "int8-dynamic")):
        proc = subprocess.run([node, str(JS_DIR / "classify.mjs"), str(bundle), "hf", dtype,
                               str(tmp_path / "texts.json")], capture_output=True, text=True, timeout=300, cwd=JS_DIR)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["dtype"] == dtype and len(out["results"]) == len(texts)
        fits = [i for i, x in enumerate(long) if not x]
        _check_labels([out["results"][i] for i in fits], _reference(cfg, meta, variant, [texts[i] for i in fits]),
                      meta["labels"], f"transformers.js {dtype}")
        # the long text: truncated to max_length by transformers.js's own rule (no position past it is used)
        cut = [i for i, x in enumerate(long) if x]
        _check_labels([out["results"][i] for i in cut],
                      _reference_cut_after_specials(cfg, meta, variant, [texts[i] for i in cut]), meta["labels"],
                      f"transformers.js {dtype}, text past max_length")


def test_browser_runtime_runs_both_files(built, tmp_path):
    """onnxruntime-web's wasm backend (what transformers.js runs on in a browser) runs both files, the fused
    int8 graph's QAttention included. fp32 must give the native runtime's logits; the int8 file is compared
    with the fp32 logits (labels equal, logits within 0.05): wasm's int8 kernels are the same on every machine,
    while the native CPU ones are not, and on this 16-wide random model the native x86 QAttention lands up to
    ~0.6 from fp32 where wasm stays within ~0.01 (on the demo student both stay within 0.03)."""
    node = _node_or_skip()
    cfg, bundle, meta = built
    tok = _tokenizer(cfg, meta)
    texts = _texts(bundle)
    ids = [tok(t, truncation=True, max_length=meta["max_length"])["input_ids"] for t in texts]
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    quantized = bundle / "hf" / "onnx" / "model_quantized.onnx"
    import onnx

    assert "QAttention" in {n.op_type for n in onnx.load(str(quantized)).graph.node}  # the fused int8 path
    fp32 = _session(cfg, meta, "fp32")
    want = np.stack([fp32(np.array([i], dtype=np.int64), np.ones((1, len(i)), dtype=np.int64))[0] for i in ids])
    for path, atol in ((bundle / "hf" / "onnx" / "model.onnx", 1e-4), (quantized, 0.05)):
        proc = subprocess.run([node, str(JS_DIR / "web_logits.mjs"), str(path), str(tmp_path / "ids.json")],
                              capture_output=True, text=True, timeout=300, cwd=JS_DIR)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["runtime"].startswith("onnxruntime-web ") and out["runtime"].endswith(" wasm")
        got = np.array(out["logits"])  # (N, C)
        np.testing.assert_allclose(got, want, atol=atol, err_msg=path.name)
        assert (got.argmax(1) == want.argmax(1)).all(), path.name


def test_transformers_js_never_fetches_a_missing_file(built, tmp_path):
    """With the quantized file gone, transformers.js must fail (allowRemoteModels = false), not download it."""
    node = _node_or_skip()
    _, bundle, _ = built
    copy = tmp_path / "b"
    shutil.copytree(bundle / "hf", copy / "hf")
    (copy / "hf" / "onnx" / "model_quantized.onnx").unlink()
    (tmp_path / "texts.json").write_text(json.dumps(["good day"]))
    proc = subprocess.run([node, str(JS_DIR / "classify.mjs"), str(copy), "hf", "q8", str(tmp_path / "texts.json")],
                          capture_output=True, text=True, timeout=300, cwd=JS_DIR)
    assert proc.returncode != 0 and "model_quantized.onnx" in proc.stderr


def test_model_card_parses_with_metrics(built):
    from huggingface_hub import ModelCard

    _, bundle, meta = built
    card = ModelCard.load(bundle / "hf" / "README.md")
    assert card.data.pipeline_tag == "text-classification" and card.data.library_name == "transformers.js"
    got = {(r.metric_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    for path, entry in meta["hf_layout"]["onnx"].items():
        assert got[(f"Accuracy ({path}, {entry['variant']})", "accuracy")] == round(entry["accuracy"], 4)
        assert got[(f"Macro-F1 ({path}, {entry['variant']})", "f1")] == round(entry["macro_f1"], 4)
    assert {r.dataset_split for r in card.data.eval_results} == {"test"}
    assert all(r.task_type == "text-classification" for r in card.data.eval_results)
    assert meta["hf_layout"]["model_card"] == "README.md"
    assert str(bundle.parent) not in card.content  # no build-machine folder in a file meant for publishing


def _ops_run_by(ort_file: Path, names: list[str], tmp_path: Path) -> set[str]:
    """Operator types of the nodes an ONNX Runtime session over the .ort file executes (from its profile)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "profile")
    s = ort.InferenceSession(str(ort_file), so, providers=["CPUExecutionProvider"])
    x = np.array([[2, 9, 10, 11, 3, 0]], dtype=np.int64)
    mask = (x != 0).astype(np.int64)
    s.run(None, dict(zip(names, (x, mask))))
    events = json.loads(Path(s.end_profiling()).read_text())
    return {e["args"]["op_name"] for e in events if e.get("cat") == "Node" and "op_name" in e.get("args", {})}


def test_required_operators_equal_the_ort_files_ops(built, tmp_path):
    from export.required_ops import operators

    _, bundle, meta = built
    entry = meta["required_operators"]
    ort_file = bundle / entry["model_file"]
    assert entry["model_file"] == meta["models"]["ort"]["file"]
    listed = operators(bundle / entry["file"])  # read by ONNX Runtime's own build-config parser
    assert listed == entry["operators"]
    flat = {op for by_opset in listed.values() for ops in by_opset.values() for op in ops}
    ran = _ops_run_by(ort_file, [i["name"] for i in meta["models"]["ort"]["inputs"]], tmp_path)
    assert flat == ran
    text = (bundle / entry["file"]).read_text()
    assert f"# - {entry['model_file']}" in text and str(bundle) not in text
    readme = (bundle / "README.md").read_text()
    assert f"--include_ops_by_config /path/to/bundle/{entry['file']}" in readme
    assert "--enable_reduced_operator_type_support" in readme and "--minimal_build" in readme


def test_lstm_bundle_has_no_hf_layout_but_says_why(built, tmp_path):
    """A non-transformers model still bundles (with its operator config); the HF layout's absence is explained."""
    from dataclasses import replace

    from pipeline.stage import run

    cfg, _, _ = built
    runs = tmp_path / "runs"
    shutil.copytree(cfg.run_dir, runs / cfg.run.name)
    lstm = replace(cfg, run=replace(cfg.run, runs_dir=str(runs)),
                   bundle=replace(cfg.bundle, model="lstm", variant="int8-dynamic", dist_dir=str(tmp_path / "dist")))
    run(lstm, ["bundle"], force=("bundle",))
    meta = json.loads((tmp_path / "dist" / cfg.run.name / "metadata.json").read_text())
    assert "rnn-classifier" in meta["hf_layout"]["skipped"] and not (tmp_path / "dist" / cfg.run.name / "hf").exists()
    assert meta["required_operators"]["model_file"] == "model/lstm-int8-dynamic.ort"
    assert "DynamicQuantizeLSTM" in meta["required_operators"]["operators"]["com.microsoft"]["1"]
    readme = (tmp_path / "dist" / cfg.run.name / "README.md").read_text()
    assert "Hugging Face layout" in readme and "Not written for this model" in readme
