"""One padding rule for Core ML packages (export/padding.py), used by the export check, verify-bundle and the
Swift sample; verify-bundle's Core ML step run against a fake package that accepts only Core ML's enumerated
shapes (coremltools predicts only on macOS, so the real one cannot run here)."""
from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from test_bundle_stage import bundled_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return bundled_run(tmp_path_factory)


def test_padding_rule():
    from export.padding import allowed_lengths, pad, padded_length
    from pipeline.errors import PipelineError

    assert allowed_lengths([16, 32, 64, 128], 64) == [16, 32, 64]  # nothing past max_length
    assert allowed_lengths([32, 16], 40) == [16, 32, 40]  # max_length itself always fits
    assert [padded_length(n, [16, 32]) for n in (1, 16, 17, 32)] == [16, 16, 32, 32]
    with pytest.raises(PipelineError, match=r"33 token ids do not fit .*\[16, 32\]"):
        padded_length(33, [16, 32])
    x, m = pad([101, 7, 102], [16, 32], 5)
    assert x.shape == m.shape == (1, 16) and x.dtype == m.dtype == np.int32
    assert x[0].tolist() == [101, 7, 102] + [5] * 13 and m[0].tolist() == [1, 1, 1] + [0] * 13


class EnumeratedShapesModel:
    """Stands in for coremltools.models.MLModel of a package exported with enumerated lengths: like Core ML it
    refuses any other shape or dtype; on an accepted input it runs the bundle's ONNX twin on the real tokens."""

    def __init__(self, onnx_path: Path, lengths: list[int], pad_id: int):
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        self.lengths, self.pad_id, self.calls = lengths, pad_id, []

    def predict(self, feed: dict) -> dict:
        ids, mask = feed["input_ids"], feed["attention_mask"]
        if set(feed) != {"input_ids", "attention_mask"} or ids.dtype != np.int32 or mask.dtype != np.int32:
            raise RuntimeError(f"Core ML: inputs {sorted(feed)} / {ids.dtype} do not match the model description")
        if ids.shape != mask.shape or ids.shape[0] != 1 or ids.shape[1] not in self.lengths:
            raise RuntimeError(f"Core ML: shape {ids.shape} is not one of the enumerated shapes "
                               f"{[(1, n) for n in self.lengths]}")
        n = int(mask.sum())
        assert mask[0, :n].all() and (ids[0, n:] == self.pad_id).all(), "padding is not on the right with pad_id"
        self.calls.append(ids.shape[1])
        real = {"input_ids": ids[:, :n].astype(np.int64), "attention_mask": mask[:, :n].astype(np.int64)}
        return {"logits": self.session.run(["logits"], real)[0]}  # (1, C)


def test_verify_pads_token_ids_to_the_packages_lengths(built, tmp_path, monkeypatch):
    import coremltools as ct

    from export.coreml import sequence_shapes
    from pipeline.verify import verify_bundle

    _, cfg = built
    bundle = tmp_path / "bundle"
    shutil.copytree(Path(cfg.bundle.dist_dir) / "tiny", bundle)
    meta = json.loads((bundle / "metadata.json").read_text())
    cm = meta["models"]["coreml"]
    # the shapes the export stage compiles with enumerated lengths for this config
    shape, _ = sequence_shapes("enumerated", list(cfg.export.coreml_lengths), ct.target.iOS18, meta["max_length"])
    lengths = sorted(s.shape[1] for s in shape.shapes)
    assert cm["sequence_lengths"] == lengths == [16, 32]
    model = EnumeratedShapesModel(bundle / meta["models"]["onnx"]["file"], lengths, cm["pad_id"])
    samples = json.loads((bundle / "samples.json").read_text())
    short = samples[0]["token_ids"]
    assert len(short) not in lengths
    with pytest.raises(RuntimeError, match="not one of the enumerated shapes"):  # what unpadded ids meet
        model.predict({"input_ids": np.array([short], np.int32), "attention_mask": np.ones((1, len(short)), np.int32)})

    fake = types.ModuleType("coremltools")
    fake.models = types.SimpleNamespace(MLModel=lambda path: model)
    monkeypatch.setitem(sys.modules, "coremltools", fake)
    monkeypatch.setattr(sys, "platform", "darwin")
    summary = verify_bundle(bundle)
    assert summary["models"]["coreml"]["labels_match"] == len(samples)
    assert model.calls == [16 if len(s["token_ids"]) <= 16 else 32 for s in samples]


def test_a_package_that_outputs_nan_fails_the_predict_check(tiny_bert_dir, monkeypatch):
    """np.argmax of a NaN row is 0: a Core ML package answering NaN agreed with every text the PyTorch model
    labels class 0 and passed the export stage's argmax check. NaN logits agree with nothing."""
    from transformers import AutoTokenizer

    import export.coreml as C

    class NanModel:
        def predict(self, feed: dict) -> dict:
            return {"logits": np.full((1, 2), np.nan, np.float32)}

    fake = types.ModuleType("coremltools")
    fake.models = types.SimpleNamespace(MLModel=lambda path: NanModel())
    monkeypatch.setitem(sys.modules, "coremltools", fake)
    monkeypatch.setattr(C, "can_predict", lambda: (True, ""))
    ref = lambda ids, mask: np.array([[1.0, 0.0]], np.float32)  # noqa: E731  (class 0 on every text)
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    check = C.predict_check(Path("x.mlpackage"), ref, tok, ["good day", "a bad film"], 16, [16], 0.9, "student int8")
    assert check["passed"] is False and check["value"] == 0.0
    assert check["reason"].startswith("student int8: Core ML argmax agrees with PyTorch on only 0.0% of 2 test texts")


def test_swift_sample_states_the_same_lengths_and_pad_id(built):
    _, cfg = built
    bundle = cfg.run_dir / "bundle"
    cm = json.loads((bundle / "metadata.json").read_text())["models"]["coreml"]
    swift = (bundle / "ios" / "PocketformerClassifier.swift").read_text()
    assert f"static let lengths: [Int] = [{', '.join(map(str, cm['sequence_lengths']))}]" in swift
    assert "Self.lengths.first(where: { $0 >= ids.count })" in swift
    assert f"i < ids.count ? ids[i] : {cm['pad_id']}" in swift
