"""Stage wiring for compile: Qualcomm's HTP compiler (eval/qnn.py) on every static QDQ file the quantize
stage wrote, for every chip in npu.chips and every length in quantize.npu_lengths, each compiled graph run
on the x86 HTP emulator against the same file on ONNX Runtime's CPU provider.

Files compiled: quantize/<model>/int8-static.onnx and every quantize variant whose name contains "w8a16"
(students and LSTMs; fixed to [1, length] with eval.npu.fix_shapes), and every per-length file of the npu
student (quantize/npu.json). Writes compile/qnn.json and the context models
compile/qnn/<model>/<chip>/<variant>-<length>_ctx.onnx (+ _ctx_qnn.bin). A graph the compiler takes but whose
emulator logits disagree with the CPU's (argmax agreement below quantize.min_argmax_agreement, a flip that is a
near tie counting as agreeing: eval/qnn.py near_ties) is recorded as "failed: disagrees" and never shipped. A
file that failed its check in the quantize stage (status "failed" in variants.json or npu.json) is not
compiled: its rows say "skipped" with that reason. Where onnxruntime-qnn is missing, qnn.json records why.
"""
from __future__ import annotations

import json
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pipeline.data import read_split
from pipeline.task import StageContext
from pipeline.tasks.skips import QNN_JSON, skip_compile

log = logging.getLogger("pocketformer")
CONTEXT_FOLDER = "qnn"
# the models whose files are compiled: what ships to a phone (the teacher does not)
MODELS = ("student", "lstm", "lstm_distilled")
# test texts a second chip's emulator run repeats to show its numerics equal the first chip's
PROBE_TEXTS = 1


def quantize_failure(r: dict, records: str) -> str | None:
    """Why a quantize row's file is not compiled (it failed its check there), or None."""
    if r.get("status") != "failed":
        return None
    c = r.get("check") or {}
    return (f"not compiled: it failed its check in the quantize stage ({records}: argmax agreement "
            f"{c.get('value', float('nan')):.1%} < {c.get('tolerance', float('nan')):.1%}, "
            f"quantize.min_argmax_agreement)")


def jobs(quantize: Path, lengths: list[int]) -> list[dict]:
    """(model, variant, length, source file, its kind) for every file to compile, from quantize/'s records;
    a file that failed its quantize check is a job with its reason ("failed"), recorded and never compiled."""
    out = []
    for r in json.loads((quantize / "variants.json").read_text()):
        v = r["variant"]
        if r["model"] in MODELS and r["format"] == "onnx" and (v == "int8-static" or "w8a16" in v):
            tok = quantize / r["model"] / "tokenizer"
            max_len = json.loads((tok / "pocketformer.json").read_text()).get("max_length") \
                if (tok / "pocketformer.json").is_file() else None
            out += [{"model": r["model"], "variant": v, "length": n, "src": quantize.parent / r["file"], "fix": True,
                     "lookup": None, "tokenizer": tok, "too_long": bool(max_len and n > max_len), "max_length": max_len,
                     "failed": quantize_failure(r, "quantize/variants.json")} for n in lengths]
    npu = quantize / "npu.json"
    for r in json.loads(npu.read_text()) if npu.is_file() else []:
        out += [{"model": r["model"], "variant": r["variant"], "length": int(n), "src": quantize.parent / f,
                 "fix": False, "lookup": quantize.parent / r["lookup"] if r.get("lookup") else None,
                 "tokenizer": quantize / r["model"] / "tokenizer", "too_long": False, "max_length": None,
                 "failed": quantize_failure(r, "quantize/npu.json")}
                for n, f in sorted(r["files"].items(), key=lambda kv: int(kv[0]))]
    return out


def feeds(job: dict, onnx_path: Path, texts: list[str]) -> list[dict[str, np.ndarray]]:
    """Each text alone as an app would send it: tokenized, cut to the file's length, padded to it; inputs in
    the file's own dtypes (the npu student's int32 ids; looked-up embeddings where it takes those)."""
    import onnx
    from transformers import AutoTokenizer

    from distill.batching import encode
    from export.ort_session import ort_session
    from pipeline.tasks.classification.replay import padded

    tok = AutoTokenizer.from_pretrained(job["tokenizer"])
    n, pad_id = job["length"], tok.pad_token_id or 0
    ids, _ = encode(tok, texts, n)
    model = onnx.load(str(onnx_path), load_external_data=False)
    types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in model.graph.input}
    lookup = ort_session(job["lookup"], 1) if job["lookup"] is not None else None
    out = []
    for s in ids:
        x, m = padded(s, n, pad_id, np.int64)  # s holds at most n ids (encoded to n)
        feed = {"input_ids": x, "attention_mask": m, "token_type_ids": np.zeros_like(x)}
        if "embeddings" in types:
            name = lookup.get_inputs()[0].name
            want = np.int32 if "int32" in lookup.get_inputs()[0].type else np.int64
            feed["embeddings"] = lookup.run(None, {name: x.astype(want)})[0]
        out.append({k: feed[k].astype(t) for k, t in types.items()})
    return out


