"""verify-bundle for generation bundles (metadata.json "task": "generation"), after pipeline.verify has checked
every listed file's sha256:

1. the graph, genai_config.json, tokenizer.json and samples.json must be among the listed files, and the
   metadata and samples must have the shape the replay reads;
2. in a fresh Python process (onnxruntime, tokenizers and, when installed, onnxruntime-genai; nothing from
   this repo): tokenizer.json encodes each prompt of samples.json to the stored ids and decodes each stored
   continuation to the stored text; a plain ONNX Runtime
   greedy loop with the KV cache, wired only from genai_config.json, and onnxruntime-genai loading the
   folder each give back the stored greedy continuation, token for token.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from export.app_samples import generation_samples
from pipeline.errors import PipelineError
from pipeline.verify_bundle_meta import (METADATA, bundle_kind, check_app_samples, fresh_process, int_list, is_int,
                                         need, read_json, require_digest, resolve)

# what the runtimes read: onnxruntime-genai the genai and tokenizer files, transformers.js the configs too
# the decoder's shape as metadata.json, genai_config.json's decoder and config.json (but head_size) give it
SHAPE = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "head_size")
REQUIRED = ("genai_config.json", "tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json",
            "samples.json")


def check_metadata(bundle: Path, meta: dict) -> dict:
    """A generation bundle's runtime files, graph, special ids and samples file, checked for the shape the
    replay relies on (a malformed entry is one PipelineError naming it, never a traceback)."""
    files = meta["files"]
    graph = meta.get("graph")
    need(isinstance(graph, dict) and isinstance(graph.get("file"), str), bundle, "'graph' needs a 'file'")
    for rel in (*REQUIRED, graph["file"]):
        resolve(bundle, rel, "graph.file" if rel == graph["file"] else "files")
        need(rel in files, bundle, f"'files' does not list {rel}, so its sha256 is unchecked")
    ids = meta.get("special_ids")
    need(isinstance(ids, dict) and is_int(ids.get("eos_token_id")), bundle, "'special_ids' needs 'eos_token_id'")
    need(meta.get("samples_file") == "samples.json", bundle, "'samples_file' must be samples.json")
    trained, context = meta.get("trained_context_length"), graph.get("context_length")
    need(trained is None or (is_int(trained) and is_int(context) and 0 < trained <= context), bundle,
         f"'trained_context_length' is {trained!r}: it must be a positive integer up to graph.context_length "
         f"({context!r})")
    _cross_check(bundle, meta)
    return meta


def _cross_check(bundle: Path, meta: dict) -> None:
    """metadata.json against the files the runtimes read (all hashed): genai_config.json (onnxruntime-genai),
    config.json and generation_config.json (transformers.js) must give the same graph file, shape, special ids,
    context length and vocabulary, else one of them was edited."""
    graph = meta["graph"]
    # (metadata key, its value, file, where in that file); a value missing on either side is not compared
    pairs = [("graph.file", graph["file"], "genai_config.json", "model.decoder.filename")]
    for key, theirs in (("context_length", ("genai_config.json", "model.context_length")),
                        # genai's default max_length: an edited one cuts every app's generation that keeps it
                        ("context_length", ("genai_config.json", "search.max_length")),
                        ("context_length", ("config.json", "max_position_embeddings")),
                        ("context_length", ("generation_config.json", "max_length")),
                        ("vocab_size", ("genai_config.json", "model.vocab_size")),
                        ("vocab_size", ("config.json", "vocab_size")),
                        *((k, ("genai_config.json", f"model.decoder.{k}")) for k in SHAPE),
                        *((k, ("config.json", k)) for k in SHAPE if k != "head_size")):
        pairs.append((f"graph.{key}", graph.get(key), *theirs))
    for k, v in meta["special_ids"].items():
        pairs += [(f"special_ids.{k}", v, rel, at) for rel, at in (("genai_config.json", f"model.{k}"),
                                                                  ("config.json", k), ("generation_config.json", k))]
    rebuild = "rebuild the bundle with `make bundle`"
    docs = {rel: read_json(bundle / rel, f"{bundle}/{rel}", rebuild)
            for rel in ("genai_config.json", "config.json", "generation_config.json")}
    for rel, doc in docs.items():
        if not isinstance(doc, dict):
            raise PipelineError(f"{bundle}/{rel} is not a JSON object; {rebuild}")
    model = docs["genai_config.json"].get("model")
    if not (isinstance(model, dict) and isinstance(model.get("decoder"), dict)):
        raise PipelineError(f"{bundle}/genai_config.json has no model.decoder section, which onnxruntime-genai and "
                            f"the replay read; {rebuild}")
    for key, ours, rel, at in pairs:
        theirs = docs[rel]
        for part in at.split("."):
            theirs = theirs.get(part) if isinstance(theirs, dict) else None
        if ours is not None and theirs is not None and ours != theirs:
            # both files are hashed and their hashes pass: either may be the edited one
            raise PipelineError(f"{bundle}: {key} is {ours!r} in {METADATA}, but {rel} has {at} = {theirs!r}: one "
                                f"of the two was edited; restore them from runs/<run>/bundle/ or rebuild the bundle "
                                f"with `make bundle`")


def load_samples(bundle: Path) -> list[dict]:
    """samples.json: prompts, their token ids and the greedy continuation the build stored."""
    where = f"{bundle}/samples.json"
    samples = read_json(bundle / "samples.json", where)
    need(isinstance(samples, list) and len(samples) > 0, bundle, "samples.json holds no samples")
    for n, s in enumerate(samples, 1):
        ok = (isinstance(s, dict) and isinstance(s.get("prompt"), str) and is_int(s.get("max_new_tokens"))
              and int_list(s.get("prompt_ids")) and isinstance(s.get("continuation_ids"), list)
              and all(map(is_int, s["continuation_ids"])) and isinstance(s.get("continuation"), str))
        if not ok:
            raise PipelineError(f"{where}: sample {n} needs 'prompt', 'prompt_ids' (integers), 'max_new_tokens', "
                                f"'continuation_ids' (integers) and 'continuation' (its text); rebuild the bundle "
                                f"with `make bundle`")
    return samples


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


def genai_greedy(model, prompts: list[list[int]], n: list[int]) -> list[list[int]]:
    """onnxruntime-genai's greedy tokens for each prompt, from a loaded og.Model."""
    import onnxruntime_genai as og

    out = []
    for p, k in zip(prompts, n):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(p) + k, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(p)
        tokens = []
        # each step's token as get_next_tokens reports it: on eos, genai (0.18) marks the generator done without
        # appending the eos to get_sequence, while the stored continuation keeps it, as an app's loop returns it
        while not gen.is_done():
            gen.generate_next_token()
            tokens.append(int(gen.get_next_tokens()[0]))
        out.append(tokens)
    return out


