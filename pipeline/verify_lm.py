"""verify-bundle for generation bundles (metadata.json "task": "generation"):

1. every file listed in metadata.json exists with its sha256 (a changed file fails, naming it); the graph,
   genai_config.json, tokenizer.json and samples.json must be among them;
2. in a fresh Python process (onnxruntime, tokenizers and, when installed, onnxruntime-genai; nothing from
   this repo): tokenizer.json encodes each prompt of samples.json to the stored ids; a plain ONNX Runtime
   greedy loop with the KV cache, wired only from genai_config.json, and onnxruntime-genai loading the
   folder each give back the stored greedy continuation, token for token.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from pipeline.errors import PipelineError

METADATA = "metadata.json"
REQUIRED = ("genai_config.json", "tokenizer.json", "config.json", "samples.json")


def is_generation(bundle: Path) -> bool:
    try:
        return json.loads((Path(bundle) / METADATA).read_text()).get("task") == "generation"
    except (OSError, ValueError, AttributeError):
        return False  # the classification checks report a missing or broken metadata.json


def check_files(bundle: Path) -> dict:
    from pipeline.manifest import sha256_file

    meta = json.loads((bundle / METADATA).read_text())
    files = meta.get("files") or {}
    for rel in (*REQUIRED, meta.get("graph", {}).get("file", "the decoder graph")):
        if rel not in files:
            raise PipelineError(f"{bundle}: metadata.json does not list {rel}; rebuild the bundle with `make bundle`")
    for rel, info in files.items():
        path = bundle / rel
        if not path.resolve().is_relative_to(bundle.resolve()):
            raise PipelineError(f"{bundle}: metadata.json lists {rel}, outside the bundle; rebuild it with `make bundle`")
        if not path.is_file():
            raise PipelineError(f"{bundle}: {rel} is missing; re-run the bundle stage (`make bundle`) or copy the "
                                f"whole folder again")
        if path.stat().st_size != info["bytes"] or sha256_file(path) != info["sha256"]:
            raise PipelineError(f"{bundle}: {rel} was changed (sha256 does not match metadata.json); restore it "
                                f"or rebuild the bundle with `make bundle`")
    extra = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
                   if p.is_file() and p.name != METADATA and p.relative_to(bundle).as_posix() not in files)
    return {"meta": meta, "checked": len(files), "unlisted": extra}


def ort_greedy(bundle: Path, prompt: list[int], n: int, eos: int) -> list[int]:
    """Greedy decode with the KV cache through plain onnxruntime, every name and size from genai_config.json
    (what an app porting the loop reads); stops after eos."""
    import numpy as np

    from export.ort_session import ort_session

    cfg = json.loads((bundle / "genai_config.json").read_text())["model"]["decoder"]
    names, outs = cfg["inputs"], cfg["outputs"]
    sess = ort_session(bundle / cfg["filename"], quiet=False, fix=None)
    layers = range(cfg["num_hidden_layers"])
    empty = np.zeros((1, cfg["num_key_value_heads"], 0, cfg["head_size"]), np.float32)
    past = {names[k] % i: empty for i in layers for k in ("past_key_names", "past_value_names")}
    wanted = [outs["logits"]] + [outs[k] % i for i in layers for k in ("present_key_names", "present_value_names")]
    ids, done, out = list(prompt), 0, []
    while len(out) < n:
        feed = {names["input_ids"]: np.array([ids], np.int64),
                names["attention_mask"]: np.ones((1, done + len(ids)), np.int64),
                names["position_ids"]: np.arange(done, done + len(ids), dtype=np.int64)[None], **past}
        res = sess.run(wanted, feed)
        out.append(int(res[0][0, -1].argmax()))
        if out[-1] == eos:
            break
        past = {names[k] % i: res[1 + 2 * i + j] for i in layers
                for j, k in enumerate(("past_key_names", "past_value_names"))}
        done += len(ids)
        ids = [out[-1]]
    return out


def genai_greedy(bundle: Path, prompts: list[list[int]], n: list[int]) -> list[list[int]] | str:
    """onnxruntime-genai's greedy tokens for each prompt, or why it could not run."""
    try:
        import onnxruntime_genai as og
    except ImportError as e:
        return f"onnxruntime-genai is not installed ({e}); pip install onnxruntime-genai"
    model = og.Model(str(bundle))
    out = []
    for p, k in zip(prompts, n):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(p) + k, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(p)
        while not gen.is_done():
            gen.generate_next_token()
        out.append([int(t) for t in gen.get_sequence(0)][len(p):])
    return out


