"""The generation training budget in steps (distill.steps / baseline.steps): fixed whatever the corpus size,
the same batches as the epochs it replaces, validated at load time."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.config import BaselineSection, DistillSection, config_from_dict
from pipeline.errors import PipelineError


def _windows(n: int, vocab: int = 20, context: int = 8) -> np.ndarray:
    return np.random.default_rng(n).integers(0, vocab, size=(n, context + 1)).astype(np.int64)


def _tiny_llama(vocab: int = 20):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16))


def test_steps_stay_as_set_when_the_corpus_shrinks():
    """The budget rule: with distill.steps / baseline.steps > 0 a smaller corpus trains the same number of
    steps (more passes over it); with 0 the epochs over the windows there are decide, as before."""
    from distill.baseline import build_lstm_lm, train_lstm_lm
    from distill.distiller import distill_lm

    d = DistillSection(epochs=1.0, steps=7, batch_size=4, lr=1e-3)
    b = BaselineSection(embed_dim=8, hidden=8, epochs=1.0, steps=7, batch_size=4, lr=1e-3)
    for n in (40, 12, 3):  # the corpus shrinks below one batch
        win = _windows(n)
        got = distill_lm(_tiny_llama(), win, None, None, d, seed=1)
        assert (got["steps"], got["windows"]) == (7, n)
        assert got["passes"] == round(7 * 4 / n, 3)
        assert train_lstm_lm(build_lstm_lm(b, 20), win, b, seed=1)["steps"] == 7
    # 0 = epochs: the budget follows the corpus (ceil(12 / 4) = 3 steps per epoch)
    legacy = DistillSection(epochs=2.0, steps=0, batch_size=4, lr=1e-3)
    assert distill_lm(_tiny_llama(), _windows(12), None, None, legacy, seed=1)["steps"] == 6


def test_a_step_budget_equal_to_the_epochs_gives_the_same_batches():
    """The demo's guarantee: 940 steps over its 7,512 windows are exactly its former 2 epochs, batch by batch."""
    from distill.batching import window_batches

    by_epochs, n1 = window_batches(7512, 16, 2.0, seed=13)
    by_steps, n2 = window_batches(7512, 16, 99.0, seed=13, steps=940)
    assert n1 == n2 == 940
    a, b = list(by_epochs), list(by_steps)
    assert len(a) == len(b) == 940 and all(np.array_equal(x, y) for x, y in zip(a, b))
    # a longer budget starts with the same batches (one seeded stream)
    longer, _ = window_batches(7512, 16, 2.0, seed=13, steps=1000)
    assert all(np.array_equal(x, y) for x, y in zip(a, list(longer)[:940]))


@pytest.mark.parametrize("section", ["distill", "baseline"])
def test_a_negative_step_budget_is_one_clear_error(section):
    raw = {"run": {"task": "generation"}, section: {"steps": -5}}
    with pytest.raises(PipelineError, match=f"'{section}.steps' = -5 must be >= 0"):
        config_from_dict(raw, "c.toml")


def test_classification_rejects_a_step_budget():
    with pytest.raises(PipelineError, match="'distill.steps' = 100 sets the training budget of run.task = "
                                            "\"generation\" only; classification trains for 'distill.epochs'"):
        config_from_dict({"run": {"task": "classification"}, "distill": {"steps": 100}}, "c.toml")
    assert config_from_dict({"run": {"task": "classification"}}, "c.toml").distill.steps == 0


def test_the_search_schedules_a_share_of_the_step_budget():
    """make search trains each candidate for search.fraction of the budget: with distill.steps set, its rungs
    are that share of the steps as epochs over the cached windows (940 steps over 7,512 windows = the demo's
    former 2 epochs), and each rung trains its own share, not the whole step budget."""
    from pipeline.tasks.generation.search import Candidates

    def rungs(distill: dict, n_windows: int, fraction: float) -> list[float]:
        c = object.__new__(Candidates)  # rungs() needs only the config and the training windows
        c.cfg = config_from_dict({"run": {"task": "generation"}, "distill": {"batch_size": 16, **distill}}, "c.toml")
        c.windows = np.zeros((n_windows, 9), dtype=np.int64)
        return c.rungs(fraction)

    assert rungs({"steps": 940}, 7512, 0.34) == rungs({"epochs": 2.0}, 7512, 0.34) == [0.68]
    assert rungs({"steps": 940}, 3760, 0.5) == pytest.approx([1.0, 1.0])  # half the windows: twice the passes



@pytest.mark.parametrize("stream", ["epochs", "windows"])
def test_no_data_gives_no_batches_instead_of_waiting_forever(stream):
    """A pass over no data is empty: the stream used to start pass after pass, forever, so a trainer given no
    data hung instead of reporting that no training step ran."""
    from distill.batching import epoch_stream, window_batches

    batches = epoch_stream(0, [], 8, 3.0, seed=1) if stream == "epochs" else window_batches(0, 8, 3.0, 1, steps=5)[0]
    assert list(batches) == []
