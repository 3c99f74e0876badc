"""Quality metrics, one per task: accuracy and macro F1 for classification (written out, no extra
dependency), perplexity and greedy continuations for generation (torch, imported when used).

Generation models are all scored on the teacher's tokenization, on the same events: the next teacher
token. A model over a restricted vocabulary gives a token it does not keep the probability of its "other"
id divided by the number of tokens "other" stands for, so its distribution still covers the full teacher
vocabulary and perplexities compare.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.errors import PipelineError

if TYPE_CHECKING:  # torch is imported where the generation metrics run
    import torch

# The quality columns a task may declare (pipeline.task.Task.quality) -> whether a higher value is better. The
# retention ratios, the plots' axes and their peer-gap marks read the direction here, so a task with another
# metric adds one entry, not a branch in each of them.
HIGHER_IS_BETTER = {"accuracy": True, "perplexity": False}

# --- classification ---------------------------------------------------------------------------------


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float((pred == gold).mean()) if len(gold) else float("nan")


def macro_f1(pred: np.ndarray, gold: np.ndarray, num_labels: int) -> float:
    """Mean over labels of F1; a label absent from both pred and gold scores 0 only if it is in gold."""
    f1s = []
    for c in range(num_labels):
        tp = int(((pred == c) & (gold == c)).sum())
        fp = int(((pred == c) & (gold != c)).sum())
        fn = int(((pred != c) & (gold == c)).sum())
        if tp + fp + fn == 0:
            continue
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1s)) if f1s else float("nan")


def scores(logits: np.ndarray, gold: np.ndarray, num_labels: int) -> dict[str, float]:
    pred = logits.argmax(-1)
    return {"accuracy": accuracy(pred, gold), "macro_f1": macro_f1(pred, gold, num_labels)}


# --- generation -------------------------------------------------------------------------------------


@dataclass
class LM:
    """One generation model behind one interface. kind: "hf" (transformers causal LM) or "lstm"."""

    name: str
    kind: str
    model: torch.nn.Module
    vmap: object | None = None  # distill.vocab.VocabMap for restricted-vocabulary models
    max_positions: int = 0  # 0 = no limit

    def to_model_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return ids if self.vmap is None else self.vmap.to_student(ids)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Model-id logits for teacher ids (B, T) -> (B, T, V_model), from an empty state."""
        import torch

        with torch.no_grad():
            x = self.to_model_ids(ids)
            if self.kind == "lstm":
                h, c = self.model.zero_state(x.shape[0])
                return self.model(x, h, c)[0]
            return self.model(input_ids=x).logits

    def target_logprobs(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(next teacher token): logits (B, T, V_model), targets (B, T) teacher ids -> (B, T)."""
        import torch
        import torch.nn.functional as F

        logp = F.log_softmax(logits.float(), -1)
        lp = logp.gather(-1, self.to_model_ids(targets).unsqueeze(-1)).squeeze(-1)  # (B, T)
        if self.vmap is not None and self.vmap.has_other:
            unkept = torch.from_numpy(self.vmap.lookup())[targets] == self.vmap.other_id
            lp = torch.where(unkept, lp - math.log(max(1, self.vmap.n_unkept)), lp)
        return lp


def perplexity(lm: LM, windows: np.ndarray, batch_size: int) -> dict:
    """Perplexity over windows (N, T+1) of teacher ids (inputs [:-1], targets [1:])."""
    import torch

    total, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        x = torch.from_numpy(windows[i: i + batch_size])  # (B, T + 1)
        lp = lm.target_logprobs(lm.logits(x[:, :-1]), x[:, 1:])  # (B, T)
        total -= lp.double().sum().item()
        count += lp.numel()
    nll = total / max(1, count)
    return {"perplexity": math.exp(nll), "nll_per_token": nll, "tokens": count}


def greedy(lm: LM, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after prompt (teacher ids in, teacher ids out), with the KV cache / LSTM state.
    A restricted model never picks its "other" id: it names no single token."""
    import torch

    if not prompt:
        raise PipelineError("a generation prompt is empty; give it some text")
    if lm.max_positions and len(prompt) + n > lm.max_positions:
        raise PipelineError(f"{lm.name}: prompt of {len(prompt)} tokens + {n} new tokens (lm.sample_tokens for the "
                            f"samples, lm.check_tokens for the export checks) exceeds the model's {lm.max_positions} "
                            f"positions (lm.max_cache for the students, the teacher's own table for it); shorten the "
                            f"prompt or generate fewer tokens")
    def forward(x: torch.Tensor, state):
        """(logits, the state to carry on: the LSTM's (h, c) or the KV cache)."""
        if lm.kind == "lstm":
            logits, h, c = lm.model(x, *(state or lm.model.zero_state(1)))
            return logits, (h, c)
        res = lm.model(input_ids=x, past_key_values=state, use_cache=True)
        return res.logits, res.past_key_values

    with torch.no_grad():
        cut = lm.vmap.other_id if lm.vmap is not None and lm.vmap.has_other else None
        logits, state = forward(lm.to_model_ids(torch.tensor([prompt])), None)  # prompt (1, P)
        out: list[int] = []
        for step in range(n):
            out.append(int(logits[0, -1, :cut].argmax()))  # (V,) without "other"
            if step + 1 == n:
                break
            logits, state = forward(torch.tensor([[out[-1]]]), state)
    return out if lm.vmap is None else lm.vmap.to_teacher(out).tolist()


def continued(tokenizer, prompt: str, prompt_ids: list[int], ids: list[int]) -> str:
    """The prompt as written, then the continuation as the tokenizer joins it to the prompt's ids: a word-level
    or WordPiece tokenizer puts a space between words that decoding the continuation alone leaves out."""
    head, whole = tokenizer.decode(prompt_ids), tokenizer.decode(prompt_ids + ids)
    tail = whole[len(head):] if whole.startswith(head) else tokenizer.decode(ids)
    return prompt + (tail.lstrip() if prompt[-1:].isspace() else tail)  # a prompt's own trailing space counts


def samples_markdown(tokenizer, prompts: list[str], prompt_ids: list[list[int]],
                     continuations: dict[str, list[list[int]]]) -> str:
    """continuations: model name -> one list of teacher ids per prompt (prompt_ids: the prompts' ids)."""
    lines = ["# Greedy continuations of fixed prompts", ""]
    for i, prompt in enumerate(prompts):
        lines += [f"## Prompt {i + 1}", "", "```", prompt, "```", ""]
        for name, outs in continuations.items():
            lines += [f"**{name}**", "", "```", continued(tokenizer, prompt, prompt_ids[i], outs[i]), "```", ""]
    return "\n".join(lines)
