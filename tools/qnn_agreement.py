"""How far a compiled HTP graph agrees with its source file, on more test texts than the compile stage's
sample: every npu-student file of a finished run at one length, per chip, on the first N test texts (each
alone, as an app sends it), through Qualcomm's HTP emulator (onnxruntime-qnn) against ONNX Runtime's CPU
provider. The emulator runs about a second per text at 64 tokens on one x86 core, so the whole test split is
slow; chips run in parallel processes.

    python -m tools.qnn_agreement runs/demo --length 64 --texts 300 [--chips 8gen2 8gen3 8elite] [--out f.json]
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from pipeline.errors import PipelineError
from tools.cli import ToolParser, non_negative_int, positive_int


def main(argv: list[str] | None = None) -> int:
    from eval.qnn import DEFAULT_CHIPS, compile_htp, unavailable_reason
    from pipeline.data import read_split
    from pipeline.tasks.classification.compile import emulate_compiled, quantize_failure

    ap = ToolParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="a finished run folder with quantize/npu.json")
    ap.add_argument("--length", type=positive_int, default=64)
    ap.add_argument("--texts", type=non_negative_int, default=300, help="first N test texts (0 = the whole test split)")
    ap.add_argument("--chips", nargs="+", default=DEFAULT_CHIPS)
    ap.add_argument("--every-chip", action="store_true",
                    help="every text on every chip (default: the others run one text and reuse the first chip's "
                         "numerics where their logits are bitwise identical, as the compile stage does)")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here too")
    a = ap.parse_args(argv)
    why = unavailable_reason()
    if why:
        raise PipelineError(why)
    quantize = a.run_dir / "quantize"
    if not (quantize / "npu.json").is_file():
        raise PipelineError(f"{quantize / 'npu.json'} does not exist: give a run folder whose quantize "
                         f"stage made npu-student files (student.arch = \"npu\"), e.g. runs/demo")
    texts = [r["text"] for r in read_split(a.run_dir / "data", "test")]
    texts = texts[: a.texts] if a.texts else texts
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in json.loads((quantize / "npu.json").read_text()):
            f = r["files"].get(str(a.length))
            if f is None:
                continue
            if why_not := quantize_failure(r, "quantize/npu.json"):  # as the compile stage: never compiled or shipped
                print(f"{r['variant']:<20} {a.length:>4} {why_not}", flush=True)
                failed.append(r["variant"])
                continue
            job = {"model": r["model"], "variant": r["variant"], "length": a.length, "src": a.run_dir / f,
                   "lookup": a.run_dir / r["lookup"] if r.get("lookup") else None,
                   "tokenizer": quantize / r["model"] / "tokenizer"}
            recs = {c: compile_htp(job["src"], c, Path(tmp) / c, f"{r['variant']}-{a.length}") for c in a.chips}
            nums = emulate_compiled(recs, job, job["src"], texts, every_chip=a.every_chip)
            for c in a.chips:
                num = nums.get(c, {})
                row = {"variant": r["variant"], "length": a.length, "chip": c, "compiled": recs[c]["compiled"],
                       "nodes": f"{recs[c]['nodes_on_htp']}/{recs[c]['nodes_total']}",
                       "context_bytes": recs[c]["context_bytes"], **num}
                rows.append(row)
                print(f"{row['variant']:<20} {a.length:>4} {c:<7} compiled={row['compiled']!s:<5} nodes {row['nodes']:<9} "
                      f"context {row['context_bytes'] or 0:>10,} B  agreement "
                      f"{num.get('argmax_agreement', float('nan')):.4f} of {num.get('samples', 0)}  "
                      f"max|diff| {num.get('max_abs_diff', float('nan')):.4g}", flush=True)
    if not rows:
        raise PipelineError(f"{quantize / 'npu.json'} lists no npu-student file at {a.length} tokens "
                         + (f"that passed its quantize check (failed: {', '.join(failed)})" if failed else
                            "(quantize.npu_lengths, student.arch = \"npu\")"))
    if a.out:
        a.out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
