"""What a student search leaves behind (pipeline/search.py): search/trials.json (every trial), search/pareto.png
(validation accuracy vs latency, marker size = int8-dynamic file size) and search/best-<target>.toml (the user's
config with the best student's [student] settings; `make all CONFIG=...` runs it)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.manifest import write_whole
from pipeline.search_checks import DEFAULT_VARIANTS


def trial_rows(study, searcher, full: dict[int, float] | None = None) -> list[dict]:
    """One row per trial; the score's columns are named by the task (searcher.METRIC: validation_accuracy,
    validation_perplexity), its measurements by searcher.MEASURED; <METRIC>_full: a survivor's score after
    the full schedule (None for the others)."""
    rows, metric, full = [], searcher.METRIC, full or {}
    for t in study.trials:
        a = t.user_attrs
        rows.append({"number": t.number, "status": t.state.name.lower(), "params": t.params,
                     "student": a.get("student"), "variant": a.get("variant", DEFAULT_VARIANTS[0]),
                     **{k: a.get(k) for k in searcher.MEASURED},
                     metric: t.value if t.state.name == "COMPLETE" else None,
                     f"{metric}_per_rung": a.get(f"{metric}_per_rung", []), f"{metric}_full": full.get(t.number),
                     "pruned_because": a.get("pruned_because"), "same_as_trial": a.get("same_as_trial"),
                     "worker": a.get("worker"), **({"htp": a["htp"]} if "htp" in a else {})})
    return rows


def best_trial(study, searcher, full: dict[int, float] | None = None, select: str = "best"):
    """The complete trial with the best score (highest accuracy, lowest perplexity: searcher.DIRECTION): with
    survivors (full: {trial number: full-schedule score}) the best survivor by that score, else the best
    short-schedule one; ties go to the faster, then the earlier one. select = "one-se" (search.select), with
    survivors and a searcher that knows its score's standard error: the fastest survivor within one standard
    error of the best score."""
    complete = [t for t in study.trials if t.state.name == "COMPLETE" and (not full or t.number in full)]
    if not complete:
        return None
    sign = 1.0 if searcher.DIRECTION == "maximize" else -1.0
    best = max(complete, key=lambda t: (sign * (full[t.number] if full else t.value),
                                        -t.user_attrs.get("latency_ms", 0.0), -t.number))
    se = standard_error(searcher, full[best.number]) if select == "one-se" and full else None
    if se is None:
        return best
    close = [t for t in complete if sign * (full[best.number] - full[t.number]) <= se + 1e-12]
    return min(close, key=lambda t: (t.user_attrs.get("latency_ms", 0.0), -sign * full[t.number], t.number))


def standard_error(searcher, score: float) -> float | None:
    """One standard error of score (searcher.standard_error); None for a score without one (perplexity)."""
    se = getattr(searcher, "standard_error", None)
    return se(score) if callable(se) else None


def selection(study, searcher, full: dict[int, float] | None, select: str) -> dict | None:
    """trials.json's account of the one-standard-error rule: the best score's trial, the margin and the pick;
    None when the rule does not apply (no survivors, or a score without a standard error)."""
    top = best_trial(study, searcher, full, "best")
    se = standard_error(searcher, full[top.number]) if select == "one-se" and full and top is not None else None
    if se is None:
        return None
    pick = best_trial(study, searcher, full, select)
    return {"rule": "one-se", "standard_error": se, "best_score_trial": top.number,
            "best_score": full[top.number], "result": pick.number,
            "why": (f"the fastest survivor within one standard error ({se:.4f}) of the best full-schedule score "
                    f"(trial #{top.number}, {full[top.number]:.4f})")}


def verdict(best, full: dict[int, float] | None, ref: dict | None, searcher, request,
            select: str = "best") -> str | None:
    """One sentence: the result against the config's own student (ref, pipeline/search.py run_reference), both
    after the full schedule, on the score and on the budgeted cost and size; None without a reference."""
    if best is None or not full or ref is None:
        return None
    metric = searcher.METRIC
    mine, theirs = full[best.number], ref[f"{metric}_full"]
    a = best.user_attrs
    better = mine >= theirs if searcher.DIRECTION == "maximize" else mine <= theirs
    lr = ref.get("latency_ratio")  # timed in alternating rounds (classification); else the cached measurements
    speed = (f"{lr['ratio']:.2f}x its latency on {request.target} ({lr['rounds']} alternating rounds)" if lr
             else f"{a['latency_ms'] / ref['latency_ms']:.2f}x its latency on {request.target}")
    size = a["size_bytes"] / ref["size_bytes"]
    ratio = f"{speed} and {size:.2f}x its file size"
    if (lr["ratio"] if lr else a["latency_ms"] / ref["latency_ms"]) >= 1 and size >= 1:
        ratio += "; it is neither faster nor smaller, so keep the config's own student"
    result = f"the result (trial #{best.number}, {metric.replace('_', ' ')} {mine:.4f}) scores"
    if better:
        return (f"{result} at least as well as the config's own student ({theirs:.4f}) on the validation split "
                f"at {ratio}")
    se = standard_error(searcher, theirs) if select == "one-se" else None
    if se is not None and abs(mine - theirs) <= se:
        return (f"{result} within one standard error ({se:.4f}) of the config's own student ({theirs:.4f}) on the "
                f"validation split, at {ratio}")
    return (f"{result} below the config's own student ({theirs:.4f}) on the validation split, at {ratio}: the "
            "search found nothing better under this budget; weigh the speed and size against that")


def write_outputs(study, out: Path, request, searcher, full: dict[int, float] | None = None,
                  ref: dict | None = None) -> dict:
    """search/trials.json and search/pareto.png; returns trials.json's document."""
    select = getattr(request, "select", "best")
    rows = trial_rows(study, searcher, full)
    best = best_trial(study, searcher, full, select)
    doc = {"study": study.study_name, "target": request.target, "budget_ms": request.budget_ms,
           "best_trial": None if best is None else best.number,
           "selection": selection(study, searcher, full, select),
           "max_mb": request.max_mb or None, "space": request.space, "fraction": request.fraction,
           "metric": searcher.METRIC_NOTE, "survivors": list(full or {}),  # best short-schedule score first
           "reference": ref, "verdict": verdict(best, full, ref, searcher, request, select),
           # say which way is better where it is not the usual "higher"
           **({"lower_is_better": True} if searcher.DIRECTION == "minimize" else {}), "trials": rows}
    write_whole(out / "trials.json", json.dumps(doc, indent=2))
    pareto_plot(rows, out / "pareto.png", request, searcher, None if best is None else best.number, ref)
    return doc


