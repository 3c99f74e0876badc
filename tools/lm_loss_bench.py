"""The causal-LM loss (distill/losses.py lm_losses) against plain autograd, on the CPU or a GPU.

    python -m tools.lm_loss_bench [--device cuda] [--rows 128 512 2048]

For the generation demo's batch (16 windows x 128 positions over 17,714 ids, 8 windows teacher-scored, top-32,
bf16 logits), prints the forward + backward time of lm_losses at each chunk size (`losses.ROWS`) and of the same
losses through F.log_softmax, the median of `--calls` calls after one warm-up, in alternating rounds; and the
largest difference of their values and gradients, so a speed-up that changed the numbers shows. A GPU is
synchronised before each clock read.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F


def plain(z, win, scored, ids, vals, t):
    """lm_losses as plain autograd: F.cross_entropy, and the top-k KL from F.log_softmax of the scored rows (also
    the reference of tests/test_gpt_units.py)."""
    zf = z.float()
    hard = F.cross_entropy(zf.reshape(-1, zf.shape[-1]), win[:, 1:].reshape(-1))
    logq = F.log_softmax(zf[scored] / t, -1).gather(-1, ids)
    logp = F.log_softmax(vals.float() / t, -1)
    return hard, (logp.exp() * (logp - logq)).sum(-1).mean() * t * t


def batch(device, B, T, V, K, S, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(B, T, V, generator=g) * 3).to(dtype)
    win = torch.randint(0, V, (B, T + 1), generator=g)
    scored = torch.zeros(B, dtype=torch.bool)
    scored[:S] = True
    ids = torch.randint(0, V, (S, T, K), generator=g)
    vals = torch.randn(S, T, K, generator=g).half()
    return [x.to(device) for x in (z, win, scored, ids, vals)]


def main(argv: list[str] | None = None) -> None:
    from distill import losses
    from tools.cli import ToolParser, positive_int

    p = ToolParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--rows", type=positive_int, nargs="+", default=[losses.ROWS])
    p.add_argument("--calls", type=positive_int, default=9)
    p.add_argument("--rounds", type=positive_int, default=3)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False)")
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    z, win, scored, ids, vals = batch(dev, 16, 128, 17_714, 32, 8, dtype)
    t = args.temperature

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def step(fn):
        a = z.clone().requires_grad_()
        h, s = fn(a)
        (g,) = torch.autograd.grad(0.5 * h + 0.5 * s, a)
        return h, s, g

    def fused(rows):
        def run(a):
            losses.ROWS = rows
            return losses.lm_losses(a, win, scored, ids, vals, t)
        return run

    cases = {f"lm_losses, rows={r}": fused(r) for r in args.rows}
    cases["plain autograd"] = lambda a: plain(a, win, scored, ids, vals, t)
    ref = step(cases["plain autograd"])
    times: dict[str, list[float]] = {k: [] for k in cases}
    for name, fn in cases.items():
        h, s, g = step(fn)  # warm-up, and the agreement check
        print(f"{name}: |d hard| {abs(h - ref[0]).item():.2e}, |d soft| {abs(s - ref[1]).item():.2e}, "
              f"max |d grad| {(g.float() - ref[2].float()).abs().max().item():.2e}")
    for _ in range(args.rounds):
        for name, fn in cases.items():
            for _ in range(args.calls):
                sync()
                t0 = time.perf_counter()
                step(fn)
                sync()
                times[name].append(time.perf_counter() - t0)
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"\n{where}, torch {torch.__version__}, {args.dtype} logits (16, 128, 17714), 8 scored, k=32, t={t}")
    print("| loss, forward + backward | median (ms) | min (ms) |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts) * 1e3:.2f} | {min(ts) * 1e3:.2f} |")


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