def genai_tokenizer_unread(folder: Path) -> str | None:
    """Why onnxruntime-genai's tokenizer cannot read folder's tokenizer.json, or None. It reads BPE files (GPT-2,
    Llama, Qwen2, SmolLM2, ...); on WordLevel and WordPiece files (0.18, tried by hand) it raised "Cannot know how
    to parse line", returned a tokenizer, or crashed the process, varying between runs: so it is not called on them."""
    kind = json.loads((folder / "tokenizer.json").read_text()).get("model", {}).get("type")
    return None if kind == "BPE" else f"reads BPE tokenizer.json files only; this one is a {kind} tokenizer"


def _child(bundle: Path) -> dict:
    """Runs in the fresh process."""
    from tokenizers import Tokenizer

    meta = json.loads((bundle / METADATA).read_text())
    samples = json.loads((bundle / meta["samples_file"]).read_text())
    eos = meta["special_ids"]["eos_token_id"]
    try:
        tok = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    except Exception as e:  # tokenizers raises a bare Exception for a file it cannot parse
        return {"error": f"tokenizer.json cannot be read by the tokenizers library ({str(e)[:200]}): the bundle's "
                         f"tokenizer is corrupt; restore it from the build's runs/<run>/bundle/ or rebuild the "
                         f"bundle with `make bundle`"}
    prompts = [s["prompt_ids"] for s in samples]
    n = [s["max_new_tokens"] for s in samples]
    # an app's prompt ids (special tokens added, as transformers.js and onnxruntime-genai add them) and the text
    # it shows for the stored continuation ids
    token_ids = {"tokenizer.json": [tok.encode(s["prompt"]).ids for s in samples]}
    decoded = {"tokenizer.json": [tok.decode(s["continuation_ids"], skip_special_tokens=True) for s in samples]}
    unread = None  # why onnxruntime-genai's tokenizer cannot read tokenizer.json, where it cannot
    try:
        import onnxruntime_genai as og
    except ImportError as e:
        genai: list[list[int]] | str = f"onnxruntime-genai is not installed ({e}); pip install onnxruntime-genai"
    else:
        model = og.Model(str(bundle))  # loaded once: its tokenizer and the greedy replay share it
        if not (unread := genai_tokenizer_unread(bundle)):
            genai_tok = og.Tokenizer(model)  # as the README's Python sample sets it up
            genai_tok.update_options(add_special_tokens="true", skip_special_tokens="true")
            token_ids["onnxruntime-genai's tokenizer"] = [[int(t) for t in genai_tok.encode(s["prompt"])]
                                                          for s in samples]
            decoded["onnxruntime-genai's tokenizer"] = [genai_tok.decode(s["continuation_ids"]) for s in samples]
        genai = genai_greedy(model, prompts, n)  # over ids: the graph and genai_config.json, whatever the tokenizer
    return {"token_ids": token_ids, "decoded": decoded, "genai_tokenizer_unread": unread,
            "onnxruntime": [ort_greedy(bundle, p, k, eos) for p, k in zip(prompts, n)], "onnxruntime-genai": genai}