def pareto_plot(rows: list[dict], path: Path, request, searcher, best: int | None, ref: dict | None) -> None:
    """Trained trials as points (area ~ int8 file size; the Pareto front edged in black and joined by a step
    line), trials stopped by successive halving hollow at their last rung's score, trials over budget as grey
    crosses on a band below the trained scores (above them for a lower-is-better score such as perplexity),
    never trained; the budget as a dashed vertical rule; a log x axis where the costs span over 10x.
    Survivors (search.survivors) as diamonds at their full-schedule score, joined to their short-schedule
    point; the search's result (best: its trial number) as a star; the config's own student (ref, trained in
    full) as a black cross.
    x: searcher.COST_NOTE, y: searcher.METRIC."""
    from eval.plots import _plt

    fig = pareto_figure(rows, request, searcher, best, ref)
    tmp = path.with_name(path.stem + ".partial.png")
    fig.savefig(tmp, dpi=120)
    _plt().close(fig)
    os.replace(tmp, path)


def pareto_figure(rows: list[dict], request, searcher, best: int | None = None, ref: dict | None = None):
    """The matplotlib figure pareto_plot saves."""
    from eval.plots import _plt, log_axis, pareto

    metric, per_rung, at_full = searcher.METRIC, f"{searcher.METRIC}_per_rung", f"{searcher.METRIC}_full"
    higher = searcher.DIRECTION == "maximize"
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    fresh = [r for r in rows if r.get("same_as_trial") is None]  # a re-sampled shape reuses its twin's score
    done = [r for r in fresh if r[metric] is not None]
    halved = [r for r in fresh if r[metric] is None and r[per_rung]]
    over = [r for r in fresh if r["latency_ms"] is not None and r[metric] is None and not r[per_rung]]
    top = max([r["size_bytes"] for r in done + halved] or [1]) or 1
    full = [r for r in done if r.get(at_full) is not None]
    scores = [r[metric] for r in done] + [r[per_rung][-1] for r in halved] + [r[at_full] for r in full]
    scores += [ref[at_full]] if ref else []
    # the y axis spans the trained scores (a 0-1 axis squeezes a search's few points into one blob); trials
    # never trained sit on a band at the worst edge of it
    lo, hi = (min(scores), max(scores)) if scores else (0.0, 1.0)
    pad = max(hi - lo, 0.01) * 0.15
    worst = lo - 2 * pad if higher else hi + 2 * pad

    def area(r: dict) -> float:
        return 20 + 220 * r["size_bytes"] / top

    if done:
        front = pareto([(r["latency_ms"], r[metric]) for r in done], higher_is_better=higher)
        on_front = set(front)
        for edge, label, pick in (("none", f"trained (area ~ int8 size, largest {top / 1e6:.2f} MB)", False),
                                  ("black", "trained, on the Pareto front", True)):
            pts = [r for r in done if ((r["latency_ms"], r[metric]) in on_front) == pick]
            ax.scatter([r["latency_ms"] for r in pts], [r[metric] for r in pts],
                       s=[area(r) for r in pts], color="#d62728", alpha=0.7, zorder=3, edgecolors=edge,
                       linewidths=1.2, label=label)
        xs, ys = [p[0] for p in front], [p[1] for p in front]
        ax.step(xs + [request.budget_ms], ys + ys[-1:], where="post", color="black", lw=1, zorder=2,
                label="Pareto front (within budget)")
        for r in (r for r in done if (r["latency_ms"], r[metric]) in on_front):  # the front only: legible
            off = 0.4 * area(r) ** 0.5 + 1  # past the marker's rim (s is an area in points^2), not under it
            ax.annotate(f"#{r['number']}", (r["latency_ms"], r[metric]), fontsize=7,
                        xytext=(off, off), textcoords="offset points")
    if full:  # the short schedule's score moved to the full one's: a survivor's two points, joined
        for r in full:
            ax.plot([r["latency_ms"]] * 2, [r[metric], r[at_full]], color="#2ca02c", lw=1, zorder=2)
        ax.scatter([r["latency_ms"] for r in full], [r[at_full] for r in full], marker="D", s=36,
                   color="#2ca02c", zorder=4, label="survivor, after the full schedule")
    pick = next((r for r in done if r["number"] == best), None)
    if pick is not None:
        y = pick[metric] if pick.get(at_full) is None else pick[at_full]
        ax.scatter([pick["latency_ms"]], [y], marker="*", s=260, color="#ffbf00", edgecolors="black",
                   linewidths=0.8, zorder=5, label=f"result: #{pick['number']} (best-{request.target}.toml)")
    if ref:
        ax.scatter([ref["latency_ms"]], [ref[at_full]], marker="P", s=90, color="black", zorder=5,
                   label="the config's own student (full schedule)")
    if halved:
        ax.scatter([r["latency_ms"] for r in halved], [r[per_rung][-1] for r in halved],
                   s=[area(r) for r in halved], facecolors="none", edgecolors="#d62728", zorder=3,
                   label="stopped early (successive halving; last rung)")
    if over:
        ax.scatter([r["latency_ms"] for r in over], [worst] * len(over), marker="x", color="#7f7f7f", zorder=3,
                   label="over budget: never trained " + ("(bottom band)" if higher else "(top band)"))
    ax.axvline(request.budget_ms, color="#1f77b4", ls="--", lw=1,
               label=f"budget {request.budget_ms:g} {searcher.BUDGET_UNIT}")
    ax.set_xlabel(searcher.COST_NOTE.format(target=request.target))
    sched = "short schedule; diamonds: full" if full else "short schedule"
    ax.set_ylabel(f"{metric.replace('_', ' ')} ({sched}{'' if higher else '; lower is better'})")
    edge = worst - pad if higher else worst + pad
    ax.set_ylim(*((edge, hi + pad) if higher else (lo - pad, edge)))
    if not scores:  # nothing trained: the band is all there is, and a score axis would only show made-up values
        ax.set_yticks([])
    costs = ([r["latency_ms"] for r in rows if r["latency_ms"]] + [request.budget_ms]
             + ([ref["latency_ms"]] if ref else []))
    if max(costs) / min(costs) > 10:  # over-budget shapes run to 10x+ the budget: a log axis keeps both ends
        log_axis(ax.xaxis)  # ticks read 0.2, 0.5, 1 (not 2 x 10^-1)
    ax.set_title(f"student search: {len(done)} trained of {len(rows)} trials")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
    # the legend grows with what is drawn (up to 9 entries): the figure grows under the axes to hold it
    rows = math.ceil(len(labels) / 2)
    height = 3.9 + 0.2 * rows
    fig.set_size_inches(6.4, height)
    fig.tight_layout(rect=(0, (0.08 + 0.2 * rows) / height, 1, 1))
    return fig


