"""What the steps of every task share: thread settings, training options and the report step."""
from __future__ import annotations

import json

from pipeline.config import Config
from pipeline.errors import PipelineError
from pipeline.task import StageContext


def threads(cfg: Config) -> None:
    import torch

    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)


def train_options(ctx: StageContext, phase: str = ""):
    """The [train] settings plus where this stage keeps resumable checkpoints."""
    from distill.precision import resolve_precision
    from distill.train import TrainOptions

    t = ctx.cfg.train
    return TrainOptions(grad_accum=t.grad_accum, precision=resolve_precision(t.precision), checkpoint_every=t.checkpoint_every,
                        checkpoint_dir=ctx.resume_dir / phase if phase else ctx.resume_dir, key=ctx.key)


def report(ctx: StageContext) -> dict:
    """Results table, speed-ups, NPU readiness and plots from the bench; writes report/results.json,
    report.md, report.html (self-contained) and the plots as PNG files."""
    from eval.phone import merge_saved
    from eval.report import write_report
    from eval.results import build_results, validate_results

    doc = json.loads((ctx.input("bench") / "latency.json").read_text())
    results = build_results(doc)
    merge_saved(ctx.run_dir, results)  # keep phone measurements (runs/<run>/phone/) across report re-runs
    problems = validate_results(results)
    if problems:
        raise PipelineError(f"bench/latency.json does not follow eval/SCHEMA.md ({len(problems)} problem(s), "
                            f"first: {problems[0]}); re-run the bench stage with --force")
    (ctx.out / "results.json").write_text(json.dumps(results, indent=2))
    paths = write_report(results, ctx.out)
    final = ctx.run_dir / "report"
    print(f"\nreport: {final / 'report.md'}\n        {final / 'report.html'}\n        {final / 'results.json'}")
    return {"rows": len(results["rows"]), "files": sorted(p.name for p in paths)}
