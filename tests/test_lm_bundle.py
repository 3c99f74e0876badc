"""The generation app bundle on a tiny run (byte-level BPE teacher, restricted-vocabulary student): its
layout, the vocabulary-mapped decoder, onnxruntime-genai generating the pipeline's greedy tokens,
verify-bundle passing and catching tampering, and the Kotlin / Swift samples naming the shipped graph."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from pipeline.stage import run
from lm_bundle_fixtures import bundle_cfg, tiny_inputs, with_tokenizer
from test_gpt_pipeline import readme_python_generates

pytestmark = pytest.mark.e2e
# "é" never occurs in the training plays: its byte tokens are outside the student's vocabulary ("other")
PROMPTS = ["ROMEO : my love", "KING : é the crown is"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("lmbundle")
    corpus, teacher = tiny_inputs(root)
    d = bundle_cfg(root, corpus, teacher)
    d["lm"]["prompts"] = PROMPTS
    cfg = config_from_dict(d, "tiny-gen-bundle")
    ran = run(cfg, ["bundle"])
    assert ran[-1] == "bundle"
    return cfg, root / "dist" / "tinygen", d


def _reference(cfg, prompt_ids: list[int], n: int) -> list[int]:
    """The pipeline's greedy tokens, recomputed here: its ONNX Runtime loop over the quantize-stage graph."""
    from export.hf_layout import cut_at_eos
    from pipeline.tasks.generation.common import load_lm, ort_lm

    lm, tok = load_lm(cfg.run_dir / "distill" / "student", "student")
    got = ort_lm(cfg.run_dir / "quantize" / "student" / "int8-dynamic" / "model.onnx", lm).generate(
        lm.to_model_ids(torch.tensor(prompt_ids)).tolist(), n)
    return cut_at_eos(lm.vmap.to_teacher(got).tolist(), tok.eos_token_id)


def test_bundle_layout_and_samples(built):
    cfg, dist, _ = built
    for rel in ("onnx/model_quantized.onnx", "genai_config.json", "config.json", "generation_config.json",
                "tokenizer.json", "tokenizer_config.json", "samples.json", "metadata.json", "README.md",
                "android/PocketformerGenerator.kt", "ios/PocketformerGenerator.swift"):
        assert (dist / rel).is_file(), rel
    meta = json.loads((dist / "metadata.json").read_text())
    assert meta["task"] == "generation" and meta["model"]["variant"] == "int8-dynamic"
    assert set(meta["files"]) >= {"onnx/model_quantized.onnx", "samples.json", "README.md"}
    vmap = json.loads((cfg.run_dir / "distill" / "student" / "vocab_map.json").read_text())
    assert meta["graph"]["vocab_size"] == vmap["teacher_vocab"] > len(vmap["teacher_ids"])
    samples = json.loads((dist / "samples.json").read_text())
    assert [s["prompt"] for s in samples] == PROMPTS
    unseen = set(samples[1]["prompt_ids"]) - set(vmap["teacher_ids"])
    assert unseen, "the second prompt must hold ids the student maps to 'other'"
    for s in samples:
        assert s["continuation_ids"] == _reference(cfg, s["prompt_ids"], s["max_new_tokens"])
        assert len(s["continuation_ids"]) >= 1


