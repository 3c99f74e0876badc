"""Numerical checks of an exported file against its source, on real test texts, and test-split scoring
through ONNX Runtime.

Check batches: the shortest, median and longest text alone (batch 1), then the rest in a fixed shuffled
order in batches of 8, so every batch mixes lengths and carries right padding, as an app's batches would.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from pipeline.errors import PipelineError

Batch = tuple[np.ndarray, np.ndarray]  # input_ids (B, T) int64, attention_mask (B, T) int64


@dataclass
class CheckInputs:
    batches: list[Batch]
    description: str
    texts: int = 0  # how many test texts the batches hold
    wanted: int = 0  # quantize.check_samples: a check on fewer texts refuses to pass (0 = no minimum)


# An agreement gate (bundle.min_agreement) passes on a share of the test split. Its rule for how many texts it
# needs: enough that one text weighs no more than the share it lets disagree, 1 / (1 - minimum) texts (0.99
# -> 100, 0.9 -> 10, 0.5 -> 2), and never more than AGREEMENT_TEXTS_CAP (a minimum of 1.0, every text, or
# 0.999 would ask for a test split larger than most). "100% of 1 text" passed a 99% gate before.
AGREEMENT_TEXTS_CAP = 100


def agreement_texts(minimum: float) -> int:
    """The test texts an agreement gate with this minimum share needs before it may pass."""
    if minimum >= 1:
        return AGREEMENT_TEXTS_CAP
    return min(AGREEMENT_TEXTS_CAP, max(1, math.ceil(1 / (1 - minimum) - 1e-9)))


def require_texts(n: int, needed: int, gate: str, setting: str, fix: str) -> None:
    """Refuse a gate that would be decided on fewer test texts than it was set to need."""
    if n < needed:
        raise PipelineError(f"{gate} would be decided on {n} test text(s), but {setting} needs at least {needed}: "
                            f"a pass on so few texts says nothing. Use a bigger test split (data.test_fraction, "
                            f"data.test_path), or {fix}")


def require_check_samples(n: int, wanted: int, what: str = "the export checks") -> None:
    require_texts(n, wanted, what, f"quantize.check_samples = {wanted}", f"set quantize.check_samples <= {n}")


def check_inputs(tokenizer, texts: Sequence[str], max_length: int, batch_size: int = 8, seed: int = 0,
                 wanted: int = 0) -> CheckInputs:
    """The check batches of texts; wanted (quantize.check_samples) is the fewest texts a check may pass on."""
    from distill.batching import encode, pad

    if not texts:
        raise PipelineError("export checks need test texts, but the test split is empty; set data.test_fraction > 0")
    require_check_samples(len(texts), wanted)
    ids, _ = encode(tokenizer, texts, max_length)
    pad_id = tokenizer.pad_token_id or 0
    by_len = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    singles = sorted({by_len[0], by_len[len(by_len) // 2], by_len[-1]})
    rest = [i for i in range(len(ids)) if i not in singles]
    random.Random(seed).shuffle(rest)
    groups = [[i] for i in singles] + [rest[i: i + batch_size] for i in range(0, len(rest), batch_size)]
    batches = [tuple(t.numpy() for t in pad([ids[i] for i in g], pad_id)) for g in groups]  # (B, T) each
    lengths = [len(s) for s in ids]
    n_padded = sum(1 for x, m in batches if x.shape[0] > 1 and (m == 0).any())
    desc = (f"{len(ids)} test texts, {min(lengths)}-{max(lengths)} tokens: {len(singles)} alone (batch 1), "
            f"{len(batches) - len(singles)} batches of up to {batch_size} ({n_padded} with padding)")
    return CheckInputs(batches, desc, len(ids), wanted)


def ort_runner(session) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    names = {i.name for i in session.get_inputs()}

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        return session.run(["logits"], {k: v for k, v in feed.items() if k in names})[0].astype(np.float32)

    return run  # (B, T), (B, T) -> (B, C)


def torch_runner(model: torch.nn.Module) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    model.eval()

    @torch.no_grad()
    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return model(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()

    return run


def _run_check(fn, ref_fn, inputs: CheckInputs, what: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """Both logits (N, C) on the check batches and the texts they saw (recorded with the result); fewer than
    quantize.check_samples refuses the check before anything runs."""
    require_check_samples(inputs.texts, inputs.wanted, f"the check of {what}")
    got, ref = (np.concatenate([f(x, m) for x, m in inputs.batches]) for f in (fn, ref_fn))
    return got, ref, {"texts": inputs.texts, "check_samples": inputs.wanted}


def agreeing(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(N,) True where logits rows got and ref (N, C) pick the same class and are both finite. numpy's argmax of
    a row holding a NaN is the NaN's index, so without the finiteness test a file that outputs NaN would agree
    with every reference whose top class is that index (class 0 on most texts of a skewed test split)."""
    finite = np.isfinite(got).all(-1) & np.isfinite(ref).all(-1)
    return finite & (got.argmax(-1) == ref.argmax(-1))


