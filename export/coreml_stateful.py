"""Core ML conversion of the generation models, which carry state from one call to the next.

Student: a stateful KV-cache model (iOS 18 states, coremltools >= 8): the key/value caches are Core ML
states the model updates in place, inputs are input_ids (1, T) and causal_mask (1, 1, T, past + T), so one
model serves the prompt and every decode step, like Apple's Llama/Mistral conversion example (the config
refuses an earlier deployment target for the student: pipeline/tasks/generation/checks.py). LSTM LM:
input_ids (1, T) plus h0/c0 in, logits/h/c out.

Targets, weight compression and saving are export/coreml.py's, shared with the classifiers. The stage
checks the stateful module against transformers (same greedy tokens); Core ML predicts only on macOS.
"""
from __future__ import annotations

import torch
from torch import nn

from export.coreml import MASK_FILL, deployment_target, keep_interrupts


class StatefulLlama(nn.Module):
    """A Llama-family transformers model re-run with its KV cache in buffers (Core ML states).

    forward(input_ids (1, T), causal_mask (1, 1, T, E)) -> logits (1, T, V); E = past + T, and the new
    keys/values are written into positions [E - T, E) of the caches.
    """

    def __init__(self, hf, max_len: int):
        super().__init__()
        self.hf = hf.eval()
        c = hf.config
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        shape = (c.num_hidden_layers, 1, self.kv_heads, max_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def _rope(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotary embedding with the half width as a Python constant (transformers' rotate_half reads it
        from the tensor's shape, which the Core ML converter cannot turn into an int)."""
        half = self.head_dim // 2
        rotated = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
        return t * cos + rotated * sin

    def forward(self, input_ids: torch.Tensor, causal_mask: torch.Tensor) -> torch.Tensor:
        m = self.hf.model
        T, end = input_ids.shape[1], causal_mask.shape[-1]
        start = end - T
        x = m.embed_tokens(input_ids)  # (1, T, D)
        pos = torch.arange(start, end, dtype=torch.int64).unsqueeze(0)  # (1, T)
        cos, sin = m.rotary_emb(x, pos)  # (1, T, d) each
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (1, 1, T, d)
        groups = self.heads // self.kv_heads
        for i, layer in enumerate(m.layers):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(1, T, self.heads, self.head_dim).transpose(1, 2)  # (1, H, T, d)
            k = a.k_proj(h).view(1, T, self.kv_heads, self.head_dim).transpose(1, 2)  # (1, Hkv, T, d)
            v = a.v_proj(h).view(1, T, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            self.k_cache[i, :, :, start:end] = k
            self.v_cache[i, :, :, start:end] = v
            keys = self.k_cache[i, :, :, :end].repeat_interleave(groups, dim=1)  # (1, H, E, d)
            vals = self.v_cache[i, :, :, :end].repeat_interleave(groups, dim=1)
            o = torch.nn.functional.scaled_dot_product_attention(q, keys, vals, attn_mask=causal_mask)  # (1, H, T, d)
            x = x + a.o_proj(o.transpose(1, 2).reshape(1, T, self.heads * self.head_dim))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.hf.lm_head(m.norm(x))  # (1, T, V)


def causal_mask(T: int, end: int) -> torch.Tensor:
    """(1, 1, T, end): query t (at position end - T + t) sees keys up to its own position."""
    q = torch.arange(end - T, end).unsqueeze(1)  # (T, 1)
    k = torch.arange(end).unsqueeze(0)  # (1, end)
    return torch.where(k <= q, 0.0, MASK_FILL).view(1, 1, T, end)


@torch.no_grad()
def stateful_greedy(module: StatefulLlama, prompt: list[int], n: int, cut: int | None) -> list[int]:
    """Greedy decode through the stateful module (the computation Core ML runs), model ids."""
    module.k_cache.zero_()
    module.v_cache.zero_()
    logits = module(torch.tensor([prompt]), causal_mask(len(prompt), len(prompt)))
    out = [int(logits[0, -1, :cut].argmax())]
    while len(out) < n:
        end = len(prompt) + len(out)
        logits = module(torch.tensor([[out[-1]]]), causal_mask(1, end))
        out.append(int(logits[0, -1, :cut].argmax()))
    return out


def convert_student(hf, max_len: int, target_name: str):
    """(mlmodel, how): the stateful KV-cache model (target iOS18 / macOS15 or later)."""
    import coremltools as ct

    module = StatefulLlama(hf, max_len).eval()
    ex = (torch.zeros((1, 2), dtype=torch.int64), causal_mask(2, 2))
    traced = torch.jit.trace(module, ex)
    T = ct.RangeDim(1, max_len, default=1)
    E = ct.RangeDim(1, max_len, default=1)
    shape = tuple(module.k_cache.shape)
    with keep_interrupts():
        ml = ct.convert(traced, inputs=[ct.TensorType("input_ids", shape=(1, T), dtype=int),
                                        ct.TensorType("causal_mask", shape=(1, 1, T, E))],
                        outputs=[ct.TensorType("logits")],
                        states=[ct.StateType(ct.TensorType(shape=shape), name=n) for n in ("k_cache", "v_cache")],
                        minimum_deployment_target=deployment_target(target_name), convert_to="mlprogram")
    return ml, f"stateful KV cache ({target_name} states), up to {max_len} positions"


def convert_lstm_lm(model, max_len: int, target_name: str):
    """LSTM LM: only torch.jit.trace converts an LSTM (torch.export fails)."""
    import coremltools as ct

    model = model.eval()
    h, c = model.zero_state(1)
    traced = torch.jit.trace(model, (torch.zeros((1, 4), dtype=torch.int64), h, c))
    with keep_interrupts():
        ml = ct.convert(traced, inputs=[ct.TensorType("input_ids", shape=(1, ct.RangeDim(1, max_len, default=1)),
                                                      dtype=int),
                                        ct.TensorType("h0", shape=tuple(h.shape)), ct.TensorType("c0", shape=tuple(c.shape))],
                        outputs=[ct.TensorType("logits"), ct.TensorType("h"), ct.TensorType("c")],
                        minimum_deployment_target=deployment_target(target_name), convert_to="mlprogram")
    return ml, f"LSTM with explicit state, 1..{max_len} tokens per call"