def verify(bundle: Path, files: dict) -> dict:
    """The replay on a bundle whose files pipeline.verify.check_files has hashed; raises PipelineError on the
    first failure, returns a summary (with the lines verify-bundle prints) otherwise."""
    _, kind = bundle_kind(bundle, files["meta"])
    need(kind == "app", bundle, f"'kind' is {kind!r}: the generation task publishes app bundles only")
    meta = check_metadata(bundle, files["meta"])
    require_digest(bundle, meta)
    samples = load_samples(bundle)
    # the first sample, copied into metadata.json for the README and apps, is the one the replay checks
    shown = meta.get("samples", [])
    need(isinstance(shown, list), bundle, "'samples' must be a list of samples.json's first entries")
    for n, (ours, stored) in enumerate(zip(shown, samples)):
        if ours != stored:
            raise PipelineError(f"{bundle}: {METADATA}'s samples[{n}] differs from samples.json's sample {n + 1}, "
                                f"which the replay checks: one of the two was edited; restore them from "
                                f"runs/<run>/bundle/ or rebuild the bundle with `make bundle`")
    need(len(shown) <= len(samples), bundle, "'samples' holds more samples than samples.json")
    app_samples = check_app_samples(bundle, meta, generation_samples)
    got = fresh_process(bundle, "pipeline.tasks.generation.replay", ["--child", str(bundle.resolve())], None, "decoder",
                        "install onnxruntime and tokenizers (pip install onnxruntime tokenizers)")
    for who, encoded in got["token_ids"].items():
        for s, ids in zip(samples, encoded):
            if ids != s["prompt_ids"]:
                raise PipelineError(f"{bundle}: {who} encodes {s['prompt'][:60]!r} as {ids[:12]}..., not the stored "
                                    f"{s['prompt_ids'][:12]}... the model was sampled with, so an app would feed it "
                                    f"other ids; rebuild the bundle with `make bundle CONFIG=<its config>` (it re-runs "
                                    f"a teacher stage an older pocketformer ran, whose tokenizer lacks the <bos> and "
                                    f"eos fixes)")
    summary = {"bundle": str(bundle), "task": "generation", "files_checked": files["checked"],
               "unlisted_files": files["unlisted"], "samples": len(samples), "app_samples": app_samples, "runtimes": {},
               "tokenizers": list(got["token_ids"]),  # each encoded every prompt to its stored ids (above)
               "genai_tokenizer_unread": got.get("genai_tokenizer_unread")}
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
    # the graph gives the stored ids (above): text that differs is tokenizer.json's or samples.json's edit
    for who, texts in got["decoded"].items():
        for n, (s, text) in enumerate(zip(samples, texts), 1):
            if text != s["continuation"]:
                raise PipelineError(f"{bundle}: {who} decodes sample {n}'s continuation as {text[:40]!r}, not the "
                                    f"text samples.json stores, {s['continuation'][:40]!r}: one of the two was edited, "
                                    f"and an app shows what {who} decodes; restore them from runs/<run>/bundle/ or "
                                    f"rebuild the bundle with `make bundle`")
    summary["lines"] = _lines(summary)
    return summary


def _lines(s: dict) -> list[str]:
    out = [f"prompts: {s['samples']}/{s['samples']} encode to the stored ids with {' and '.join(s['tokenizers'])}, "
           f"special tokens on, as apps encode them"]
    for runtime, r in s["runtimes"].items():
        if "status" in r:
            out.append(f"{runtime}: {r['status']} ({r['reason']})")
        else:
            out.append(f"{runtime}: {r['file']}: {r['samples_match']}/{s['samples']} greedy continuations match "
                       f"({r['tokens']} tokens)")
    out.append(f"app samples: {s['app_samples']} Kotlin / Swift file(s), each what metadata.json generates")
    if s["genai_tokenizer_unread"]:
        out.append(f"onnxruntime-genai's tokenizer {s['genai_tokenizer_unread']}: an app on onnxruntime-genai "
                   f"encodes its prompts another way (the tokenizers library)")
    return out


if __name__ == "__main__":  # the fresh-process half: python -m pipeline.tasks.generation.replay --child DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", required=True)
    print(json.dumps(_child(Path(parser.parse_args().child))))
