"""A generation teacher whose tokenizer puts a <bos> in front of every text (Llama, Gemma, OPT): the pipeline
feeds it the <bos> in every window and prompt, so the bundle's samples are what an app gets from
onnxruntime-genai or transformers.js, which add it too; verify-bundle checks prompts encoded that way."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.config import config_from_dict
from pipeline.errors import PipelineError
from pipeline.stage import run
from lm_bundle_fixtures import bundle_cfg, tiny_inputs, with_tokenizer

pytestmark = pytest.mark.e2e
BOS = 1  # "<s>" in bpe_llama(bos=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("lmbos")
    corpus, teacher = tiny_inputs(root, bos=True)
    cfg = config_from_dict(bundle_cfg(root, corpus, teacher), "tiny-gen-bos")
    assert run(cfg, ["bundle"])[-1] == "bundle"
    return cfg, root / "dist" / "tinygen"


def test_every_window_and_prompt_starts_with_bos(built):
    from distill.vocab import VocabMap

    cfg, dist = built
    win = np.load(cfg.run_dir / "logits" / "windows.npy")
    assert (win[:, 0] == BOS).all() and (win[:, 1:] != BOS).all()
    assert BOS in VocabMap.load(cfg.run_dir / "distill" / "student").teacher_ids  # the student has its own <bos>
    samples = json.loads((dist / "samples.json").read_text())
    assert all(s["prompt_ids"][0] == BOS and BOS not in s["prompt_ids"][1:] for s in samples)
    assert json.loads((dist / "tokenizer_config.json").read_text())["add_bos_token"] is True  # transformers.js


def test_verify_replays_prompts_as_apps_encode_them(built, tmp_path):
    from pipeline.verify import verify_bundle

    _, dist = built
    s = verify_bundle(dist)
    assert s["runtimes"]["onnxruntime"]["samples_match"] == 2
    assert s["lines"][0].startswith("prompts: 2/2 encode to the stored ids with tokenizer.json")
    if "samples_match" not in s["runtimes"]["onnxruntime-genai"]:
        pytest.skip("onnxruntime-genai is not installed: its tokenizer's <bos> is not checked")
    # a tokenizer.json that no longer adds the <bos> (hashes rewritten): an app's prompts would lack it
    bare = with_tokenizer(dist, tmp_path / "bare", lambda tj: tj.update(post_processor=None))
    with pytest.raises(PipelineError, match=r"tokenizer.json encodes 'ROMEO : my love' as \[(?!1,).*not the stored "
                                            r"\[1, .* an app would feed it other ids"):
        verify_bundle(bare)


def test_transformers_js_adds_the_bos_and_continues_as_the_samples(built):
    """transformers.js' text-generation pipeline adds special tokens when tokenizer_config.json says
    add_bos_token: its prompt ids and greedy tokens are the stored ones."""
    import subprocess
    from pathlib import Path

    from eval.browser import node_path

    js = Path(__file__).resolve().parents[1] / "clients" / "js"
    node = node_path()
    if node is None or not (js / "node_modules" / "@huggingface" / "transformers").is_dir():
        pytest.skip("Node.js or transformers.js is not installed (make test runs npm ci in clients/js)")
    _, dist = built
    proc = subprocess.run([node, str(js / "check_lm_bundle.mjs"), str(dist)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    samples = json.loads((dist / "samples.json").read_text())
    assert out["match"] and [r["prompt_ids"][0] for r in out["samples"]] == [BOS, BOS]
    assert [r["tokens"] for r in out["samples"]] == [s["continuation_ids"] for s in samples]
    assert out["pipeline_text"] == samples[0]["continuation"]
