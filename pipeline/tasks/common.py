"""What the steps of every task share: thread settings, training options and the report step."""
from __future__ import annotations

import functools
import json
import logging
import shutil

from pipeline.config import Config
from pipeline.errors import PipelineError
from pipeline.manifest import read_manifest
from pipeline.task import StageContext


log = logging.getLogger(__name__)
_LONG_SEQUENCE = "Token indices sequence length is longer than the specified maximum sequence length"


def _drop_long_sequence_warning(record: logging.LogRecord) -> bool:
    """transformers warns once per tokenizer about a text longer than the model's positions "will result in
    indexing errors", although every caller cuts it (to max_length, or into windows): a false alarm."""
    return not str(record.msg).startswith(_LONG_SEQUENCE)


def reports_truncation(step):
    """Wrap a step: the library's long-sequence false alarm is dropped, and the texts encode() cut to max_length
    are reported once, as one log line and `truncated` in the stage summary ({where: counts})."""
    @functools.wraps(step)
    def run(ctx: StageContext) -> dict:
        from distill.batching import truncation_tally

        hf_log = logging.getLogger("transformers.tokenization_utils_base")
        hf_log.addFilter(_drop_long_sequence_warning)
        try:
            with truncation_tally() as tally:
                summary = step(ctx)
        finally:
            hf_log.removeFilter(_drop_long_sequence_warning)
        cut = {where: c for where, c in tally.items() if c["truncated"]}
        if cut:
            log.info("%s: %d text(s) longer than max_length were truncated (%s)", ctx.name,
                     sum(c["truncated"] for c in cut.values()),
                     "; ".join(f"{w}: {c['truncated']} of {c['texts']} at {c['max_length']} tokens" for w, c in cut.items()))
        if tally and isinstance(summary, dict):
            summary["truncated"] = dict(tally)  # every tokenized set, with its count of cut texts (0 included)
        return summary
    return run


def threads(cfg: Config) -> None:
    import torch

    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)


def train_options(ctx: StageContext):
    """The [train] settings plus where this stage keeps resumable checkpoints."""
    from distill.precision import choose_precision
    from distill.train import TrainOptions

    t = ctx.cfg.train
    return TrainOptions(grad_accum=t.grad_accum, precision=choose_precision(t.precision, "train.precision").precision,
                        checkpoint_every=t.checkpoint_every, checkpoint_dir=ctx.resume_dir, key=ctx.key)


def search_summary(folder, out) -> dict | None:
    """A finished search's trials for the report (the stage `search` is optional; the report reads it when it
    has run): its request, best trial and every trial row from search/trials.json, and its Pareto plot copied
    beside the report's own plots. None when no search has finished in this run folder."""
    if read_manifest(folder) is None or not (folder / "trials.json").is_file():
        return None
    doc = json.loads((folder / "trials.json").read_text())
    metric = "validation_perplexity" if doc.get("lower_is_better") else "validation_accuracy"
    plot = None
    if (folder / "pareto.png").is_file():
        plot = "search_pareto.png"
        shutil.copy2(folder / "pareto.png", out / plot)
    best = next((t for t in doc["trials"] if t["number"] == doc.get("best_trial")), None)
    configs = sorted(p.name for p in folder.glob("best-*.toml"))
    return {"target": doc["target"], "budget_ms": doc["budget_ms"], "max_mb": doc.get("max_mb"),
            "space": doc.get("space"), "fraction": doc.get("fraction"), "metric": metric,
            "lower_is_better": bool(doc.get("lower_is_better")), "best_trial": doc.get("best_trial"),
            "best": best, "config": f"search/{configs[0]}" if configs else None, "plot": plot,
            "trials": doc["trials"], "reference": doc.get("reference"), "verdict": doc.get("verdict")}


def report(ctx: StageContext) -> dict:
    """Results table, speed-ups, NPU readiness and plots from the bench; writes report/results.json,
    report.md, report.html (self-contained) and the plots as PNG files."""
    from eval.phone import merge_saved
    from eval.report import write_report
    from eval.results import build_results, validate_results
    from pipeline.tasks import task_of

    doc = json.loads((ctx.input("bench") / "latency.json").read_text())
    # the task's goals and sections; classification's workload table picks within the bundle's accuracy window,
    # as the bundle does (its report step reads bundle.accuracy_window)
    part = task_of(ctx.cfg).results
    results = build_results(doc, part, ctx.cfg.bundle.accuracy_window) if part else build_results(doc)
    merge_saved(ctx.run_dir, results)  # keep phone measurements (runs/<run>/phone/) across report re-runs
    # variants the quantize stage could not make for a model (no row to time): a teacher type ORT has no fusion
    # patterns for has no "optimized" file. The RNNs' transformer-only skips are the rule, not news.
    not_made = [s for s in json.loads((ctx.input("quantize") / "manifest.json").read_text()).get("summary", {})
                .get("skipped", []) if not s["reason"].startswith("transformer-only")]
    if not_made:
        results["not_made"] = not_made
    for note in results.get("phone_dropped", []):  # also in the report, under Targets
        log.warning("phone row %s", note)
    search = search_summary(ctx.run_dir / "search", ctx.out)
    if search:
        from pipeline.stage import status

        results["search"] = search
        fresh, why = status(ctx.cfg, "search")
        if not fresh:  # a search made under other settings (e.g. before running its own best config)
            search["stale"] = why
    problems = validate_results(results)
    if problems:
        raise PipelineError(f"bench/latency.json does not follow eval/SCHEMA.md ({len(problems)} problem(s), "
                            f"first: {problems[0]}); re-run the bench stage with --force")
    (ctx.out / "results.json").write_text(json.dumps(results, indent=2))
    paths = write_report(results, ctx.out)
    final = ctx.run_dir / "report"
    print(f"\nreport: {final / 'report.md'}\n        {final / 'report.html'}\n        {final / 'results.json'}")
    return {"rows": len(results["rows"]), "files": sorted(p.name for p in paths)}