def test_mapped_graph_keeps_student_logits_and_masks_unseen_ids(built):
    import onnxruntime as ort

    from export.hf_layout import DROPPED_LOGIT

    cfg, dist, _ = built
    vmap = json.loads((cfg.run_dir / "distill" / "student" / "vocab_map.json").read_text())
    kept, other = np.array(vmap["teacher_ids"]), len(vmap["teacher_ids"])
    prompt = json.loads((dist / "samples.json").read_text())[1]["prompt_ids"]  # holds unseen ids
    lookup = np.full(vmap["teacher_vocab"], other)
    lookup[kept] = np.arange(len(kept))

    def logits(path: Path, ids: list[int]) -> np.ndarray:
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
                "position_ids": np.arange(len(ids), dtype=np.int64)[None]}
        for i in s.get_inputs():
            if i.name.startswith("past_key_values."):
                feed[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
        return s.run(["logits"], feed)[0][0]  # (T, V)

    shipped = logits(dist / "onnx" / "model_quantized.onnx", prompt)
    source = logits(cfg.run_dir / "quantize" / "student" / "int8-dynamic" / "model.onnx", lookup[prompt].tolist())
    assert shipped.shape == (len(prompt), vmap["teacher_vocab"]) and source.shape[1] == other + 1
    np.testing.assert_array_equal(shipped[:, kept], source[:, :other])
    unseen = np.setdiff1d(np.arange(vmap["teacher_vocab"]), kept)
    assert (shipped[:, unseen] == DROPPED_LOGIT).all()


def test_onnxruntime_genai_generates_the_pipeline_tokens(built):
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed (pip install "
                                                    "onnxruntime-genai==0.18.0)")
    import onnxruntime_genai as og

    from pipeline.tasks.generation.replay import genai_greedy

    cfg, dist, _ = built
    samples = json.loads((dist / "samples.json").read_text())
    model = og.Model(str(dist))
    tok = og.Tokenizer(model)
    assert [list(tok.encode(s["prompt"])) for s in samples] == [s["prompt_ids"] for s in samples]
    got = genai_greedy(model, [s["prompt_ids"] for s in samples], [s["max_new_tokens"] for s in samples])
    assert got == [_reference(cfg, s["prompt_ids"], s["max_new_tokens"]) for s in samples]
    assert "og.Tokenizer(model)" in readme_python_generates(dist)  # a BPE file: genai's own tokenizer reads it


def test_genai_replay_keeps_the_eos_it_stops_at(built, tmp_path):
    """genai marks the generator done on eos without appending it to the sequence; the replay keeps the eos, as
    the stored continuation and an app's loop do (a model whose first greedy token is its eos)."""
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed (pip install "
                                                    "onnxruntime-genai==0.18.0)")
    import onnxruntime_genai as og

    from pipeline.tasks.generation.replay import genai_greedy

    _, dist, _ = built
    s = json.loads((dist / "samples.json").read_text())[0]
    first = s["continuation_ids"][0]
    copy = shutil.copytree(dist, tmp_path / "eos")
    g = json.loads((copy / "genai_config.json").read_text())
    g["model"]["eos_token_id"] = first
    (copy / "genai_config.json").write_text(json.dumps(g))
    assert genai_greedy(og.Model(str(copy)), [s["prompt_ids"]], [s["max_new_tokens"]]) == [[first]]


def test_verify_bundle_passes_then_catches_changes(built, tmp_path):
    from export.bundle import write_metadata
    from pipeline.verify import verify_bundle

    _, dist, _ = built
    s = verify_bundle(dist)
    assert s["task"] == "generation" and s["runtimes"]["onnxruntime"]["samples_match"] == len(PROMPTS)
    assert s["runtimes"]["onnxruntime-genai"].get("samples_match") == len(PROMPTS), s["runtimes"]
    assert "app samples: 2 Kotlin / Swift file(s), each what metadata.json generates" in s["lines"]

    wrong = shutil.copytree(dist, tmp_path / "wrong")
    samples = json.loads((wrong / "samples.json").read_text())
    # the second sample: metadata.json (and the app samples made from it) copy the first, which is checked there
    samples[1]["continuation_ids"][0] = (samples[1]["continuation_ids"][0] + 1) % 300
    (wrong / "samples.json").write_text(json.dumps(samples))
    meta = json.loads((wrong / "metadata.json").read_text())
    write_metadata(wrong, {k: v for k, v in meta.items() if k != "files"})  # hashes pass: the tokens must not
    with pytest.raises(PipelineError, match="continues 'KING : é the crown is' differently from samples.json at "
                                            "token 1"):
        verify_bundle(wrong)

    changed = shutil.copytree(dist, tmp_path / "changed")
    graph = changed / "onnx" / "model_quantized.onnx"
    graph.write_bytes(graph.read_bytes()[:-1] + b"\0")
    with pytest.raises(PipelineError, match="onnx/model_quantized.onnx was changed"):
        verify_bundle(changed)


@pytest.mark.parametrize("edit,match", [
    (lambda m: {**m, "files": list(m["files"])}, re.escape("'files' must be an object of path -> {bytes, sha256}, not [")),
    (lambda m: {**m, "graph": "onnx/model_quantized.onnx"}, "'graph' needs a 'file'"),
    (lambda m: {**m, "graph": {**m["graph"], "file": "../outside.onnx"}}, "climbs out with '..'"),
    (lambda m: {**m, "special_ids": {"eos_token_id": "2"}}, "'special_ids' needs 'eos_token_id'"),
    # still there but unlisted: refused as a file the build did not write (gone too: the test below)
    (lambda m: {**m, "files": {k: v for k, v in m["files"].items() if k != "tokenizer.json"}},
     re.escape("1 file that metadata.json does not list (tokenizer.json): not part of the build")),
])
def test_malformed_generation_metadata_is_one_error(built, tmp_path, edit, match):
    """A generation bundle's metadata.json gets the same untrusted-input checks as a classification one: one
    error naming the entry, never a traceback, and nothing run."""
    from pipeline.cli import main

    _, dist, _ = built
    copy = shutil.copytree(dist, tmp_path / "copy")
    meta = json.loads((copy / "metadata.json").read_text())
    (copy / "metadata.json").write_text(json.dumps(edit(meta)))
    from pipeline.verify import verify_bundle

    with pytest.raises(PipelineError, match=match):
        verify_bundle(copy)
    assert main(["verify-bundle", str(copy)]) == 2


def test_corrupt_tokenizer_is_named(built, tmp_path):
    """A tokenizer.json the tokenizers library cannot parse (hashes rewritten, so the sha256 check passes) is one
    error naming the file, not a failed child process."""
    from export.bundle import write_metadata
    from pipeline.verify import verify_bundle

    _, dist, _ = built
    bad = shutil.copytree(dist, tmp_path / "bad")
    (bad / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "nonsense"')
    meta = json.loads((bad / "metadata.json").read_text())
    write_metadata(bad, {k: v for k, v in meta.items() if k != "files"})
    with pytest.raises(PipelineError, match=r"tokenizer.json cannot be read .* the bundle's tokenizer is corrupt"):
        verify_bundle(bad)


def test_a_tokenizer_that_decodes_other_words_is_named(built, tmp_path):
    """tokenizer.json with a decoder that rewrites a letter (hashes rewritten): the prompts still encode to their
    stored ids and the graph still gives the stored tokens, but an app would print other words."""
    from pipeline.verify import verify_bundle

    _, dist, _ = built
    samples = json.loads((dist / "samples.json").read_text())
    n, letter = next((n, c) for n, s in enumerate(samples, 1) for c in s["continuation"] if c.isalpha())
    swap = {"type": "Replace", "pattern": {"String": letter}, "content": "#"}
    bad = with_tokenizer(dist, tmp_path / "redecoded", lambda tj: tj.update(
        decoder={"type": "Sequence", "decoders": [d for d in (tj.get("decoder"), swap) if d]}))
    with pytest.raises(PipelineError, match=rf"tokenizer.json decodes sample {n}'s continuation as .* an app shows "
                                            r"what tokenizer.json decodes"):
        verify_bundle(bad)


def test_app_samples_name_the_shipped_graph(built):
    _, dist, _ = built
    meta = json.loads((dist / "metadata.json").read_text())
    g, first = meta["graph"], meta["samples"][0]
    kt = (dist / "android" / "PocketformerGenerator.kt").read_text()
    sw = (dist / "ios" / "PocketformerGenerator.swift").read_text()
    inputs = {i["name"].split(".")[0] for i in g["inputs"]}
    outputs = {o["name"].split(".")[0] for o in g["outputs"]}
    assert inputs == {"input_ids", "attention_mask", "position_ids", "past_key_values"}
    assert outputs == {"logits", "present"}
    for src in (kt, sw):
        for name in (*inputs, *outputs):
            assert f'"{name}' in src, name
        assert str(g["vocab_size"]) in src and str(meta["special_ids"]["eos_token_id"]) in src
        assert g["file"].split("/")[-1].split(".")[0] in src
    assert f"const val LAYERS = {g['num_hidden_layers']}" in kt and f"layers = {g['num_hidden_layers']}" in sw
    assert "longArrayOf(" + ", ".join(f"{i}L" for i in first["prompt_ids"]) + ")" in kt
    assert "[" + ", ".join(str(i) for i in first["continuation_ids"]) + "]" in sw


def test_bundle_of_the_lstm_is_refused_and_leaves_nothing(built):
    cfg, dist, d = built
    before = sorted(p.name for p in dist.iterdir())
    with pytest.raises(PipelineError, match="ships the student decoder"):  # refused when the config loads
        run(config_from_dict({**d, "bundle": {**d["bundle"], "model": "lstm"}}, "tiny-gen-bundle"), ["bundle"],
            force=("bundle",))
    assert not list(cfg.run_dir.glob(".bundle*")) and sorted(p.name for p in dist.iterdir()) == before
    assert run(cfg, ["bundle"]) == []  # the good bundle is untouched and still up to date



def test_transformers_js_text_generation_loads_the_bundle(built):
    """clients/js (transformers.js, installed by `make test` with npm ci) loads the bundle folder and its
    greedy tokens are the pipeline's."""
    import subprocess

    from eval.browser import node_path

    js = Path(__file__).resolve().parents[1] / "clients" / "js"
    node = node_path()
    if node is None:
        pytest.skip("node is not installed: the transformers.js check needs Node.js 18+ and npm")
    if not (js / "node_modules" / "@huggingface" / "transformers").is_dir():
        pytest.skip(f"transformers.js is not installed: run `npm ci --ignore-scripts` in {js} (make test does)")
    cfg, dist, _ = built
    proc = subprocess.run([node, str(js / "check_lm_bundle.mjs"), str(dist)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    samples = json.loads((dist / "samples.json").read_text())
    assert out["match"] and out["dtype"] == "q8"
    for s, r in zip(samples, out["samples"]):
        assert r["prompt_ids"] == s["prompt_ids"]
        assert r["tokens"] == _reference(cfg, s["prompt_ids"], s["max_new_tokens"])
    assert out["pipeline_text"] == samples[0]["continuation"]


def test_fp32_variant_ships_model_onnx_and_verifies(built, tmp_path):
    from pipeline.verify import verify_bundle

    _, _, d = built
    cfg = config_from_dict({**d, "bundle": {**d["bundle"], "variant": "fp32", "dist_dir": str(tmp_path / "dist")}},
                           "tiny-gen-bundle")
    assert run(cfg, ["bundle"]) == ["bundle"]  # a bundle setting changed: only the bundle re-runs
    dist = tmp_path / "dist" / "tinygen"
    meta = json.loads((dist / "metadata.json").read_text())
    assert meta["graph"]["file"] == "onnx/model.onnx" and meta["graph"]["transformers_js_dtype"] == "fp32"
    assert not (dist / "onnx" / "model_quantized.onnx").exists()
    assert verify_bundle(dist)["runtimes"]["onnxruntime"]["samples_match"] == len(PROMPTS)
    assert run(config_from_dict(d, "tiny-gen-bundle"), ["bundle"]) == ["bundle"]  # back to the int8 bundle


@pytest.mark.parametrize("edit,match", [
    (lambda m: m["special_ids"].update(eos_token_id=m["special_ids"]["eos_token_id"] + 1),
     r"special_ids\.eos_token_id is \d+ in metadata\.json, but genai_config\.json has model\.eos_token_id = \d+: "
     r"one of the two was edited"),
    (lambda m: m["model"].update(perplexity=1.0), r"metadata\.json was edited after the build"),
    (lambda m: m.update(kind="web"), r"'kind' is 'web': the generation task publishes app bundles only"),
])
def test_edited_generation_metadata_is_named(built, tmp_path, edit, match):
    """metadata.json is covered by its digest and checked against genai_config.json: before, an edited eos id
    or any other field passed verify-bundle."""
    from pipeline.verify import verify_bundle

    _, dist, _ = built
    copy = shutil.copytree(dist, tmp_path / "copy")
    meta = json.loads((copy / "metadata.json").read_text())
    assert (meta["task"], meta["kind"]) == ("generation", "app")
    edit(meta)
    (copy / "metadata.json").write_text(json.dumps(meta, indent=2))
    with pytest.raises(PipelineError, match=match):
        verify_bundle(copy)


def _resigned(dist: Path, folder: Path, edit) -> Path:
    """A copy of the bundle with edit(copy) applied and every hash and the metadata digest rewritten to match, as
    a careful hand would: only what the files say can catch it."""
    from export.bundle import write_metadata

    copy = shutil.copytree(dist, folder)
    edit(copy)
    meta = json.loads((copy / "metadata.json").read_text())
    meta["files"] = {k: v for k, v in meta["files"].items() if (copy / k).is_file()}
    write_metadata(copy, {k: v for k, v in meta.items() if k != "files"})
    return copy


def _append(path: Path, text: str) -> None:
    path.write_text((path.read_text() if path.is_file() else "") + text)


def _edit_json(rel: str, change):
    def edit(copy: Path) -> None:
        doc = json.loads((copy / rel).read_text())
        change(doc)
        (copy / rel).write_text(json.dumps(doc))
    return edit


@pytest.mark.parametrize("edit,match", [
    # transformers.js reads these two: an eos edited there ends its generation elsewhere
    (_edit_json("config.json", lambda c: c.update(eos_token_id=c["eos_token_id"] + 1)),
     r"special_ids\.eos_token_id is \d+ in metadata\.json, but config\.json has eos_token_id = \d+"),
    (_edit_json("generation_config.json", lambda c: c.update(max_length=20)),
     r"graph\.context_length is \d+ in metadata\.json, but generation_config\.json has max_length = 20"),
    (_edit_json("genai_config.json", lambda c: c["search"].update(max_length=20)),
     r"genai_config\.json has search\.max_length = 20"),
    (_edit_json("genai_config.json", lambda c: c["model"]["decoder"].update(num_key_value_heads=1)),
     r"graph\.num_key_value_heads is \d+ in metadata\.json, but genai_config\.json has "
     r"model\.decoder\.num_key_value_heads = 1"),
    (lambda copy: (copy / "generation_config.json").unlink(), r"'files' does not list generation_config\.json"),
    (lambda copy: (copy / "tokenizer_config.json").unlink(), r"'files' does not list tokenizer_config\.json"),
    (_edit_json("samples.json", lambda s: s[0].update(continuation=[1, 2])),
     r"sample 1 needs .*'continuation' \(its text\)"),
    # the README shows metadata.json's copy of the first sample: it must be the sample the replay checks
    (_edit_json("metadata.json", lambda m: m["samples"][0].update(continuation="edited")),
     r"metadata\.json's samples\[0\] differs from samples\.json's sample 1, which the replay checks: one of the "
     r"two was edited"),
    (_edit_json("metadata.json", lambda m: m["samples"][0].update(prompt_ids=[1, 2, 3])),
     r"metadata\.json's samples\[0\] differs from samples\.json's sample 1"),
    (_edit_json("metadata.json", lambda m: m.update(trained_context_length=10 ** 6)),
     r"'trained_context_length' is 1000000: it must be a positive integer up to graph\.context_length"),
    # the Kotlin / Swift samples are generated from metadata.json: an edited, missing or extra one is named
    (lambda copy: _append(copy / "android" / "PocketformerGenerator.kt", "// edited\n"),
     r"android/PocketformerGenerator\.kt differs from the sample this bundle's metadata generates \(edited after "
     r"the build, or built by another pocketformer version\); rebuild the bundle with `make bundle`"),
    (lambda copy: _append(copy / "ios" / "PocketformerGenerator.swift", "// edited\n"),
     r"ios/PocketformerGenerator\.swift differs from the sample this bundle's metadata generates"),
    (lambda copy: (copy / "ios" / "PocketformerGenerator.swift").unlink(),
     r"ios/PocketformerGenerator\.swift is missing: this bundle's metadata generates it"),
    (lambda copy: _append(copy / "ios" / "Extra.swift", "import Foundation\n"),
     r"ios/Extra\.swift is not a sample this bundle's metadata generates"),
])
def test_resigned_edits_of_what_runtimes_read_are_refused(built, tmp_path, edit, match):
    """Edits with every hash and the digest rewritten: the files an app's runtime reads must still agree with
    metadata.json, and the files it needs must be there."""
    from pipeline.verify import verify_bundle

    _, dist, _ = built
    with pytest.raises(PipelineError, match=match):
        verify_bundle(_resigned(dist, tmp_path / "copy", edit))


def test_the_bundle_states_its_context_and_ships_no_chat_template(built):
    """The position table (lm.max_cache) is not the trained window (lm.context_length): README, metadata and both
    phone samples say which is which, and the samples refuse an empty prompt or one past the positions. The
    teacher's chat template (tokens the student never saw) is not shipped."""
    cfg, dist, d = built
    meta = json.loads((dist / "metadata.json").read_text())
    positions, trained = meta["graph"]["context_length"], meta["trained_context_length"]
    assert (positions, trained) == (d["lm"]["max_cache"], d["lm"]["context_length"]) and trained < positions
    readme = (dist / "README.md").read_text()
    assert f"Context: {positions} positions" in readme and f"windows of {trained} ids" in readme
    assert f"past {trained} ids it runs on positions it never trained on" in readme
    eos = meta["special_ids"]["eos_token_id"]
    assert f"start from\n`[{eos}]` (the eos id, which ends every training document)" in readme
    assert 'import { env, pipeline } from "@huggingface/transformers"' in readme
    kt = (dist / "android" / "PocketformerGenerator.kt").read_text()
    sw = (dist / "ios" / "PocketformerGenerator.swift").read_text()
    assert f"const val MAX_POSITIONS = {positions}" in kt and "require(prompt.size + maxNewTokens <= MAX_POSITIONS)" in kt
    assert f"maxPositions = {positions}, trainedContext = {trained}" in sw
    assert "guard prompt.count + maxNewTokens <= Self.maxPositions" in sw and "guard !prompt.isEmpty" in sw
    assert "#if canImport(OnnxRuntimeBindings)" in sw  # the Swift package's module; the CocoaPod's otherwise
    assert "session.run(feed) } finally {" in kt and ".use { it.readBytes() }" in kt
    assert not (dist / "chat_template.jinja").exists()
    assert "chat_template" not in json.loads((dist / "tokenizer_config.json").read_text())


def test_the_generation_report_holds_the_generation_tasks_goals(built):
    """The shared report step adds the generation task's part of results.json (Task.results): its perplexity and
    decode goals and the bench's time limit, no classification goal and no workload table."""
    cfg, _, _ = built
    res = json.loads((cfg.run_dir / "report" / "results.json").read_text())
    assert res["quality_metric"] == "perplexity" and res["workloads"] == {}
    assert [g["goal"] for g in res["goals"]] == [
        "student perplexity within 2x of the teacher's", "student perplexity below the LSTMs'",
        "student int8 decode >= 5x the teacher's tokens/s on mobile-cpu",
        "benchmark of the models completes within 5 minutes"]
    ratio = res["goals"][0]
    rows = {r["model"]: r["perplexity"] for r in res["rows"] if r["format"] == "pytorch"}
    assert ratio["value"] == pytest.approx(rows["student"] / rows["teacher"])


def test_an_unlisted_tokenizer_gone_too_is_named_by_its_entry(built, tmp_path):
    from pipeline.verify import verify_bundle

    _, dist, _ = built
    copy = shutil.copytree(dist, tmp_path / "copy")
    meta = json.loads((copy / "metadata.json").read_text())
    meta["files"].pop("tokenizer.json")
    (copy / "tokenizer.json").unlink()
    (copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(PipelineError, match="'files' does not list tokenizer.json"):
        verify_bundle(copy)