def emulate_compiled(recs: dict[str, dict], job: dict, src: Path, texts: list[str], every_chip: bool = False,
                     workers: int | None = None) -> dict[str, dict]:
    """{chip: emulator numerics} for every chip whose compile record says compiled, on texts fed as an app
    sends them. The emulator is slow (about a second per text at 64 tokens on one x86 core), and its logits
    have not differed between chips on any graph measured (the demo's students at 16-128 tokens, 8 Gen 2 /
    8 Gen 3 / 8 Elite: bitwise identical). So unless every_chip: the first compiled chip runs every text;
    each other chip runs the first PROBE_TEXTS and, where its logits there are bitwise identical to the
    first chip's, takes the first chip's numerics (recorded as "numerics_from"); where they differ, it runs
    every text itself. One process per emulator run, `workers` at a time (default: this process's cores)."""
    from eval.qnn import emulate
    from eval.targets import host_threads

    done = [c for c, rec in recs.items() if rec["compiled"]]
    if not done:
        return {}
    inputs = feeds(job, src, texts)
    run = lambda c, feed: emulate(Path(recs[c]["context"]), src, c, feed)  # noqa: E731
    with ThreadPoolExecutor(max(1, min(len(done), workers or host_threads()))) as pool:
        if every_chip or len(done) == 1:
            return {c: _public(n) for c, n in zip(done, pool.map(lambda c: run(c, inputs), done))}
        ref, others = done[0], done[1:]
        full = pool.submit(run, ref, inputs)
        probes = dict(zip(others, pool.map(lambda c: run(c, inputs[:PROBE_TEXTS]), others)))
        first = full.result()
        out = {ref: _public(first)}
        for c, probe in probes.items():
            same = "error" not in first and "error" not in probe and \
                np.array_equal(probe["logits"], first["logits"][:PROBE_TEXTS])
            if same:
                out[c] = {**_public(first), "numerics_from": ref, "probe_texts": len(probe["logits"]),
                          "emulator_seconds_per_inference": probe["emulator_seconds_per_inference"]}
            else:  # the chips' numerics differ on this graph (or a run died): every text on this chip too
                log.info("[compile] %s: the emulator's logits differ from %s's on the probe text; running all "
                         "%d texts", c, ref, len(inputs))
                out[c] = _public(run(c, inputs))
        return out


def _public(num: dict) -> dict:
    """An emulate() result without its logit arrays (qnn.json holds the summary only)."""
    return {k: v for k, v in num.items() if k not in ("logits", "cpu_logits")}


def stage_compile(ctx: StageContext) -> dict:
    """Compile every static QDQ file for every chip (eval/qnn.py) and check it on the HTP emulator.

    Reads quantize/variants.json, quantize/npu.json, their .onnx files, quantize/<model>/tokenizer/ and
    data/test.jsonl. Writes compile/qnn.json and compile/qnn/<model>/<chip>/<variant>-<length>_ctx.onnx
    (+ _ctx_qnn.bin)."""
    from eval.qnn import EMULATOR_NOTE, get_chip, unavailable_reason
    from eval.targets import host_threads

    cfg, q = ctx.cfg, ctx.cfg.quantize
    chips = list(dict.fromkeys(cfg.npu.chips))  # known chip names: checked when the config loaded
    if not chips:
        return skip_compile(ctx, "npu.chips is empty")
    why = unavailable_reason()
    if why:
        log.warning("[compile] the HTP compile is skipped: %s", why)
        return skip_compile(ctx, why)
    todo = jobs(ctx.input("quantize"), sorted(set(q.npu_lengths)))
    texts = [r["text"] for r in read_split(ctx.input("data"), "test")]
    sample = texts[: cfg.npu.emulator_samples] if cfg.npu.emulator_samples else texts
    rel = lambda p: f"{ctx.name}/{Path(p).relative_to(ctx.out).as_posix()}"  # noqa: E731
    every = cfg.npu.emulator_chips == "all"
    # imported here, before the threads: transformers resolves AutoTokenizer lazily, and two threads doing
    # that first import at once can see a half-initialised module (ImportError)
    import onnx  # noqa: F401
    from transformers import AutoTokenizer  # noqa: F401
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max(1, host_threads())) as pool:
        # one job (compile for every chip, then the emulator) per core: the compiler and the emulator run
        # in their own single-threaded processes, so jobs side by side keep both cores busy
        # longest first (the emulator's time grows with the length, the LSTMs compile slowest), so the last
        # job to start is a short one and neither core waits long at the end; rows keep the jobs' order
        order = sorted(range(len(todo)), key=lambda i: (-todo[i]["length"], todo[i]["model"] == "student"))
        done = dict(zip(order, pool.map(lambda i: _compile_job(ctx, todo[i], chips, Path(tmp), sample, every, rel),
                                        order)))
    rows = [r for i in range(len(todo)) for r in done[i]]
    doc = {"compiler": _versions(), "chips": {c: get_chip(c).name for c in chips},
           "emulator_note": EMULATOR_NOTE,
           "numerics": f"logits of the first {len(sample)} test texts (each alone, cut or padded to the file's "
                       f"length) on the HTP emulator vs the same file on ONNX Runtime's CPU provider"
                       + ("" if every or len(chips) == 1 else
                          f"; on the first compiled chip, the others run the first {PROBE_TEXTS} and take its "
                          f"numerics where their logits there are bitwise identical (numerics_from)"),
           "emulator_chips": cfg.npu.emulator_chips if len(chips) > 1 else "all",
           "min_argmax_agreement": q.min_argmax_agreement, "rows": rows}
    (ctx.out / QNN_JSON).write_text(json.dumps(doc, indent=2))
    for r in rows:
        if r["status"].startswith("failed"):
            log.warning("[compile] %s %s @%s %s: %s", r["model"], r["variant"], r["length"], r["chip"], r["reason"])
    return {"rows": len(rows), "compiled": sum(bool(r["compiled"]) for r in rows),
            "passed": sum(r["status"] == "passed" for r in rows), "emulator_samples": len(sample)}