def max_abs_diff_check(fn, ref_fn, inputs: CheckInputs, atol: float, what: str) -> dict:
    got, ref, counted = _run_check(fn, ref_fn, inputs, what)
    value = float(np.abs(got - ref).max()) if np.isfinite(got).all() else float("inf")
    result = {"kind": "max_abs_diff", "value": value, "tolerance": atol, "passed": value <= atol,
              "inputs": inputs.description, **counted}
    if not result["passed"]:
        raise PipelineError(f"{what}: max abs difference of logits {value:.3g} exceeds the tolerance {atol:g} "
                            f"(quantize.lossless_atol) on {inputs.description}")
    return result


def argmax_check(fn, ref_fn, inputs: CheckInputs, minimum: float, what: str,
                 ref_name: str = "the fp32 PyTorch model", fatal: bool = True) -> dict:
    """Argmax agreement with the reference. Below the minimum: a PipelineError, or with fatal=False a
    result with passed False and the message as `reason` (a lossy file that is recorded and not used)."""
    # too few texts is the test split's problem, not the file's: always raised
    got, ref, counted = _run_check(fn, ref_fn, inputs, what)
    agree = float(agreeing(got, ref).mean())
    result = {"kind": "argmax_agreement", "value": agree, "tolerance": minimum, "passed": agree >= minimum,
              "inputs": inputs.description, "max_abs_diff": float(np.abs(got - ref).max()), **counted}
    if not result["passed"]:
        reason = (f"{what}: argmax agrees with {ref_name} on only {agree:.1%} of {inputs.description}; the "
                  f"minimum is {minimum:.1%} (quantize.min_argmax_agreement)")
        if fatal:
            raise PipelineError(reason)
        result["reason"] = reason
    return result


def failed_rows(rows: list[dict]) -> list[dict]:
    """The rows of a variants.json whose file failed its check: recorded with their numbers, never
    converted further, timed or shipped."""
    return [r for r in rows if r.get("status") == "failed"]


def predict(fn, tokenizer, texts: Sequence[str], max_length: int, batch_size: int = 64) -> np.ndarray:
    """Logits (N, C) in the order of texts, in length-sorted padded batches (as eval does for PyTorch)."""
    from distill.batching import bucketed_batches, encode, pad

    ids, _ = encode(tokenizer, texts, max_length)
    pad_id = tokenizer.pad_token_id or 0
    out: dict[int, np.ndarray] = {}
    for b in bucketed_batches([len(s) for s in ids], batch_size, None):
        x, m = pad([ids[i] for i in b], pad_id)
        out.update(zip(b, fn(x.numpy(), m.numpy())))  # text index -> its logits row
    return np.stack([out[i] for i in range(len(ids))])  # (N, C)


def check_greedy(torch_tokens: list[int], ort_tokens: list[int], name: str, must_match: bool,
                 sides: tuple[str, str] = ("PyTorch", "ONNX"), fix: str = "the export is wrong - try another quantize.opset") -> dict:
    """Compare two greedy decodes (generation); a file that must match and diverges fails the stage. sides names
    the reference and the checked decode, fix the remedy the error offers (the opset only helps an ONNX export)."""
    same = next((i for i, (a, b) in enumerate(zip(torch_tokens, ort_tokens)) if a != b), len(torch_tokens))
    result = {"tokens": len(torch_tokens), "matching_prefix": same, "match": same == len(torch_tokens)}
    if must_match and not result["match"]:
        ref, got = sides
        raise PipelineError(f"{name}: the {got} greedy decode diverges from {ref} at token {same + 1} of "
                            f"{len(torch_tokens)} ({ref} {torch_tokens[same]}, {got} {ort_tokens[same]}); {fix}")
    return result
