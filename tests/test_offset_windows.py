"""lm.offset_windows: a training split with fewer windows than lm.teacher_windows has the teacher also score
windows shifted by half a context, so a small corpus still gets the teacher's share; a large one is untouched."""
from __future__ import annotations

import numpy as np

from pipeline.config import config_from_dict
from tests.test_gpt_pipeline import corpus, gen_cfg, tiny_llama_dir  # noqa: F401  (module fixtures)


def test_shifted_windows_start_half_a_context_later_and_repeat_no_plain_window():
    from pipeline.tasks.generation.data import shifted_windows, windows

    stream = np.arange(100, dtype=np.int64)
    plain = windows(stream, 8, "t")  # starts 0, 8, ..., 88
    shifted = shifted_windows(stream, 8, 50)  # asks for more than there are: all of them
    assert [int(w[0]) for w in shifted] == list(range(4, 92, 8))  # 4, 12, ..., 84: each fits a whole window
    assert shifted.shape == (11, 9) and all(np.array_equal(w, np.arange(w[0], w[0] + 9)) for w in shifted)
    assert not {tuple(w) for w in shifted} & {tuple(w) for w in plain}
    assert [int(w[0]) for w in shifted_windows(stream, 8, 3)] == [4, 44, 84]  # evenly spaced over the stream
    assert shifted_windows(stream, 8, 0).shape == (0, 9)


def test_a_small_corpus_gets_the_teachers_share_from_shifted_windows(tmp_path, corpus, tiny_llama_dir):
    from pipeline.manifest import read_manifest
    from pipeline.stage import run

    def logits(offset: bool, teacher_windows: int, name: str) -> tuple[dict, np.ndarray]:
        cfg = config_from_dict(gen_cfg(tmp_path / name, corpus, tiny_llama_dir, lm__teacher_windows=teacher_windows,
                                       lm__extra_windows=0, lm__offset_windows=offset), "tiny-gen")
        run(cfg, ["logits"])
        return read_manifest(cfg.run_dir / "logits")["summary"], np.load(cfg.run_dir / "logits" / "windows.npy")

    plain, plain_win = logits(False, 5000, "off")
    n = plain["windows"]  # every plain window of the split, short of 5000
    assert plain["offset_windows"] == 0 and plain["window_shortfall"]
    want = n + 10
    filled, win = logits(True, want, "on")
    assert (filled["windows"], filled["offset_windows"]) == (want, 10) and filled["window_shortfall"] == []
    assert np.array_equal(win[:n], plain_win)  # the plain windows first, as without the option
    assert not {tuple(w) for w in win[n:]} & {tuple(w) for w in plain_win}
    # enough plain windows: the option changes nothing
    few_off, few_off_win = logits(False, n // 2, "few-off")
    few_on, few_on_win = logits(True, n // 2, "few-on")
    assert few_on["offset_windows"] == 0 and np.array_equal(few_on_win, few_off_win)
