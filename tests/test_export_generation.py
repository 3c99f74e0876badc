"""Generation models through the export mechanics both tasks share (tiny random-weight decoder and LSTM LM):
int8 quantization that honours quantize.per_channel, and Core ML compression without scikit-learn."""
from __future__ import annotations

import platform

import numpy as np
import pytest
import torch

from pipeline.config import QuantizeSection


@pytest.fixture(scope="module")
def decoder_graph(tmp_path_factory):
    """A tiny Llama (GQA) exported with its KV cache, as the generation quantize stage exports the student."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from export.onnx_export import export_decoder

    folder = tmp_path_factory.mktemp("decoder")
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=True)).eval()
    hf.save_pretrained(folder / "hf")
    return export_decoder(folder / "hf", folder / "fp32", 17)


def _weight_scales(path) -> dict[str, tuple[int, ...]]:
    """Shape of every scale the quantizer wrote (dynamic int8: weights only): () per tensor, (channels,) per
    channel."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t).shape for t in model.graph.initializer if t.name.endswith("_scale")}


def test_generation_int8_honours_per_channel(decoder_graph, tmp_path):
    from pipeline.tasks.generation.ship import variant_graph

    made = {pc: variant_graph("int8-dynamic", decoder_graph, tmp_path / str(pc), "student",
                              QuantizeSection(per_channel=pc)) for pc in (True, False)}
    per_channel, per_tensor = _weight_scales(made[True]), _weight_scales(made[False])
    assert per_channel and set(per_channel) == set(per_tensor)  # the same weights quantized either way
    assert all(shape == () for shape in per_tensor.values()), per_tensor
    wide = [n for n, shape in per_channel.items() if len(shape) == 1 and shape[0] > 1]
    assert len(wide) >= 2 * 7, per_channel  # q/k/v/o and gate/up/down projections of both layers
    assert made[True].read_bytes() != made[False].read_bytes()
    assert variant_graph("fp32", decoder_graph, tmp_path / "fp32", "student", QuantizeSection()) == decoder_graph


@pytest.fixture(scope="module")
def lstm_package(tmp_path_factory):
    """A tiny LSTM LM converted, compressed to 4-bit palettized weights and saved as the export stage does."""
    from distill.lstm import LSTMLM, LSTMLMConfig
    from export.coreml import compress, save
    from export.coreml_stateful import convert_lstm_lm

    torch.manual_seed(0)
    model = LSTMLM(LSTMLMConfig(vocab_size=300, embed_dim=16, hidden=64, layers=1)).eval()
    ml, how = convert_lstm_lm(model, 16, "iOS17")
    path = tmp_path_factory.mktemp("coreml") / "lstm-palettized-4bit.mlpackage"
    size = save(compress(ml, "palettized-4bit"), path, {"model": "lstm", "variant": "palettized-4bit",
                                                        "design": how})
    return model, path, size


def test_generation_coreml_palettized_4bit_needs_no_scikit_learn(lstm_package):
    from export.coreml import spec_summary

    _, path, size = lstm_package
    with pytest.raises(ImportError):  # what coremltools' own k-means mode would need
        import sklearn  # noqa: F401
    s = spec_summary(path)  # read back from disk
    assert s["inputs"] == ["input_ids", "h0", "c0"] and s["outputs"] == ["logits", "h", "c"]
    assert s["metadata"]["variant"] == "palettized-4bit" and s["metadata"]["model"] == "lstm"
    assert s["ops"].get("constexpr_lut_to_dense", 0) >= 2, s["ops"]  # the embedding and the LSTM weights
    assert size > 0


@pytest.mark.skipif(platform.system() != "Darwin", reason="Core ML prediction runs only on macOS")
def test_generation_coreml_palettized_4bit_predicts_like_pytorch(lstm_package):
    import coremltools as ct

    model, path, _ = lstm_package
    ids = torch.tensor([[5, 17, 42, 7]])
    h, c = model.zero_state(1)
    want = model(ids, h, c)[0].detach().numpy()
    got = ct.models.MLModel(str(path)).predict({"input_ids": ids.numpy().astype(np.int32), "h0": h.numpy(),
                                                "c0": c.numpy()})["logits"]
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.75
