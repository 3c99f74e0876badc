import pytest
import torch

from distill.augment import Augmenter
from distill.batching import encode
from distill.lstm import RNNClassifier, RNNConfig, reverse_valid
from distill.student import check_layer_map, default_layer_map
from pipeline.config import AugmentSection
from pipeline.errors import PipelineError


def test_reverse_valid_keeps_padding_in_place():
    x = torch.arange(10.0).view(2, 5, 1)
    out = reverse_valid(x, torch.tensor([3, 5]))
    assert out[0, :, 0].tolist() == [2.0, 1.0, 0.0, 3.0, 4.0]
    assert out[1, :, 0].tolist() == [9.0, 8.0, 7.0, 6.0, 5.0]


@pytest.mark.parametrize("cell,layers", [("lstm", 1), ("gru", 2)])
def test_rnn_padding_does_not_change_the_result(cell, layers, tmp_path):
    torch.manual_seed(0)
    m = RNNClassifier(RNNConfig(vocab_size=20, num_labels=3, embed_dim=8, hidden=8, layers=layers, cell=cell)).eval()
    ids = torch.tensor([[5, 6, 7]])
    alone = m(ids, torch.ones_like(ids))
    padded = m(torch.tensor([[5, 6, 7, 0, 0]]), torch.tensor([[1, 1, 1, 0, 0]]))
    torch.testing.assert_close(alone, padded, atol=1e-6, rtol=0)
    m.save(tmp_path / "m")
    again = RNNClassifier.load(tmp_path / "m")
    torch.testing.assert_close(again(ids, torch.ones_like(ids)), alone)


def test_layer_maps():
    assert default_layer_map(4, 12) == [3, 6, 9, 12]
    assert default_layer_map(2, 6) == [3, 6]
    assert default_layer_map(4, 6) == [2, 3, 5, 6]
    assert check_layer_map([], 2, 6) == [3, 6]
    with pytest.raises(PipelineError, match="has 3 entries but the student has 2"):
        check_layer_map([1, 2, 3], 2, 6)
    with pytest.raises(PipelineError, match="teacher has layers 1..6"):
        check_layer_map([1, 7], 2, 6)


def test_augmenter_is_seeded_and_makes_new_texts():
    texts = ["the movie was really good fun", "a bad sad day", "my car is on the road today"]
    cfg = AugmentSection(copies=3, p_mask=0.2, p_replace=0.2, p_ngram=0.3)
    a = Augmenter(texts, cfg, "[MASK]", 1).augment(texts)
    b = Augmenter(texts, cfg, "[MASK]", 1).augment(texts)
    assert a == b and len(a) >= 6
    assert not set(a) & set(texts) and len(set(a)) == len(a)
    vocab = {w for t in texts for w in t.split()} | {"[MASK]"}
    assert all(set(t.split()) <= vocab for t in a)


def test_encode_truncates_or_refuses_long_texts(tiny_bert_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    ids, n = encode(tok, ["good " * 20, "bad"], 8)
    assert n == 1 and len(ids[0]) == 8 and ids[0][-1] == tok.sep_token_id
    with pytest.raises(PipelineError, match="longer than max_length=8"):
        encode(tok, ["good " * 20], 8, "error")


def test_plain_models_save_and_load_alike(tmp_path):
    """RNN classifier, LSTM LM and NPU student share one save/load; a broken folder is one error."""
    from distill.lstm import LSTMLM, LSTMLMConfig

    torch.manual_seed(0)
    m = LSTMLM(LSTMLMConfig(vocab_size=30, embed_dim=8, hidden=16, layers=2)).eval()
    m.save(tmp_path / "lm")
    back = LSTMLM.load(tmp_path / "lm")
    assert back.config == m.config and all(torch.equal(a, b) for a, b in zip(m.state_dict().values(),
                                                                             back.state_dict().values()))
    (tmp_path / "lm" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(PipelineError, match="the checkpoint in .* is missing or corrupt"):
        LSTMLM.load(tmp_path / "lm")
