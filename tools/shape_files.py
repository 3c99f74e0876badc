"""The exported files of a BERT student of a given shape, with random weights: what a student of that shape
costs on a target, before training one (latency does not depend on the weight values; accuracy does, so
nothing here is scored).

    python -m tools.shape_files --config configs/demo.toml --tokenizer runs/demo/distill/student --out /tmp/old \
        --set student.vocab=teacher --set student.embedding_dim=0 --set quantize.embedding_bits=8 \
        --set quantize.cls_only_last_layer=false

writes fp32 / optimized / int8-dynamic `.onnx` and the int8-dynamic `.ort` into --out with the pipeline's
own exporters and this config's [student] / [quantize] / [export] settings; time them against a run's
files with `python -m tools.compare_files`. The line above rebuilds the full-vocabulary student the demo
used before its vocabulary settings (README, "Smaller and longer").
"""
from __future__ import annotations

from pathlib import Path

from tools.cli import ToolParser


def build(cfg, tokenizer_dir: Path, out: Path) -> dict[str, Path]:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from distill.embeddings import compact_embeddings
    from distill.vocab import VocabMap
    from distill.models import HFLogits, LoadedModel
    from tools.compact_probe import build as export_files
    from pipeline.config import student_positions

    s = cfg.student
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(cfg.run.seed)
    hf = BertForSequenceClassification(BertConfig(
        vocab_size=len(tok), hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
        intermediate_size=s.ffn, max_position_embeddings=student_positions(s), num_labels=3,
        pad_token_id=tok.pad_token_id or 0)).eval()
    if s.vocab == "training" or s.embedding_dim:  # rows: the cap (no texts here), like a capped training vocabulary
        rows = min(s.vocab_size_max - 1, len(tok)) if s.vocab == "training" else len(tok)
        vmap = VocabMap(torch.arange(rows).numpy(), len(tok), rows < len(tok))
        compact_embeddings(hf, vmap, s.embedding_dim, tok.pad_token_id)
    loaded = LoadedModel(HFLogits(hf).eval(), tok, ["0", "1", "2"], "hf", s.max_length, tokenizer_dir)
    out.mkdir(parents=True, exist_ok=True)
    return export_files(loaded, cfg, out)  # the same files tools.compact_probe builds, with the same exporters


def main(argv: list[str] | None = None) -> None:
    from pipeline.config import load_config
    from pipeline.errors import PipelineError

    ap = ToolParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/demo.toml")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--tokenizer", type=Path, required=True, help="a model folder with the teacher's tokenizer files")
    ap.add_argument("--out", type=Path, required=True, help="folder for the files (created)")
    a = ap.parse_args(argv)
    cfg = load_config(a.config, a.set)
    if not a.tokenizer.is_dir():
        raise PipelineError(f"--tokenizer {a.tokenizer} is not a folder (use a run's distill/student)")
    files = build(cfg, a.tokenizer, a.out)
    for name, path in files.items():
        print(f"{path.stat().st_size:>12,} B  {path}  ({name})")


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
