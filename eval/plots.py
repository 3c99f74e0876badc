"""The report's plots (matplotlib, Agg backend, PNG): quality vs latency per target with the Pareto
front, latency vs sequence length (transformers solid, LSTMs dashed), size vs quality."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

from eval.metrics import HIGHER_IS_BETTER
from eval.rows import RNN_MODELS, decodes, p50, row_key

COLORS = {"teacher": "#1f77b4", "student": "#d62728", "lstm": "#2ca02c", "lstm_distilled": "#9467bd"}
# marker = variant (the Optimum peer shares its counterpart's marker, with a black edge); PyTorch eager is hollow
MARKERS = {"fp32": "o", "optimized": "D", "int8-dynamic": "^", "int8-static": "s", "fp16": "P", "int8": "v",
           "palettized-4bit": "X", "int8-dynamic-fastgelu": "*"}
# an .ort file sits beside the .onnx of its variant: half-filled markers tell the two apart
ORT_FILL = "left"
DPI = 110  # the saved PNGs' resolution


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def sig(v: float, digits: int = 3) -> str:
    """v to `digits` significant digits, except that a number of 1000 or more reads in plain digits: a 1,234 ms
    decode is "1234", not "1.23e+03" (a small number such as a 1.2e-05 difference keeps its e-notation)."""
    text = f"{v:.{digits}g}"
    return f"{v:.0f}" if "e+" in text else text


def log_axis(axis) -> None:
    """Log scale with plain numbers at 1-2-5 steps (10^1 alone says little about 3 ms vs 30 ms)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    (axis.axes.set_xscale if axis is axis.axes.xaxis else axis.axes.set_yscale)("log")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: sig(v, 6)))
    axis.set_minor_formatter(NullFormatter())


def _color(model: str) -> str:
    return COLORS.get(model, "#7f7f7f")


def _short(r: dict) -> str:
    v = r["variant"].replace("int8-dynamic", "i8dyn").replace("int8-static", "i8st").replace("optimum-", "opt-")
    return f"{r['model']} {v}" + ("" if r["format"] == "onnx" else f" {r['format']}")


def _marker(r: dict) -> str:
    return MARKERS.get(r["variant"].removeprefix("optimum-"), "o")


def _point(ax, x: float, y: float, r: dict) -> None:
    edge = "black" if r.get("source") == "optimum" else _color(r["model"])
    if r["format"] == "ort":
        ax.plot([x], [y], ls="", marker=_marker(r), ms=6.5, zorder=3, color=_color(r["model"]), fillstyle=ORT_FILL,
                mec=edge, mew=0.9)
        return
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


# A peer row whose quality is this far from our file of the same model is not a working model (e.g. a folder whose
# layout Optimum's loader does not know, so weights come up random): it is timed, but its quality would
# stretch the axis, so it is drawn at the axis' edge with a note instead. int8 moves accuracy by ~0.003.
PEER_GAP = {"accuracy": 0.05}  # absolute; lower-is-better metrics (perplexity): a ratio
PEER_RATIO = 1.25
NCOLS = 2  # panels per row: four targets in one row were 3,256 px wide with labels over each other


def off_peers(rows: list[dict], metric: str) -> list[dict]:
    """Peer (source "optimum") rows whose quality is far from our rows of the same model (see PEER_GAP)."""
    out = []
    for r in rows:
        if r.get("source") != "optimum" or r.get(metric) is None:
            continue
        ours = [o[metric] for o in rows if o["model"] == r["model"] and o.get("source") != "optimum"
                and o.get(metric) is not None]
        if not ours:
            continue
        ref = max(ours) if HIGHER_IS_BETTER[metric] else min(ours)
        far = (ref - r[metric] > PEER_GAP[metric]) if metric in PEER_GAP else (r[metric] > ref * PEER_RATIO)
        if far:
            out.append(r)
    return out