def best_config(cfg, study, out: Path, target: str, searcher, full: dict[int, float] | None, doc: dict) -> Path | None:
    """search/best-<target>.toml: cfg (as resolved) with the best complete trial's shape (trials.json's doc:
    its best trial, selection and verdict) written in by the task (searcher.apply_best: [student], or for a
    classification LSTM / GRU its [baseline] and bundle.model = "lstm_distilled"); None if no trial completed.
    The file is checked with load_config before it is kept. The [search] section is left out: the search is not
    part of `make all`."""
    from pipeline.config import load_config

    path = out / f"best-{target}.toml"
    if doc["best_trial"] is None:  # a file from an earlier search (another budget) would pass for this one's result
        path.unlink(missing_ok=True)
        return None
    best = next(t for t in study.trials if t.number == doc["best_trial"])
    data = cfg.to_dict()
    data.pop("search", None)
    a = best.user_attrs
    variant = a.get("variant", DEFAULT_VARIANTS[0])  # studies from before search.variants: int8-dynamic
    # bundle.variant only where search.variants asked for more than int8-dynamic: else the user's stays
    searched = tuple(cfg.search.variants) != DEFAULT_VARIANTS
    searcher.apply_best(data, a["student"], variant if searched else None)
    score = (f"{full[best.number]:.4f} after the full schedule ({best.value:.4f} after the short one)" if full
             else f"{best.value:.4f} after the short schedule")
    header = (f"# written by `python -m pipeline search --target {target}` from {cfg.source or 'a config'}: trial "
              f"#{best.number}, {searcher.METRIC.replace('_', ' ')} {score}, "
              f"{a.get('latency_ms', float('nan')):.3f} {searcher.COST_SHORT.format(target=target)}, "
              f"{a.get('size_bytes', 0) / 1e6:.2f} MB {variant}\n")
    chosen = doc["selection"]
    if chosen and chosen["result"] != chosen["best_score_trial"]:
        header += f"# picked as {chosen['why']}\n"
    if doc["verdict"]:
        header += f"# {doc['verdict']}\n"
    write_whole(path, header + dumps_toml(data))
    load_config(path)  # a file the pipeline would reject is a bug here, not the user's
    return path


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            raise PipelineError(f"cannot write {v} to TOML")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise PipelineError(f"cannot write a {type(v).__name__} to TOML")


def dumps_toml(data: dict[str, dict]) -> str:
    """A config dict of sections of scalars / lists as TOML (None values are left out: the default applies)."""
    parts = ["\n".join([f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None])
             for section, values in data.items()]
    return "\n\n".join(parts) + "\n"
