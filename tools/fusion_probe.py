"""Where the optimized and int8 files' speed comes from, measured: ONNX Runtime's fused layer-norm kernel
against the ops it replaces, and one model's graphs built with and without the fusions, timed side by side.

    .venv/bin/python -m tools.fusion_probe --config configs/demo.toml [--model student] [--length 64]

Reads a finished run (quantize/<model>/fp32.onnx, the model folder's config.json, data/test.jsonl and
Optimum's files from peer/ when the peer stage made them), builds every variant in a temporary folder with
the pipeline's own functions, and prints markdown tables. It writes nothing into the run. The README's
fusion figures come from it; the bench's head-to-head table is the per-run check of the shipped files.
"""
from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import numpy as np

from eval import latency as L
from eval.targets import host_threads
from tools.cli import ToolParser, positive_int

KERNEL_FUSED, KERNEL_UNFUSED = "SkipLayerNormalization", "Add + Add + LayerNormalization"


def _layer_norm_model(hidden: int, fused: bool) -> bytes:
    """x + bias + residual, layer-normalized: as ORT's one fused op, or as the three ops it replaces."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    io = [h.make_tensor_value_info(n, T.FLOAT, [1, "S", hidden]) for n in ("x", "r", "y")]
    inits = [nh.from_array(np.ones(hidden, np.float32), "g"), nh.from_array(np.zeros(hidden, np.float32), "b"),
             nh.from_array(np.full(hidden, 0.1, np.float32), "bias")]
    if fused:
        nodes = [h.make_node("SkipLayerNormalization", ["x", "r", "g", "b", "bias"], ["y"], domain="com.microsoft",
                             epsilon=1e-12)]
    else:
        nodes = [h.make_node("Add", ["x", "bias"], ["t"]), h.make_node("Add", ["t", "r"], ["u"]),
                 h.make_node("LayerNormalization", ["u", "g", "b"], ["y"], axis=-1, epsilon=1e-12)]
    graph = h.make_graph(nodes, "layer_norm", io[:2], io[2:], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
                        ).SerializeToString()


def alternate(calls: dict[str, object], rounds: int, plan: L.Plan) -> dict[str, float]:
    """Median over rounds of each call's p50 (ms); the order reverses every round so drift hits all alike."""
    names, p50s = list(calls), {n: [] for n in calls}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            p50s[n].append(L.summarize(L.time_calls(calls[n], plan))["p50_ms"])
    return {n: statistics.median(v) for n, v in p50s.items()}


def kernel_times(hidden: int, length: int, threads: int, rounds: int, plan: L.Plan) -> dict[str, float]:
    """p50 ms of the fused and unfused layer norm on [1, length, hidden], graph optimizations off."""
    from export.ort_session import ort_session

    rng = np.random.default_rng(0)
    feed = {k: rng.random((1, length, hidden), dtype=np.float32) for k in ("x", "r")}
    calls = {}
    for name, fused in ((KERNEL_FUSED, True), (KERNEL_UNFUSED, False)):
        sess = ort_session(_layer_norm_model(hidden, fused), threads, inter_threads=1, optimize=False,  # as written
                           quiet=False, fix=None)
        calls[name] = (lambda s: lambda: s.run(None, feed))(sess)
    return alternate(calls, rounds, plan)


def build_files(fp32: Path, heads: int, hidden: int, model_type: str, quantize, export, name: str,
                work: Path) -> dict[str, Path]:
    """The model's graphs with and without the fusions, made by the pipeline's own functions:
    label -> file (.onnx runs on any target here, .ort is the phone file)."""
    from export.optimize import optimized_file
    from export.ort_format import optimize_graph
    from export.quantize import quantize_int8_dynamic

    files = {"fp32, plain export": fp32}
    optimized_file(fp32, work / "all.onnx", heads, hidden, name, model_type, ())
    files["fp32, every fusion"] = work / "all.onnx"
    optimized_file(fp32, work / "opt.onnx", heads, hidden, name, model_type, quantize.skip_fusions)
    files[f"fp32, optimized (skip {', '.join(quantize.skip_fusions) or 'nothing'})"] = work / "opt.onnx"
    for src, tag in ((fp32, "unfused"), (work / "opt.onnx", "optimized")):
        q = work / f"int8-{tag}.onnx"
        quantize_int8_dynamic(src, q, name, quantize.per_channel)
        files[f"int8 from the {tag} graph"] = q
        for disabled, how in (((), "every ORT fusion"), (tuple(export.ort_disabled_optimizers), "pipeline default")):
            out = work / f"int8-{tag}-{len(disabled)}.ort"
            optimize_graph(q, out, export.ort_target_platform, disabled)
            files[f"int8 from the {tag} graph, .ort ({how})"] = out
    return files