def _compile_job(ctx: StageContext, job: dict, chips: list[str], tmp: Path, sample: list[str], every: bool,
                 rel) -> list[dict]:
    """qnn.json's rows for one file at one length: compiled for every chip, checked on the emulator."""
    from eval.npu import fix_shapes
    from eval.qnn import compile_htp

    base = {"model": job["model"], "variant": job["variant"], "length": job["length"],
            "file": Path(job["src"]).relative_to(ctx.run_dir).as_posix(),
            "fixed_shape": [1, job["length"]] if job["fix"] else "as written"}
    if job.get("failed"):  # recorded with its numbers by the quantize stage; never compiled or shipped
        print(f"[compile] {job['model']} {job['variant']} @{job['length']}: skipped, {job['failed']}")
        return [{**base, "chip": c, "status": "skipped", "compiled": False, "reason": job["failed"]} for c in chips]
    if job["too_long"]:
        return [{**base, "chip": c, "status": "skipped", "compiled": False,
                 "reason": f"{job['length']} tokens is past {job['model']}'s max_length ({job['max_length']})"}
                for c in chips]
    src = fix_shapes(job["src"], tmp / f"{job['model']}-{job['variant']}-{job['length']}.onnx", 1,
                     job["length"]) if job["fix"] else Path(job["src"])
    recs = {c: compile_htp(src, c, ctx.out / CONTEXT_FOLDER / job["model"] / c, f"{job['variant']}-{job['length']}")
            for c in chips}
    nums = emulate_compiled(recs, job, src, sample, every_chip=every, workers=1)
    return [_row(base, recs[c], nums.get(c), rel, ctx.cfg.quantize.min_argmax_agreement) for c in chips]


def agreement(num: dict) -> float:
    """The emulator's argmax agreement that the verdict reads: flips that are near ties (eval/qnn.py
    near_ties) count as agreeing."""
    return num["argmax_agreement"] + num.get("near_ties", 0) / max(1, num["samples"])


def _row(base: dict, rec: dict, num: dict | None, rel, minimum: float) -> dict:
    """One qnn.json row: the compile record, the emulator's numerics and the verdict; printed as one line."""
    row = {**base, **rec}
    if rec["context"]:
        row["context"] = rel(rec["context"])
    if num is None:
        row["status"] = "not compiled"
    else:
        row["emulator"] = num
        if "error" in num:
            row["status"] = "failed: emulator"
            row["reason"] = f"the compiled graph did not run on the HTP emulator: {num['error']}"
        elif agreement(num) < minimum:
            ties = num.get("near_ties", 0)
            row["status"] = "failed: disagrees"
            row["reason"] = (f"on the HTP emulator its argmax agrees with the same file on the CPU on only "
                             f"{num['argmax_agreement']:.1%} of {num['samples']} test texts"
                             + (f" ({agreement(num):.1%} with its {ties} near tie(s))" if ties else "")
                             + f"; the minimum is {minimum:.1%} (quantize.min_argmax_agreement): never shipped")
        else:
            row["status"] = "passed"
    ties = (num or {}).get("near_ties", 0)
    print(f"[compile] {row['model']} {row['variant']} @{row['length']} {row['chip']}: {row['status']}, "
          f"{row['nodes_on_htp']}/{row['nodes_total']} nodes on the HTP"
          + (f", unsupported: {', '.join(sorted({u['type'] for u in rec['unsupported']}))}" if rec["unsupported"] else "")
          + (f", emulator agreement {num['argmax_agreement']:.3f}" if num and "argmax_agreement" in num else "")
          + (f" ({ties} near tie(s), eval/qnn.py TIE_SPREAD)" if ties else ""))
    return row


def _versions() -> dict:
    from contextlib import suppress
    from importlib.metadata import PackageNotFoundError, version

    out = dict.fromkeys(("onnxruntime", "onnxruntime-qnn"))
    for pkg in out:
        with suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out
