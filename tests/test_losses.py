import math

import pytest
import torch

from distill.losses import attention_mse, distill_loss, hidden_mse, logit_mse, soft_kl


def test_soft_kl_zero_when_equal_and_scaled_by_t_squared():
    torch.manual_seed(0)
    t = torch.randn(8, 3)
    assert soft_kl(t, t, 2.0).item() == pytest.approx(0.0, abs=1e-6)
    s = torch.randn(8, 3)
    # value equals T^2 * KL(softmax(t/T) || softmax(s/T)) computed by hand
    for T in (1.0, 4.0):
        p = torch.softmax(t / T, -1)
        kl = (p * (p.log() - torch.log_softmax(s / T, -1))).sum(-1).mean()
        assert soft_kl(s, t, T).item() == pytest.approx(T * T * kl.item(), rel=1e-5)


def test_distill_loss_mixes_hard_labels_only_where_present():
    torch.manual_seed(1)
    s, t = torch.randn(4, 3), torch.randn(4, 3)
    y = torch.tensor([0, 1, 2, 0])
    soft = soft_kl(s, t, 2.0).item()
    ce = torch.nn.functional.cross_entropy(s, y).item()
    assert distill_loss(s, t, y, alpha=1.0).item() == pytest.approx(soft)
    assert distill_loss(s, t, y, alpha=0.5).item() == pytest.approx(0.5 * soft + 0.5 * ce, rel=1e-5)
    has = torch.tensor([True, False, False, False])
    ce0 = torch.nn.functional.cross_entropy(s[:1], y[:1]).item()
    assert distill_loss(s, t, y, alpha=0.5, has_label=has).item() == pytest.approx(0.5 * soft + 0.5 * ce0, rel=1e-5)
    assert distill_loss(s, t, y, kind="mse", alpha=1.0).item() == pytest.approx(logit_mse(s, t).item())


def test_hidden_and_attention_transfer_ignore_padding():
    torch.manual_seed(2)
    proj = torch.nn.Linear(4, 6)
    s, t = torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    base = hidden_mse(proj(s), t, mask).item()
    t2 = t.clone()
    t2[0, 3:] += 100.0  # change only padded positions
    assert hidden_mse(proj(s), t2, mask).item() == pytest.approx(base)
    a = torch.softmax(torch.randn(2, 2, 5, 5), -1)
    b = torch.softmax(torch.randn(2, 3, 5, 5), -1)  # different head counts are fine
    assert attention_mse(a, a[:, :1].expand(-1, 3, -1, -1), mask).item() >= 0
    assert attention_mse(a, a, mask).item() == pytest.approx(0.0, abs=1e-7)
    assert math.isfinite(attention_mse(a, b, mask).item())
