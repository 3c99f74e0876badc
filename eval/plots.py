"""The report's plots (matplotlib, Agg backend, PNG): quality vs latency per target with the Pareto
front, latency vs sequence length (transformers solid, LSTMs dashed), size vs quality."""
from __future__ import annotations

from pathlib import Path

from eval.rows import p50

COLORS = {"teacher": "#1f77b4", "student": "#d62728", "lstm": "#2ca02c", "lstm_distilled": "#9467bd"}
# marker = variant (the Optimum peer shares its counterpart's marker, with a black edge); PyTorch eager is hollow
MARKERS = {"fp32": "o", "optimized": "D", "int8-dynamic": "^", "int8-static": "s", "fp16": "P", "int8": "v",
           "palettized-4bit": "X"}
RNN_MODELS = ("lstm", "lstm_distilled")


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _log_axis(axis) -> None:
    """Log scale with plain numbers at 1-2-5 steps (10^1 alone says little about 3 ms vs 30 ms)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    (axis.axes.set_xscale if axis is axis.axes.xaxis else axis.axes.set_yscale)("log")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _color(model: str) -> str:
    return COLORS.get(model, "#7f7f7f")


def _short(r: dict) -> str:
    v = r["variant"].replace("int8-dynamic", "i8dyn").replace("int8-static", "i8st").replace("optimum-", "opt-")
    return f"{r['model']} {v}" + ("" if r["format"] in ("onnx", "ort") else f" {r['format']}")


def _marker(r: dict) -> str:
    return MARKERS.get(r["variant"].removeprefix("optimum-"), "o")


def _point(ax, x: float, y: float, r: dict) -> None:
    hollow = r["format"] == "pytorch"
    ax.scatter(x, y, marker=_marker(r), s=40, zorder=3, linewidths=1.2 if hollow else 0.9,
               facecolors="none" if hollow else _color(r["model"]),
               edgecolors=_color(r["model"]) if hollow else ("black" if r.get("source") == "optimum" else "none"))


def pareto(points: list[tuple[float, float]], higher_is_better: bool = True) -> list[tuple[float, float]]:
    """The points no other point beats on both latency (lower) and quality; sorted by latency."""
    front, best = [], None
    for x, y in sorted(points, key=lambda p: (p[0], -p[1] if higher_is_better else p[1])):
        if best is None or (y > best if higher_is_better else y < best):
            front.append((x, y))
            best = y
    return front


def _models(rows: list[dict]) -> list[str]:
    """Model names in pipeline order, unknown ones after."""
    names = {r["model"] for r in rows}
    return [m for m in COLORS if m in names] + sorted(names - set(COLORS))


def _legend(ax, rows: list[dict]) -> None:
    """Colours name the models, markers the variants; outside the axes so no point hides behind it."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_color(m), marker="o", ls="", label=m) for m in _models(rows)]
    variants = [v for v in MARKERS if any(r["variant"].removeprefix("optimum-") == v for r in rows)]
    handles += [Line2D([], [], color="#555", marker=MARKERS[v], ls="", label=v) for v in variants]
    if any(r["format"] == "pytorch" for r in rows):
        handles.append(Line2D([], [], color="#555", marker="o", mfc="none", ls="", label="hollow: PyTorch eager"))
    if any(r.get("source") == "optimum" for r in rows):
        handles.append(Line2D([], [], color="#bbb", marker="o", mec="black", ls="", label="black edge: Optimum"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.9)


def quality_vs_latency(results: dict, out: Path) -> Path | None:
    metric = results["quality_metric"]
    length = results["plan"]["headline_length"]
    higher = metric == "accuracy"
    rows = results["rows"]
    targets = [t for t in results["targets"] if any(p50(r, t, length) for r in rows)]
    if not targets:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(targets), figsize=(7.4 * len(targets), 4.8), squeeze=False)
    for ax, t in zip(axes[0], targets):
        pts = [(p50(r, t, length), r[metric], r) for r in rows if p50(r, t, length) and r.get(metric) is not None]
        for x, y, r in pts:
            _point(ax, x, y, r)
        front = pareto([(x, y) for x, y, _ in pts], higher)
        if front:
            xs, ys = zip(*front)
            ax.step(xs, ys, where="post", color="black", lw=1, ls="--", alpha=0.6, zorder=2)
            ax.scatter(xs, ys, s=130, facecolors="none", edgecolors="black", linewidths=1, zorder=4)
            # front points in x order; labels alternate below / above so neighbours at similar
            # accuracy do not print over each other
            order = {pt: i for i, pt in enumerate(sorted(set(front)))}
            right = max(xs)
            for x, y, r in pts:  # name only the front's points: the legend decodes the rest
                if (x, y) in order:
                    last = x == right  # the rightmost label goes to the left, inside the axes
                    dy = -11 if order.pop((x, y)) % 2 == 0 else 5
                    ax.annotate(_short(r), (x, y), textcoords="offset points", xytext=(-8 if last else 6, dy),
                                ha="right" if last else "left", fontsize=7)
        _log_axis(ax.xaxis)
        ax.set_xlabel(f"p50 latency at {length} tokens, batch 1 (ms, log scale)")
        ax.set_ylabel(metric + ("" if higher else " (lower is better)"))
        proxy = " - host proxy" if results["targets"][t].get("proxy") else ""
        ax.set_title(f"{t} ({results['threads'].get(t, '?')} thread(s)){proxy}")
        _legend(ax, [r for _, _, r in pts])
    fig.suptitle(f"{metric} vs latency (circled and named: the Pareto front)", fontsize=10)
    fig.tight_layout()
    path = out / "quality_vs_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_vs_length(results: dict, out: Path) -> Path | None:
    rows = results["rows"]
    lengths = results["plan"]["seq_lengths"]
    sweeps = []
    for t in results["targets"]:
        lines = []
        for r in rows:
            if r["format"] == "pytorch":  # eager is the reference in the tables; the plot shows deployable files
                continue
            xs = [n for n in lengths if p50(r, t, n)]
            if len(xs) >= 2:
                lines.append((r, xs, [p50(r, t, n) for n in xs]))
        if lines:
            sweeps.append((t, lines))
    if not sweeps:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(sweeps), figsize=(6.2 * len(sweeps), 5.6), squeeze=False)
    styles = {"fp32": "-", "int8-dynamic": "--", "int8-static": ":"}
    for ax, (t, lines) in zip(axes[0], sweeps):
        for r, xs, ys in lines:
            ax.plot(xs, ys, color=_color(r["model"]), marker=_marker(r), ms=4,
                    ls=styles.get(r["variant"], "-."), lw=1.6 if r["model"] not in RNN_MODELS else 1.2,
                    label=f"{r['model']} {r['variant']} {r['format']}")
        ax.set_xscale("log", base=2)
        _log_axis(ax.yaxis)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.set_xlabel("sequence length (tokens, batch 1)")
        ax.set_ylabel("p50 latency (ms, log scale)")
        ax.set_title(f"{t}: attention cost grows ~n\u00b2, an LSTM's ~n")
        ax.legend(fontsize=6.5, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    fig.tight_layout()
    path = out / "latency_vs_length.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def size_vs_quality(results: dict, out: Path) -> Path | None:
    metric = results["quality_metric"]
    rows = [r for r in results["rows"] if r.get("size_bytes") and r.get(metric) is not None]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.6, 4.8))
    for r in rows:
        _point(ax, r["size_bytes"] / 2**20, r[metric], r)
    _log_axis(ax.xaxis)
    ax.set_xlabel("file size (MiB, log scale)")
    ax.set_ylabel(metric + ("" if metric == "accuracy" else " (lower is better)"))
    ax.set_title(f"size vs {metric}, every model and variant")
    _legend(ax, rows)
    fig.tight_layout()
    path = out / "size_vs_quality.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_plots(results: dict, out: Path) -> dict[str, Path]:
    made = {}
    for name, fn in (("quality_vs_latency", quality_vs_latency), ("latency_vs_length", latency_vs_length),
                     ("size_vs_quality", size_vs_quality)):
        path = fn(results, out)
        if path:
            made[name] = path
    return made