def _child(bundle: Path) -> dict:
    """Runs in the fresh process."""
    from tokenizers import Tokenizer

    meta = json.loads((bundle / METADATA).read_text())
    samples = json.loads((bundle / meta["samples_file"]).read_text())
    eos = meta["special_ids"]["eos_token_id"]
    tok = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    prompts = [s["prompt_ids"] for s in samples]
    n = [s["max_new_tokens"] for s in samples]
    return {"token_ids": [tok.encode(s["prompt"], add_special_tokens=False).ids for s in samples],
            "onnxruntime": [ort_greedy(bundle, p, k, eos) for p, k in zip(prompts, n)],
            "onnxruntime-genai": genai_greedy(bundle, prompts, n)}


def in_fresh_process(bundle: Path, timeout_s: int = 300) -> dict:
    cmd = [sys.executable, "-m", "pipeline.verify_lm", "--child", str(bundle.resolve())]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:400]
        raise PipelineError(f"{bundle}: running the decoder in a fresh process failed ({last}); install onnxruntime "
                            f"and tokenizers, or rebuild the bundle with `make bundle`")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verify_lm_bundle(bundle: Path) -> dict:
    """Every check above; raises PipelineError on the first failure, returns a summary otherwise."""
    bundle = Path(bundle)
    files = check_files(bundle)
    meta = files["meta"]
    samples = json.loads((bundle / meta["samples_file"]).read_text())
    got = in_fresh_process(bundle)
    for s, ids in zip(samples, got["token_ids"]):
        if ids != s["prompt_ids"]:
            raise PipelineError(f"{bundle}: tokenizer.json encodes {s['prompt'][:60]!r} as {ids[:12]}..., not the "
                                f"stored {s['prompt_ids'][:12]}...; rebuild the bundle with `make bundle`")
    summary = {"bundle": str(bundle), "task": "generation", "files_checked": files["checked"],
               "unlisted_files": files["unlisted"], "samples": len(samples), "runtimes": {}}
    for runtime in ("onnxruntime", "onnxruntime-genai"):
        rows = got[runtime]
        if isinstance(rows, str):
            summary["runtimes"][runtime] = {"status": "skipped", "reason": rows}
            continue
        for s, tokens in zip(samples, rows):
            want = s["continuation_ids"]
            if tokens != want:
                at = next((i for i, (a, b) in enumerate(zip(tokens, want)) if a != b), min(len(tokens), len(want)))
                raise PipelineError(f"{bundle}: {runtime} continues {s['prompt'][:60]!r} differently from samples.json "
                                    f"at token {at + 1} ({tokens[at:at + 4]} instead of {want[at:at + 4]}); rebuild "
                                    f"the bundle with `make bundle`")
        summary["runtimes"][runtime] = {"file": meta["graph"]["file"], "samples_match": len(samples),
                                        "tokens": sum(len(s["continuation_ids"]) for s in samples)}
    return summary


def run_cli(args: argparse.Namespace) -> int:
    try:
        s = verify_lm_bundle(Path(args.bundle))
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for runtime, r in s["runtimes"].items():
        if "status" in r:
            print(f"  {runtime}: {r['status']} ({r['reason']})")
        else:
            print(f"  {runtime}: {r['file']}: {r['samples_match']}/{s['samples']} greedy continuations match "
                  f"({r['tokens']} tokens)")
    if s["unlisted_files"]:
        print(f"  note: files not in metadata.json (not checked): {', '.join(s['unlisted_files'][:5])}")
    print(f"bundle OK: {s['bundle']} ({s['files_checked']} files, sha256 match)")
    return 0


if __name__ == "__main__":  # the fresh-process half: python -m pipeline.verify_lm --child DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", required=True)
    print(json.dumps(_child(Path(parser.parse_args().child))))
