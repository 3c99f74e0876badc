"""What a student search leaves behind (pipeline/search.py): search/trials.json (every trial), search/pareto.png
(validation accuracy vs latency, marker size = int8-dynamic file size) and search/best-<target>.toml (the user's
config with the best student's [student] settings; `make all CONFIG=...` runs it)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from pipeline.errors import PipelineError


def trial_rows(study) -> list[dict]:
    rows = []
    for t in study.trials:
        a = t.user_attrs
        rows.append({"number": t.number, "status": t.state.name.lower(), "params": t.params,
                     "student": a.get("student"), "latency_ms": a.get("latency_ms"), "size_bytes": a.get("size_bytes"),
                     "validation_accuracy": t.value if t.state.name == "COMPLETE" else None,
                     "validation_accuracy_per_rung": a.get("validation_accuracy_per_rung", []),
                     "pruned_because": a.get("pruned_because"), "same_as_trial": a.get("same_as_trial"),
                     "worker": a.get("worker")})
    return rows


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)  # readers never see half a file


def best_trial(study):
    """The complete trial with the best validation accuracy; ties go to the faster, then the earlier one."""
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    if not complete:
        return None
    return max(complete, key=lambda t: (t.value, -t.user_attrs.get("latency_ms", 0.0), -t.number))


def write_outputs(study, out: Path, request) -> list[dict]:
    rows = trial_rows(study)
    best = best_trial(study)
    doc = {"study": study.study_name, "target": request.target, "budget_ms": request.budget_ms,
           "best_trial": None if best is None else best.number,
           "max_mb": request.max_mb or None, "space": request.space, "fraction": request.fraction,
           "metric": "validation accuracy (the test split is never read)", "trials": rows}
    _write(out / "trials.json", json.dumps(doc, indent=2))
    pareto_plot(rows, out / "pareto.png", request)
    return rows


def pareto_plot(rows: list[dict], path: Path, request) -> Path:
    """Trained trials as points (area ~ int8 file size; the Pareto front edged in black and joined by a step
    line), trials stopped by successive halving hollow at their last rung's accuracy, trials over budget as
    grey crosses at accuracy 0 (never trained); the budget as a dashed vertical rule."""
    from eval.plots import _plt, pareto

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    # a re-sampled shape reuses its twin's score (same_as_trial): plotted once
    done = [r for r in rows if r["validation_accuracy"] is not None and r.get("same_as_trial") is None]
    halved = [r for r in rows if r["validation_accuracy"] is None and r["validation_accuracy_per_rung"]]
    over = [r for r in rows if r["latency_ms"] is not None and r["validation_accuracy"] is None
            and not r["validation_accuracy_per_rung"]]
    sized = done + halved
    top = max([r["size_bytes"] for r in sized] or [1]) or 1

    def area(r: dict) -> float:
        return 20 + 220 * r["size_bytes"] / top

    if done:
        front = pareto([(r["latency_ms"], r["validation_accuracy"]) for r in done])
        on_front = set(front)
        for edge, label, pick in (("none", f"trained (area ~ int8 size, largest {top / 1e6:.2f} MB)", False),
                                  ("black", "trained, on the Pareto front", True)):
            pts = [r for r in done if ((r["latency_ms"], r["validation_accuracy"]) in on_front) == pick]
            ax.scatter([r["latency_ms"] for r in pts], [r["validation_accuracy"] for r in pts],
                       s=[area(r) for r in pts], color="#d62728", alpha=0.7, zorder=3, edgecolors=edge,
                       linewidths=1.2, label=label)
        xs, ys = [p[0] for p in front], [p[1] for p in front]
        ax.step(xs + [request.budget_ms], ys + ys[-1:], where="post", color="black", lw=1, zorder=2,
                label="Pareto front (within budget)")
        for r in done:
            ax.annotate(f"#{r['number']}", (r["latency_ms"], r["validation_accuracy"]), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")
    if halved:
        ax.scatter([r["latency_ms"] for r in halved], [r["validation_accuracy_per_rung"][-1] for r in halved],
                   s=[area(r) for r in halved], facecolors="none", edgecolors="#d62728", zorder=3,
                   label="stopped early (successive halving; last rung)")
    if over:
        ax.scatter([r["latency_ms"] for r in over], [0.0] * len(over), marker="x", color="#7f7f7f", zorder=3,
                   label="over budget: never trained (at 0)")
    ax.axvline(request.budget_ms, color="#1f77b4", ls="--", lw=1, label=f"budget {request.budget_ms:g} ms")
    ax.set_xlabel(f"p50 latency on {request.target}, ms (batch 1, int8-dynamic)")
    ax.set_ylabel("validation accuracy (short schedule)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"student search: {len(done)} trained of {len(rows)} trials")
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    tmp = path.with_name(path.stem + ".partial.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def best_config(cfg, study, out: Path, target: str) -> Path | None:
    """search/best-<target>.toml: cfg (as resolved) with the best complete trial's [student] (or, for an LSTM /
    GRU, its [baseline] and bundle.model = "lstm_distilled"); None if no trial completed. The file is checked
    with load_config before it is kept. The [search] section is left out: the search is not part of `make all`."""
    from pipeline.config import load_config

    best = best_trial(study)
    path = out / f"best-{target}.toml"
    if best is None:  # a file from an earlier search (another budget) would pass for this one's result
        path.unlink(missing_ok=True)
        return None
    from distill.search_space import RNN_CELLS, config_keys

    data = cfg.to_dict()
    data.pop("search", None)
    shape = best.user_attrs["student"]
    if shape["arch"] in RNN_CELLS:  # the baseline stage trains it; the bundle ships it
        data["baseline"] = {**data["baseline"], **config_keys(shape)}
        data["bundle"] = {**data["bundle"], "model": "lstm_distilled"}
        if "lstm_distilled" not in data["quantize"]["models"]:
            data["quantize"]["models"] = [*data["quantize"]["models"], "lstm_distilled"]
    else:
        data["student"] = {**data["student"], **config_keys(shape)}
    header = (f"# written by `python -m pipeline search --target {target}` from {cfg.source or 'a config'}: trial "
              f"#{best.number}, validation accuracy {best.value:.4f} after the short schedule, "
              f"{best.user_attrs.get('latency_ms', float('nan')):.3f} ms p50 on {target}, "
              f"{best.user_attrs.get('size_bytes', 0) / 1e6:.2f} MB int8-dynamic\n")
    _write(path, header + dumps_toml(data))
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
    parts = []
    for section, values in data.items():
        lines = [f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