def _y_range(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = max(0.12 * (hi - lo), 0.01 * max(abs(hi), 1e-9), 1e-3)
    return lo - pad, hi + pad


BAND = 0.16  # the off-scale band's height, as a fraction of the y-range


def _off_scale(ax, pts: list[tuple[float, float, dict]], lo: float, hi: float, metric: str) -> None:
    """The y-axis spans [lo, hi]; points beyond it go in a grey band past that edge (the band has no ticks: its
    points sit at their x only), with one note naming their values. Without such points there is no band."""
    from matplotlib.ticker import FixedLocator

    span = hi - lo
    below = [p for p in pts if p[1] < lo]
    above = [p for p in pts if p[1] > hi]
    y0, y1 = lo - (BAND * span if below else 0), hi + (BAND * span if above else 0)
    ticks = [t for t in ax.get_yticks() if lo - 1e-12 <= t <= hi + 1e-12]
    ax.set_ylim(y0, y1)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    xmin, xmax = ax.get_xlim()
    for group, a, b in ((below, y0, lo), (above, hi, y1)):
        if not group:
            continue
        ax.axhspan(a, b, color="#eee", zorder=0)
        ax.axhline(b if a == y0 else a, color="#888", lw=0.8, ls=(0, (4, 2)))
        mid = (a + b) / 2
        for x, _, r in group:
            _point(ax, x, mid, r)
        ys = sorted(y for _, y, _ in group)
        vals = f"{ys[0]:.2f}" if f"{ys[0]:.2f}" == f"{ys[-1]:.2f}" else f"{ys[0]:.2f}-{ys[-1]:.2f}"
        who = "Optimum peer" if all(r.get("source") == "optimum" for _, _, r in group) else "off scale"
        text = f"{who}: {metric} {vals}, off scale: see caveat"
        # beside the group, on the side with more room (log x: compare in decades)
        left, right = min(x for x, _, _ in group), max(x for x, _, _ in group)
        room_right = (xmax / right) > (left / xmin)
        ax.annotate(text, (right if room_right else left, mid), textcoords="offset points",
                    xytext=(10 if room_right else -10, 0), ha="left" if room_right else "right", va="center",
                    fontsize=7, color="#333")


def _scatter(ax, pts: list[tuple[float, float, dict]], lo: float, hi: float, metric: str, margin: float) -> list:
    """The points on a log x-axis (widened by margin either side) and y in [lo, hi], the y-axis labelled with
    metric; those beyond it in the off-scale band (_off_scale). Returns the points inside."""
    inside = [(x, y, r) for x, y, r in pts if lo <= y <= hi]
    for x, y, r in inside:
        _point(ax, x, y, r)
    ax.set_ylim(lo, hi)
    ax.set_ylabel(metric + ("" if HIGHER_IS_BETTER[metric] else " (lower is better)"))
    log_axis(ax.xaxis)
    xs = [x for x, _, _ in pts]
    ax.set_xlim(min(xs) / margin, max(xs) * margin)
    _off_scale(ax, [p for p in pts if not lo <= p[1] <= hi], lo, hi, metric)
    return inside


def _fig_legend(fig, rows: list[dict], extra: list | None = None) -> None:
    """One legend for the figure, under the panels: colours name the models, markers the variants."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_color(m), marker="o", ls="", label=m) for m in _models(rows)]
    variants = [v for v in MARKERS if any(r["variant"].removeprefix("optimum-") == v for r in rows)]
    handles += [Line2D([], [], color="#555", marker=MARKERS[v], ls="", label=v) for v in variants]
    if any(r["format"] == "ort" for r in rows):
        handles.append(Line2D([], [], color="#555", marker="o", fillstyle=ORT_FILL, ls="", label="half-filled: .ort"))
    if any(r["format"] == "pytorch" for r in rows):
        handles.append(Line2D([], [], color="#555", marker="o", mfc="none", ls="", label="hollow: PyTorch eager"))
    if any(r.get("source") == "optimum" for r in rows):
        handles.append(Line2D([], [], color="#bbb", marker="o", mec="black", ls="", label="black edge: Optimum"))
    handles += extra or []
    _bottom_legend(fig, handles, [h.get_label() for h in handles], 8, 6)


def _bottom_legend(fig, handles: list, labels: list[str], fontsize: float, max_ncol: int):
    """The figure's legend under its panels, in as many columns (up to max_ncol) as the figure's width holds:
    a one-panel figure (one target) is 6.4 in wide, and six columns of entries were cut off at both sides."""
    renderer = fig.canvas.get_renderer()
    for ncol in range(min(max_ncol, len(labels)), 0, -1):
        legend = fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=fontsize, frameon=False)
        if ncol == 1 or legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return legend
        legend.remove()


def _wrapped(title: str, fig) -> str:
    """Each line of title wrapped to the figure's width (about 13 characters an inch at 10 pt)."""
    width = int(fig.get_figwidth() * 13)
    return "\n".join(textwrap.fill(line, width) for line in title.split("\n"))


def _number_labels(ax, named: list[tuple[float, float, dict]]) -> None:
    """Numbers beside the named points, the names in a key the axes place where no point is ("best").
    A number goes to the first corner of its point that is clear of the numbers already placed."""
    from matplotlib.lines import Line2D

    placed: list[tuple[float, float]] = []
    handles = []
    for i, (x, y, r) in enumerate(named, 1):
        px, py = ax.transData.transform((x, y))
        for dx, dy in ((5, 4), (5, -11), (-11, 4), (-11, -11), (5, 12), (5, -19)):
            spot = (px + dx * 1.5, py + dy * 1.5)  # offset points to pixels at 110 dpi
            if all(abs(spot[0] - a) > 12 or abs(spot[1] - b) > 11 for a, b in placed):
                break
        placed.append(spot)
        ax.annotate(str(i), (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=7, fontweight="bold",
                    color=_color(r["model"]))
        quality = f"{y:.4f}" if y <= 1 else sig(y, 4)  # accuracy to 4 places; a perplexity to 4 digits
        handles.append(Line2D([], [], ls="", marker=f"${i}$", color=_color(r["model"]), ms=6,
                              label=f"{_short(r)}: {sig(x)} ms, {quality}"))
    if handles:
        ax.legend(handles=handles, loc="best", fontsize=6.5, framealpha=0.9, handletextpad=0.3, borderpad=0.4,
                  title="Pareto front", title_fontsize=7)


def _grid(plt, n: int, width: float, height: float):
    """n panels, NCOLS to a row (the figure legend's room is added by _finish, once its rows are known)."""
    ncols = min(n, NCOLS)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.remove()
    return fig, list(axes.flat[:n])


def _finish(fig, path: Path) -> Path:
    """Grow the figure by the height its bottom legend measures, lay the panels out above it (tight_layout
    keeps the suptitle's room itself) and save."""
    renderer = fig.canvas.get_renderer()
    legend_in = sum(lg.get_window_extent(renderer).height for lg in fig.legends) / fig.dpi
    if legend_in:
        legend_in += 0.1  # a gap between the x-axis label and the legend
        # whole pixels at the saved dpi, so the PNG is exactly the figure's size
        fig.set_figheight(math.ceil((fig.get_figheight() + legend_in) * DPI) / DPI)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def _panel_title(results: dict, t: str, threads: bool) -> str:
    """A target's panel title: the GPU's name for desktop-gpu (machine.gpu), else the thread count where it
    matters, and a host proxy said as such."""
    proxy = " - host proxy" if results["targets"].get(t, {}).get("proxy") else ""
    if t == "desktop-gpu":
        where = f" ({(results['machine'].get('gpu') or {}).get('name', 'GPU')})"  # CPU threads are moot there
    else:
        where = f" ({results['threads'].get(t, '?')} thread(s))" if threads else ""
    return f"{t}{where}{proxy}"


def quality_vs_latency(results: dict, out: Path) -> Path | None:
    metric = results["quality_metric"]
    length = results["plan"]["headline_length"]
    higher = HIGHER_IS_BETTER[metric]
    rows = results["rows"]
    targets = [t for t in results["targets"] if any(p50(r, t, length) for r in rows)]
    if not targets:
        return None
    off = {id(r) for r in off_peers(rows, metric)}
    shown = [r for r in rows if r.get(metric) is not None and any(p50(r, t, length) for t in targets)]
    # every panel shares the y-range of the rows that matter, so panels compare at a glance
    lo, hi = _y_range([r[metric] for r in shown if id(r) not in off] or [r[metric] for r in shown])
    plt = _plt()
    fig, axes = _grid(plt, len(targets), 6.4, 4.3)
    for ax, t in zip(axes, targets):
        pts = [(p50(r, t, length), r[metric], r) for r in shown if p50(r, t, length)]
        inside = _scatter(ax, pts, lo, hi, metric, 1.35)
        # the front of the working models: a peer with an unusable quality is not a choice
        cand = [(x, y, r) for x, y, r in inside if id(r) not in off]
        front = pareto([(x, y) for x, y, _ in cand], higher)
        if front:
            xs, ys = zip(*front)
            ax.step(xs, ys, where="post", color="black", lw=1, ls="--", alpha=0.6, zorder=2)
            ax.scatter(xs, ys, s=130, facecolors="none", edgecolors="black", linewidths=1, zorder=4)
            named: dict[tuple[float, float], dict] = {}  # one row per front point, the first by latency
            for x, y, r in sorted(cand, key=lambda p: p[0]):
                if (x, y) in front:
                    named.setdefault((x, y), r)
            _number_labels(ax, [(x, y, r) for (x, y), r in named.items()])
        what = "time to first token, prompt of" if decodes(results) else "latency at"
        ax.set_xlabel(f"p50 {what} {length} tokens, batch 1 (ms, log scale)")
        ax.set_title(_panel_title(results, t, threads=True))
    from matplotlib.lines import Line2D

    extra = [Line2D([], [], color="black", ls="--", marker="o", mfc="none", ms=9, alpha=0.7,
                    label="Pareto front (circled, numbered)")]
    _fig_legend(fig, shown, extra)
    title = f"{metric} vs latency per target; the Pareto front is circled and numbered"
    if off:
        title += ("\nOptimum's rows in the grey band are off scale: their files are timed, but their "
                  f"{metric} is not a working model's (see caveat)")
    fig.suptitle(_wrapped(title, fig), fontsize=10)
    return _finish(fig, out / "quality_vs_latency.png")


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
    # one dash pattern per variant (markers tell the models apart), named in the title
    styles = {"fp32": ("-", "solid"), "optimized": ((0, (5, 1, 1, 1, 1, 1)), "dash-dot-dot"),
              "fp16": ((0, (8, 3)), "long dash"), "int8-dynamic": ("--", "dashed"), "int8-static": (":", "dotted")}
    labels: dict[str, object] = {}  # one legend for the figure: a row is drawn alike in every panel
    fig, axes = _grid(plt, len(sweeps), 6.4, 4.0)
    for ax, (t, lines) in zip(axes, sweeps):
        for r, xs, ys in lines:
            peer = r.get("source") == "optimum"
            label = " ".join(row_key(r))  # one legend entry per file, whichever panels it is in
            (h,) = ax.plot(xs, ys, color=_color(r["model"]), marker=_marker(r), ms=4,
                           fillstyle=ORT_FILL if r["format"] == "ort" else "full",
                           mec="black" if peer else None, mew=0.6,
                           ls="-." if peer else styles.get(r["variant"], ((0, (1, 2)), ""))[0],
                           lw=1.6 if r["model"] not in RNN_MODELS else 1.2, label=label)
            labels.setdefault(label, h)
        ax.set_xscale("log", base=2)
        log_axis(ax.yaxis)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.set_xlabel("sequence length (tokens, batch 1)")
        ax.set_ylabel("p50 latency (ms, log scale)")
        ax.set_title(_panel_title(results, t, threads=False))
    drawn = [r for _, lines in sweeps for r, _, _ in lines]
    order = {m: i for i, m in enumerate(_models(drawn))}
    keys = sorted(labels, key=lambda k: (order.get(k.split()[0], 99), k.split()[-1], "optimum" in k, k))
    _bottom_legend(fig, [labels[k] for k in keys], keys, 7.5, 4)
    note = [f"{v} {name}" for v, (_, name) in styles.items()
            if any(r["variant"] == v and r.get("source") != "optimum" for r in drawn)]
    note += ["Optimum dash-dot"] if any(r.get("source") == "optimum" for r in drawn) else []
    note += ["half-filled markers .ort"] if any(r["format"] == "ort" for r in drawn) else []
    fig.suptitle(_wrapped("p50 latency vs sequence length (attention grows ~n\u00b2 and an LSTM ~n once the "
                          f"sequence, not fixed costs, dominates; line style: {', '.join(note)})", fig), fontsize=10)
    return _finish(fig, out / "latency_vs_length.png")


def size_vs_quality(results: dict, out: Path) -> Path | None:
    metric = results["quality_metric"]
    rows = [r for r in results["rows"] if r.get("size_bytes") and r.get(metric) is not None]
    if not rows:
        return None
    off = {id(r) for r in off_peers(rows, metric)}
    lo, hi = _y_range([r[metric] for r in rows if id(r) not in off] or [r[metric] for r in rows])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.0, 4.6))
    _scatter(ax, [(r["size_bytes"] / 2**20, r[metric], r) for r in rows], lo, hi, metric, 1.4)
    ax.set_xlabel("file size (MiB, log scale)")
    ax.set_title(f"size vs {metric}, every model and variant")
    _fig_legend(fig, rows)
    return _finish(fig, out / "size_vs_quality.png")


def all_plots(results: dict, out: Path) -> dict[str, Path]:
    made = {fn.__name__: fn(results, out) for fn in (quality_vs_latency, latency_vs_length, size_vs_quality)}
    return {name: path for name, path in made.items() if path}
