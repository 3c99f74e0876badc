"""The report's figures stay readable: quality vs latency is a grid of panels of bounded size, the y-range
covers our models (a peer row at 0.39 accuracy no longer squeezes them into one band: it sits in a marked
band with a note naming its value), labels do not overlap, and the report says why."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from eval.plots import latency_vs_length, off_peers, quality_vs_latency, size_vs_quality
from eval.report import blocks, to_markdown
from tests.test_report_render import classified

TARGETS = ["host-cpu", "mobile-cpu", "browser-wasm", "edge-npu"]
LENGTHS = [16, 64, 128]


def _row(model, variant, fmt, acc, size, ms: dict, **extra):
    def lat(v):
        out = {str(n): {"p50_ms": v * n / 64, "p90_ms": v, "p99_ms": v, "mean_ms": v, "min_ms": v, "iterations": 30}
               for n in LENGTHS}
        out["session"] = {"provider": "CPUExecutionProvider", "threads": 1, "peak_rss_mb": 1.0, "session_rss_mb": 1.0}
        return out

    return {"model": model, "variant": variant, "format": fmt, "accuracy": acc, "size_bytes": size,
            "params": size // 4, "flops_per_seq": 10**9, "flops_by_length": {str(n): 10**8 for n in LENGTHS},
            "latency": {t: lat(ms[t]) if t in ms else {"status": "skipped", "reason": "not here"} for t in TARGETS},
            **extra}


def _results():
    every = lambda v: {t: v * (1 + i) for i, t in enumerate(TARGETS)}  # noqa: E731
    rows = [_row("teacher", "fp32", "onnx", .7547, 90 << 20, every(19.0)),
            _row("teacher", "int8-dynamic", "onnx", .7552, 18 << 20, every(12.7)),
            _row("student", "fp32", "onnx", .7547, 6 << 20, every(2.2)),
            _row("student", "optimized", "onnx", .7547, 6 << 20, every(1.9)),
            _row("student", "int8-dynamic", "onnx", .7526, 1 << 20, every(1.8)),
            _row("student", "int8-static", "onnx", .7539, 1 << 20, every(1.85)),
            _row("lstm", "fp32", "onnx", .7167, 18 << 20, every(1.4)),
            _row("lstm_distilled", "int8-dynamic", "onnx", .7348, 4 << 20, every(0.9)),
            _row("student", "optimum-fp32", "onnx", .3900, 24 << 20, every(2.6), source="optimum"),
            _row("student", "optimum-int8-dynamic", "onnx", .3894, 6 << 20, every(1.9), source="optimum")]
    target = {"runtime": "onnxruntime", "provider": "CPU", "threads": 1, "precision": "fp32", "formats": ["onnx"],
              "proxy": "", "description": ""}
    doc = {"machine": {"cpu": "c", "machine": "x86_64", "system": "Linux", "logical_cores": 2, "usable_cores": 2,
                       "cpu_flags": [], "load_average_1m": 0.1, "peak_gflops_fp32": {"1": 1.0}, "peak_probe": "p"},
           "versions": {}, "threads": {t: 1 for t in TARGETS}, "targets": {t: dict(target) for t in TARGETS},
           "plan": {"seq_lengths": LENGTHS, "headline_length": 64, "warmup": 1, "iterations": 30,
                    "min_iterations": 10, "max_seconds_per_point": 1.5, "throughput_batch": 8,
                    "sweep_variants": ["fp32"], "inputs": "t", "npu_device": "x"},
           "seconds": {"total": 100.0}, "rows": rows}
    return classified(doc)


@pytest.fixture
def kept(monkeypatch):
    """The figures the plot functions make, kept open (they close them after saving)."""
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    yield figs
    monkeypatch.undo()
    plt.close("all")


def _overlaps(fig, texts) -> list[tuple[str, str]]:
    r = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(r)) for t in texts if t.get_text()]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


def test_quality_vs_latency_is_a_readable_grid(tmp_path, kept):
    res = _results()
    path = quality_vs_latency(res, tmp_path)
    fig = kept[-1]
    axes = [a for a in fig.axes if a.get_title()]
    assert len(axes) == 4
    assert len({round(a.get_position().y0, 3) for a in axes}) == 2  # two rows of two
    w, h = fig.get_size_inches() * 110
    assert 1000 <= w <= 1600 and 700 <= h <= 1300
    from PIL import Image

    assert Image.open(path).size == (round(w), round(h))
    for ax in axes:
        lo, hi = ax.get_ylim()
        assert 0.6 < lo < 0.7167 and 0.7552 < hi < 0.8  # our models span the axis, the 0.39 rows do not
        assert any("Optimum peer: accuracy 0.39, off scale: see caveat" in t.get_text() for t in ax.texts)
        assert _overlaps(fig, ax.texts) == []
        assert all(lo <= tick <= hi for tick in ax.get_yticks())
        assert 0.7167 - 1e-9 >= lo + 0.1 * (hi - lo)  # the band below the lowest model holds only the peers
    assert "see caveat" in fig._suptitle.get_text()


def test_other_plots_keep_peers_off_scale_and_report_names_the_caveat(tmp_path, kept):
    res = _results()
    assert {r["variant"] for r in off_peers(res["rows"], "accuracy")} == {"optimum-fp32", "optimum-int8-dynamic"}
    size_vs_quality(res, tmp_path)
    ax = kept[-1].axes[0]
    assert ax.get_ylim()[0] > 0.6 and any("0.39, off scale" in t.get_text() for t in ax.texts)
    latency_vs_length(res, tmp_path)
    fig = kept[-1]
    assert len(fig.axes) == 4 and fig.get_size_inches()[0] * 110 <= 1600
    md = to_markdown(blocks(res, {}))
    assert "Caveat on Optimum's rows: their accuracy is 0.389 / 0.390 (student; ours: student 0.755)" in md


def test_no_band_without_off_scale_rows(tmp_path, kept):
    res = _results()
    res["rows"] = [r for r in res["rows"] if r.get("source") != "optimum"]
    quality_vs_latency(res, tmp_path)
    for ax in [a for a in kept[-1].axes if a.get_title()]:
        assert not any("off scale" in t.get_text() for t in ax.texts)
        assert ax.get_ylim()[0] > 0.7
    assert "Caveat" not in to_markdown(blocks(res, {}))


def test_one_target_latency_plot_keeps_its_title_inside(tmp_path, kept):
    """A run that benchmarks one target (desktop-gpu alone, say) draws one 6.4 in panel: the title wraps to it,
    and the line styles it names are the variants drawn."""
    res = _results()
    one = next(iter(res["targets"]))
    res["targets"] = {one: res["targets"][one]}
    latency_vs_length(res, tmp_path)
    fig = kept[-1]
    fig.canvas.draw()
    box = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width
    title = fig._suptitle.get_text()
    assert "fp32 solid" in title and "\n" in title
    drawn = {line.get_label().split()[1] for ax in fig.axes for line in ax.get_lines()}
    assert ("int8-static dotted" in title) == ("int8-static" in drawn)


def _inside(fig, artist) -> bool:
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0 and box.y1 <= fig.bbox.height


@pytest.mark.parametrize("plot", [quality_vs_latency, latency_vs_length])
def test_one_target_figure_keeps_title_and_legend_inside(tmp_path, kept, plot):
    """One target (a desktop-gpu run, say) is one 6.4 in panel: the title wraps to it, the figure legend takes
    the columns that fit, and it sits under the panel, not over the x-axis label."""
    res = _results()
    res["targets"] = {"desktop-gpu": res["targets"]["host-cpu"]}
    for r in res["rows"]:
        r["latency"] = {"desktop-gpu": r["latency"]["host-cpu"]}
    res["machine"]["gpu"] = {"name": "NVIDIA H100 80GB HBM3"}
    plot(res, tmp_path)
    fig = kept[-1]
    fig.canvas.draw()
    assert fig.get_size_inches()[0] == pytest.approx(6.4)
    assert _inside(fig, fig._suptitle) and len(fig.legends) == 1 and _inside(fig, fig.legends[0])
    ax = next(a for a in fig.axes if a.get_title())
    assert ax.get_title().startswith("desktop-gpu (NVIDIA H100 80GB HBM3)")
    r = fig.canvas.get_renderer()
    assert fig.legends[0].get_window_extent(r).y1 <= ax.xaxis.label.get_window_extent(r).y0
    assert fig.legends[0]._ncols < 6  # six columns of these entries are wider than 6.4 in


def test_wide_figure_legend_keeps_its_columns(tmp_path, kept):
    size_vs_quality(_results(), tmp_path)
    fig = kept[-1]
    fig.canvas.draw()
    assert fig.legends[0]._ncols == 6 and _inside(fig, fig.legends[0])


def test_numbers_of_a_thousand_and_more_read_in_plain_digits(tmp_path, kept):
    """A slow row's Pareto key, a goal's value and its limit read "1200", never "1.2e+03"."""
    from eval.plots import sig
    from eval.report import _beside, _g

    assert [sig(v) for v in (1200.0, 999.7, 12345.6, 193.1, 0.7766, 1.23e-05)] == [
        "1200", "1000", "12346", "193", "0.777", "1.23e-05"]
    assert (_g(4321.0), _beside(1234.4, 1234.0), _beside(1500.0, 2000.0)) == ("4321", "1234.4", "1500")
    res = _results()
    for r in res["rows"]:
        if (r["model"], r["variant"]) == ("teacher", "int8-dynamic"):  # the most accurate row: on every front
            for i, t in enumerate(TARGETS):
                r["latency"][t]["64"]["p50_ms"] = 300.0 * (1 + i)
    quality_vs_latency(res, tmp_path)
    keys = [t.get_text() for ax in kept[-1].axes if (leg := ax.get_legend()) for t in leg.get_texts()]
    assert any("1200 ms, 0.7552" in k for k in keys), keys
    assert not [k for k in keys if "e+" in k]
