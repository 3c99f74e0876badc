"""The compact student's size and accuracy (student.vocab, embedding_dim, quantize.embedding_bits) against
a reference run's student, without re-running the baseline, eval and quantize stages for every model.

    .venv/bin/python -m tools.compact_probe --config configs/demo.toml --set student.vocab=training ... \
        [--reference runs/demo]

Reads the run's distill/student and data/test.jsonl; builds the fp32, optimized and int8-dynamic ONNX files
and the int8-dynamic .ort with the pipeline's own exporters and the run's [quantize] / [export] settings in
a temporary folder; scores each on the whole test split through ONNX Runtime (as the quantize stage does);
and, with --reference, times its int8-dynamic .ort against the reference run's export/student file at
batch 1, 1 thread (mobile-cpu's setting), loaded side by side in alternating rounds. Prints markdown; writes
nothing into either run.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from eval import latency as L
from tools.fusion_probe import alternate
from tools.cli import ToolParser, positive_int


def build(student, cfg, work: Path) -> dict[str, Path]:
    from export.ort_format import convert_to_ort
    from export.registry import ExportJob, for_variant

    job = ExportJob("student", student, work, cfg.quantize, cfg.export)
    for variant in ("fp32", "optimized", "int8-dynamic"):
        job.out, job.variant = work / f"{variant}.onnx", variant
        for_variant(variant).fn(job)
        job.sources[variant] = job.out
    files = dict(job.sources)
    files["int8-dynamic.ort"] = work / "int8-dynamic.ort"
    convert_to_ort([("student", files["int8-dynamic"], files["int8-dynamic.ort"])], cfg.export.ort_target_platform,
                   cfg.export.ort_disabled_optimizers)
    return files


def posthoc(cfg, reference: Path):
    """The reference run's trained student with this config's vocabulary / factorization applied, unretrained."""
    from distill.embeddings import compact_embeddings, find_compact
    from distill.models import load_model
    from distill.vocab import training_vocab
    from pipeline.data import read_split
    from pipeline.errors import PipelineError

    s = cfg.student
    student = load_model(reference / "distill" / "student", "student")
    if find_compact(student.model) is not None:
        raise PipelineError(f"--posthoc compacts a student with the teacher's whole table; {reference} already "
                            f"has a restricted or factorized one: leave --posthoc out to score it")
    vmap = None
    if s.vocab == "training":  # the same texts the distill stage builds the map from
        texts = [r["text"] for r in read_split(reference / "logits", "distill_set")]
        vmap, _ = training_vocab(student.tokenizer, texts, s.max_length, s.vocab_size_max)
    compact_embeddings(student.model.hf, vmap, s.embedding_dim, student.tokenizer.pad_token_id)
    student.model.eval()
    return student


def main(argv: list[str] | None = None) -> None:
    from distill.embeddings import find_compact
    from distill.models import count_params, load_model, predict_logits
    from eval.metrics import scores
    from export.checks import ort_runner, predict
    from export.ort_session import ort_session
    from pipeline.config import load_config
    from pipeline.data import read_labels, read_split
    from pipeline.errors import PipelineError

    ap = ToolParser(prog="python -m tools.compact_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], help="section.key=value, as for the pipeline")
    ap.add_argument("--reference", default="", help="a finished run folder whose student is compared")
    ap.add_argument("--posthoc", action="store_true",
                    help="no retraining: apply the run's student.vocab / embedding_dim to the --reference run's "
                         "trained student (kept rows as trained, factorized by truncated SVD) and score that")
    ap.add_argument("--length", type=positive_int, default=64)
    ap.add_argument("--rounds", type=positive_int, default=7)
    ap.add_argument("--calls", type=positive_int, default=100)
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.set)
    run = cfg.run_dir
    if args.posthoc and not args.reference:
        raise PipelineError("--posthoc needs --reference (the run whose trained student is compacted)")
    student = posthoc(cfg, Path(args.reference)) if args.posthoc else load_model(run / "distill" / "student")
    run = Path(args.reference) if args.posthoc else run  # whose data split is scored
    ref_ort = Path(args.reference) / "export" / "student" / "int8-dynamic.ort" if args.reference else None
    if ref_ort is not None and not ref_ort.is_file():
        print(f"(no timing: {ref_ort} is not there yet; it needs the reference run's export stage)")
        ref_ort = None
    labels = read_labels(run / "data")
    rows = read_split(run / "data", "test")
    texts, y = [r["text"] for r in rows], np.array([labels.index(r["label"]) for r in rows])
    bs = cfg.teacher.eval_batch_size
    params = count_params(student.model)
    torch_acc = scores(predict_logits(student.model, student.tokenizer, texts, student.max_length, bs), y, len(labels))
    compact = find_compact(student.model)
    print(f"\n{'post-hoc compacted ' if args.posthoc else ''}student of {run}: "
          f"{json.dumps(compact.spec) if compact else 'full teacher vocabulary'}, "
          f"quantize.embedding_bits = {cfg.quantize.embedding_bits}; {params['params']:,} parameters "
          f"({params['embedding_params']:,} embedding); test split {len(texts)} texts\n")
    print("| file | size bytes | test accuracy | macro-F1 |\n|---|---|---|---|")
    size = "-" if args.posthoc else (student.folder / "model.safetensors").stat().st_size
    print(f"| PyTorch | {size} | {torch_acc['accuracy']:.4f} | "
          f"{torch_acc['macro_f1']:.4f} |")
    with tempfile.TemporaryDirectory() as tmp:
        files = build(student, cfg, Path(tmp))
        for label, path in files.items():
            sc = scores(predict(ort_runner(ort_session(path, cfg.run.threads)), student.tokenizer, texts,
                                student.max_length, bs), y, len(labels))
            print(f"| {label} | {path.stat().st_size} | {sc['accuracy']:.4f} | {sc['macro_f1']:.4f} |")
        if ref_ort is None:
            return
        ids, mask = L.make_batch(L.token_stream(student.tokenizer, texts, args.length), args.length, 1,
                                 student.tokenizer.cls_token_id, student.tokenizer.sep_token_id)
        calls = {k: L.ort_runner(L.ort_session(p, 1, ["CPUExecutionProvider"]))(ids, mask)
                 for k, p in (("this run", files["int8-dynamic.ort"]), ("reference", ref_ort))}
        p50 = alternate(calls, args.rounds, L.Plan(10, args.calls, 30.0, args.calls))
        print(f"\nint8-dynamic .ort, {args.length} tokens, batch 1, 1 thread, median p50 of {args.rounds} alternating "
              f"rounds of {args.calls} calls: this run {p50['this run']:.3f} ms, reference ({ref_ort}, "
              f"{ref_ort.stat().st_size} bytes) {p50['reference']:.3f} ms, ratio {p50['this run'] / p50['reference']:.3f}")


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