def time_files(files: dict[str, Path], ids: np.ndarray, mask: np.ndarray, thread_counts: list[int], rounds: int,
               plan: L.Plan) -> dict[str, dict[int, float]]:
    """label -> {threads: p50 ms}, every file loaded side by side per thread count."""
    out: dict[str, dict[int, float]] = {k: {} for k in files}
    for t in thread_counts:
        calls = {k: L.ort_runner(L.ort_session(p, t, ["CPUExecutionProvider"]))(ids, mask) for k, p in files.items()}
        for k, v in alternate(calls, rounds, plan).items():
            out[k][t] = v
    return out


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoTokenizer

    from export.optimize import op_counts
    from pipeline.config import load_config
    from pipeline.data import read_split
    from pipeline.errors import PipelineError
    from pipeline.tasks.classification import MODEL_FOLDERS

    ap = ToolParser(prog="python -m tools.fusion_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], help="section.key=value, as for the pipeline")
    ap.add_argument("--model", default="student", choices=["student", "teacher"])
    ap.add_argument("--length", type=positive_int, default=64, help="tokens per input (batch 1)")
    ap.add_argument("--rounds", type=positive_int, default=7)
    ap.add_argument("--calls", type=positive_int, default=100, help="timed calls per file per round")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.set)
    run = cfg.run_dir
    fp32 = run / "quantize" / args.model / "fp32.onnx"
    stage, sub = MODEL_FOLDERS[args.model]
    hf_config = run / stage / sub / "config.json"
    for p, what in ((fp32, "quantize"), (hf_config, stage), (run / "data" / "test.jsonl", "data")):
        if not p.is_file():
            raise PipelineError(f"{p} is missing: run `python -m pipeline {what} --config {args.config}` first")
    hf = json.loads(hf_config.read_text())
    if hf.get("model_type") != "bert":
        raise PipelineError(f"the fusion probe is for BERT-family encoders; {args.model} is {hf.get('model_type')!r}")
    tok = AutoTokenizer.from_pretrained(run / "quantize" / args.model / "tokenizer")
    texts = [r["text"] for r in read_split(run / "data", "test")]
    ids, mask = L.make_batch(L.token_stream(tok, texts, args.length), args.length, 1, tok.cls_token_id,
                             tok.sep_token_id)
    plan = L.Plan(10, args.calls, 30.0, args.calls)
    threads = sorted({1, host_threads()})
    kern = kernel_times(hf["hidden_size"], args.length, 1, args.rounds, plan)
    print(f"\nLayer norm on [1, {args.length}, {hf['hidden_size']}] fp32, 1 thread, p50 over {args.rounds} "
          f"alternating rounds of {args.calls} calls:\n\n| kernel | p50 us |\n|---|---|")
    for k, v in kern.items():
        print(f"| {k} | {v * 1e3:.1f} |")
    with tempfile.TemporaryDirectory() as tmp:
        files = build_files(fp32, hf["num_attention_heads"], hf["hidden_size"], "bert", cfg.quantize, cfg.export,
                            args.model, Path(tmp))
        peer = run / "peer" / args.model
        for label, folder in (("Optimum fp32", peer / "fp32"), ("Optimum int8", peer / "int8-dynamic")):
            found = sorted(folder.glob("*.onnx")) if folder.is_dir() else []
            if found:
                files[label] = found[0]
        times = time_files(files, ids, mask, threads, args.rounds, plan)
        print(f"\n{args.model}, {args.length} tokens, batch 1: p50 ms, the files loaded side by side, median of "
              f"{args.rounds} alternating rounds of {args.calls} calls\n")
        print("| file | nodes | " + " | ".join(f"{t} thread(s)" for t in threads) + " |")
        print("|---|---|" + "---|" * len(threads))
        for label, path in files.items():
            nodes = sum(op_counts(path).values()) if path.suffix == ".onnx" else "-"
            print(f"| {label} | {nodes} | " + " | ".join(f"{times[label][t]:.3f}" for t in threads) + " |")


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
