"""The quantize stage's NPU part: for a student.arch = "npu" model, the static per-length files of every
quantize.npu_variants entry (export/npu.py), each checked against PyTorch, scored on the test split as an
app would call it (one text at a time, padded to the shortest length that holds it) and run through ORT's
mobile usability checker at every length. The rows go to quantize/npu.json. A variant whose check fails (argmax
agreement below quantize.min_argmax_agreement at any length) is recorded there as "failed" with its numbers, like
every lossy file, and the stage goes on; compile, bench and bundle skip it and say so."""
from __future__ import annotations

import numpy as np

from pipeline.task import StageContext

NPU_FOLDER = "npu"  # quantize/<model>/npu/<variant>-<length>.onnx (+ lookup.onnx)


def npu_rows(ctx: StageContext, name: str, loaded, test_texts: list[str], y: list[int], check_texts: list[str],
             calibration: list[str], n_labels: int) -> list[dict]:
    from distill.batching import encode
    from eval.metrics import scores
    from eval.npu import check_onnx
    from export.npu import NpuRunner, check_variant, get_npu_variant, length_references, write_variant
    from export.onnx_export import file_opset

    q = ctx.cfg.quantize
    lengths = sorted(set(q.npu_lengths))
    top = lengths[-1]
    pad_id = loaded.pad_id
    calib_ids, check_ids, test_ids = (encode(loaded.tokenizer, texts, top)[0]
                                      for texts in (calibration, check_texts, test_texts))
    refs = length_references(loaded.model, check_ids, lengths)  # every check text at every length
    folder = ctx.out / name / NPU_FOLDER
    rel = lambda p: f"{ctx.name}/{p.relative_to(ctx.out).as_posix()}"  # noqa: E731
    rows = []
    for vname in q.npu_variants:
        v = get_npu_variant(vname)
        made = write_variant(loaded.model, folder, vname, lengths, q.opset, calib_ids, pad_id, name,
                             q.cls_only_last_layer)
        runner = NpuRunner(made["files"], v, made["lookup"], max(ctx.cfg.run.threads, 1))
        what = f"{name} NPU {vname} ({rel(folder)})"
        check = check_variant(runner, refs, pad_id, q.min_argmax_agreement, what)
        sc = scores(runner.logits(test_ids, pad_id), np.array(y), n_labels)
        readiness = {str(n): {"fixed_shape": [1, n], **check_onnx(p)} for n, p in made["files"].items()}
        sizes = {str(n): p.stat().st_size for n, p in made["files"].items()}
        rows.append({"model": name, "variant": f"npu-{vname}", "format": "onnx-npu", "provider": v.provider,
                     "status": "passed" if check["passed"] else "failed",
                     "lengths": lengths, "files": {str(n): rel(p) for n, p in made["files"].items()},
                     "file": rel(made["files"][top]), "lookup": rel(made["lookup"]) if made["lookup"] else None,
                     "size_bytes": sizes[str(top)], "sizes": sizes,
                     "lookup_size_bytes": made["lookup"].stat().st_size if made["lookup"] else None,
                     # read from the file: the 16-bit QDQ files are opset 21 whatever quantize.opset says
                     "opset": file_opset(made["files"][top]), "check": check, **sc, "readiness": readiness,
                     "details": made["details"],
                     "accuracy_note": f"each test text alone, padded to the shortest of {lengths} that holds it "
                                      f"(longer ones cut to {top} tokens)"})
        mine = readiness.get(str(top), {}).get(v.provider, {}).get("as_is", {})
        # the usability checker has no section for every provider (none for QNN: the compile stage says)
        where = (f"{v.provider} at {top}: {mine['supported_nodes']}/{mine['total_nodes']} nodes in "
                 f"{mine.get('partitions')} partition(s)" if mine.get("total_nodes") is not None else
                 f"{v.provider}: no usability-checker verdict (the compile stage compiles it)")
        print(f"[quantize] {name} npu {vname}: accuracy {sc['accuracy']:.4f}, argmax agreement {check['value']:.3f}, "
              f"{where}" + ("" if check["passed"] else " FAILED: not compiled, timed or shipped"))
    return rows
