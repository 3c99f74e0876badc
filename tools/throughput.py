"""Training throughput of the student's distillation loop, for comparing process counts.

    torchrun --standalone --nproc_per_node=N -m tools.throughput --config configs/demo.toml

Runs `--steps` global batches of the real logit-distillation step on the run's cached teacher logits
(the logits stage must have run) and prints samples/s after `--warmup` steps; rank 0 appends the result
to runs/<run>/ddp_throughput.json. `make bench-ddp` runs it for 1 and 2 processes.
"""
from __future__ import annotations

import json
import os
import time

import torch

from pipeline.errors import PipelineError


def main() -> None:
    from distill import distributed as D
    from distill.batching import encode, epoch_stream, pad, param_device
    from distill.losses import distill_loss
    from distill.models import load_model
    from distill.student import build_student, check_layer_map
    from distill.train import TrainOptions, fit, seed_everything
    from pipeline.config import load_config
    from pipeline.data import read_labels, read_split
    from tools.cli import ToolParser, positive_int

    p = ToolParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/demo.toml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--steps", type=positive_int, default=60)
    p.add_argument("--warmup", type=positive_int, default=10)
    args = p.parse_args()
    if args.steps <= args.warmup:  # the timed steps are those after the warm-up
        p.error(f"--steps ({args.steps}) must be more than --warmup ({args.warmup})")
    cfg = load_config(args.config, args.overrides)
    run_dir = cfg.run_dir
    if not (run_dir / "logits" / "manifest.json").is_file():
        raise PipelineError(f"{run_dir}/logits is missing: run `make distill CONFIG={args.config}` first")
    D.init()
    seed_everything(cfg.run.seed)
    labels = read_labels(run_dir / "data")
    teacher = load_model(run_dir / "teacher" / "model", "teacher")
    rows = read_split(run_dir / "logits", "distill_set")
    index = {lab: i for i, lab in enumerate(labels)}
    y = torch.tensor([index[r["label"]] if r["label"] is not None else -1 for r in rows])
    tl = torch.from_numpy(__import__("numpy").load(run_dir / "logits" / "teacher_logits.npy")).float()
    ids, _ = encode(teacher.tokenizer, [r["text"] for r in rows], cfg.student.max_length)
    layer_map = check_layer_map(cfg.distill.layer_map, cfg.student.layers, teacher.model.hf.config.num_hidden_layers)
    student = build_student(cfg.student, teacher.model, labels, layer_map)
    d = cfg.distill
    marks: list[float] = []
    labelled = (y >= 0).numpy()

    def step(m, b):
        marks.append(time.perf_counter())
        x, mask = pad([ids[i] for i in b], 0, device=param_device(m))
        yb = y[b].to(x.device)
        return distill_loss(m(x, mask), tl[b].to(x.device), yb.clamp(min=0), temperature=d.temperature,
                            alpha=d.alpha, has_label=yb >= 0, hard_share=b.share_where(labelled))

    stream = epoch_stream(len(ids), [len(s) for s in ids], d.batch_size, 100.0, cfg.run.seed)
    fit(student, stream, step, total_steps=args.steps, lr=d.lr, weight_decay=d.weight_decay, warmup_fraction=0.1,
        desc=f"throughput x{D.world_size()}", lr_hint="distill.lr", opts=TrainOptions())
    marks.append(time.perf_counter())
    timed = args.steps - args.warmup
    seconds = marks[-1] - marks[args.warmup]
    result = {"processes": D.world_size(), "threads_per_process": torch.get_num_threads(),
              "global_batch": d.batch_size, "steps_timed": timed, "seconds": round(seconds, 3),
              "samples_per_s": round(timed * d.batch_size / seconds, 1), "backend": "nccl" if torch.cuda.is_available() else "gloo"}
    if D.is_main():
        print(json.dumps(result))
        out = run_dir / "ddp_throughput.json"
        old = json.loads(out.read_text()) if out.is_file() else []
        out.write_text(json.dumps([r for r in old if r["processes"] != result["processes"]] + [result], indent=2))
    D.finish()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
