"""The web bundle on a tiny run (every stage up to web-bundle on random-weight models, with the browser
targets measured in headless Chromium): chosen per target, published to dist/<run>-web/, and its demo page
driven in Chromium - each sample text typed in, the label read back and compared with samples.json.
Needs node, web/node_modules and Chromium (`make web-deps`); skipped with the reason where they are missing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import browser_or_skip
from test_bundle_stage import tiny_run_dict

pytestmark = pytest.mark.e2e
_RUN: dict = {}


@pytest.fixture(scope="module")
def web_run(tmp_path_factory):
    browser_or_skip("web bundle tests")
    if not _RUN:
        from pipeline.config import config_from_dict
        from pipeline.stage import run

        d = tiny_run_dict(tmp_path_factory.mktemp("web_run"))
        d["quantize"]["variants"] = ["fp32", "int8-dynamic"]
        d["bench"].update(targets=["mobile-cpu", "browser-wasm"], browser_iterations=3, browser_warmup=1)
        d["bundle"]["web"] = True  # tiny_run_dict turns it off (it times no browser target)
        cfg = config_from_dict(d, "tiny-web-config")
        run(cfg, ["web-bundle", "bundle"])
        _RUN.update(cfg=cfg)
    return _RUN["cfg"]


def _tolerance(meta: dict) -> float:
    """Probability difference allowed between the page and ONNX Runtime in Python: float files match
    closely; int8-dynamic quantizes activations at run time with each runtime's own kernels (WASM vs x86),
    so on these random-weight models the probabilities move by up to ~0.1 while the labels hold."""
    return 1e-3 if meta["model"]["variant"] in ("fp32", "optimized") else 0.25


def _meta(folder: Path) -> dict:
    return json.loads((folder / "metadata.json").read_text())


def test_each_bundle_is_chosen_on_its_own_target(web_run):
    cfg = web_run
    web, phone = _meta(cfg.run_dir / "web-bundle"), _meta(cfg.run_dir / "bundle")
    assert phone["model"]["choice"]["target"] == "mobile-cpu" and phone["model"]["choice"]["proxy"]
    choice = web["model"]["choice"]
    assert choice["target"] == "browser-wasm" and choice["proxy"] == ""
    # the rule on the report's browser-wasm numbers: fastest .onnx / .ort within the window; the browser's
    # timer is coarse, so equal p50s are common and fall to the higher accuracy, then the smaller file
    ok = [c for c in choice["candidates"] if c["within_window"] and c["browser-wasm_p50_ms"]]
    assert {c["format"] for c in choice["candidates"]} == {"onnx", "ort"}
    best = min(ok, key=lambda c: (c["browser-wasm_p50_ms"], -c["accuracy"], c["size_bytes"]))
    assert (web["model"]["variant"], web["model"]["format"]) == (best["variant"], best["format"])
    # each file's p50 says how it was timed; a choice across both kinds says so in its rule
    froms = {c["browser-wasm_p50_from"] for c in ok}
    assert froms <= {"interleaved rounds", "length sweep"}
    assert ("for the files timed in interleaved rounds" in choice["rule"]) == (len(froms) == 2)
    assert ("every file timed in interleaved rounds" in choice["rule"]) == (froms == {"interleaved rounds"})
    results = json.loads((cfg.run_dir / "report" / "results.json").read_text())
    row = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) ==
               ("student", best["variant"], best["format"]))
    got = web["latency"]["browser-wasm"]
    assert got["p50_ms"] == row["latency"]["browser-wasm"]["32"]["p50_ms"]
    assert ("rounds_p50_ms" in got) == (best["browser-wasm_p50_from"] == "interleaved rounds")
    assert row["latency"]["browser-wasm"]["session"]["threads"] == 1


def test_web_bundle_is_published_complete_and_checked(web_run):
    from pipeline.manifest import sha256_file

    cfg = web_run
    dist = Path(cfg.bundle.dist_dir) / f"{cfg.run.name}-web"
    meta = _meta(dist)
    for rel in ("index.html", "app.mjs", "classifier.mjs", "wordpiece.mjs", "serve.py", "ort/ort.wasm.min.mjs",
                "ort/ort-wasm-simd-threaded.wasm", meta["model"]["file"], "tokenizer/vocab.txt", "samples.json",
                "labels.json", "README.md"):
        assert meta["files"][rel]["sha256"] == sha256_file(dist / rel), rel
    assert meta["tokenizer_check"]["agreement"] == 1.0 and meta["tokenizer_check"]["texts"] > 50
    page = meta["page_check"]
    assert page["labels_agree"] == page["texts"] == cfg.bundle.sample_texts
    assert page["ids_agree"] == page["texts"] and page["max_probability_diff"] < _tolerance(meta)
    assert page["latency_ms"]["p50"] > 0 and not page["page_errors"]
    assert (Path(cfg.bundle.dist_dir) / cfg.run.name / "metadata.json").is_file()  # the phone bundle beside it
    # the export stage's FastGelu file (export.fast_gelu_variants, default int8-dynamic) is a checked, timed row
    rows = json.loads((cfg.run_dir / "export" / "variants.json").read_text())
    fg = next(r for r in rows if r["variant"] == "int8-dynamic-fastgelu")
    assert fg["format"] == "ort" and fg["check"]["gelu"]["texts"] > 50 and fg["details"]["browser_only"]
    results = json.loads((cfg.run_dir / "report" / "results.json").read_text())
    timed = next(r for r in results["rows"] if (r["model"], r["variant"]) == ("student", "int8-dynamic-fastgelu"))
    if fg["status"] == "passed":
        assert timed["latency"]["browser-wasm"]["32"]["p50_ms"] > 0
    assert timed["latency"]["mobile-cpu"]["status"] == "skipped"  # browser-only
    # metadata.json says which GELU form shipped and why; the phone bundle never ships the browser-only file
    gelu = meta["model"]["gelu"]
    if meta["model"]["variant"] == "int8-dynamic-fastgelu":
        assert gelu["form"] == "FastGelu (tanh approximation)" and gelu["check"] == fg["check"]["gelu"]
    else:
        assert gelu["form"] == "as trained (erf)" and gelu["reason"], gelu
    assert not _meta(Path(cfg.bundle.dist_dir) / cfg.run.name)["model"]["variant"].endswith("-fastgelu")


def test_demo_page_labels_every_sample_as_stored(web_run):
    """Independent of the stage's own check: type each stored sample into the published page."""
    from export.web_bundle import drive_page

    cfg = web_run
    dist = Path(cfg.bundle.dist_dir) / f"{cfg.run.name}-web"
    samples = json.loads((dist / "samples.json").read_text())
    tol = _tolerance(_meta(dist))
    doc = drive_page(dist, [s["text"] for s in samples])
    assert doc["isolated"] is True and not doc["page_errors"]
    for got, want in zip(doc["results"], samples, strict=True):
        assert got["label"] == got["data_label"] == want["expected_label"], want["text"]
        assert got["ids"] == want["input_ids"]
        assert max(abs(a - b) for a, b in zip(got["probabilities"], want["probabilities"])) < tol
        assert got["latency_ms"] > 0
    print("\npage latency per text (ms, noisy on a shared machine):",
          [round(r["latency_ms"], 2) for r in doc["results"]])


def _web_copy(cfg, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "web"
    shutil.copytree(Path(cfg.bundle.dist_dir) / f"{cfg.run.name}-web", dst)
    return dst


def test_verify_bundle_passes_on_the_web_bundle(web_run, tmp_path, capsys, monkeypatch):
    """`python -m pipeline verify-bundle dist/<run>-web` right after the build: kind "web", hashes, metadata,
    the page's tokenizer against the stored ids, the model file against its stored reference logits and the
    page in Chromium (today's main failed it: "'models' names no model")."""
    import eval.browser
    from pipeline.cli import main

    dist = _web_copy(web_run, tmp_path)
    meta, samples = _meta(dist), json.loads((dist / "samples.json").read_text())
    assert (meta["task"], meta["kind"]) == ("classification", "web")
    assert all(set(s["reference_logits"]) == {meta["model"]["file"]} for s in samples)
    assert main(["verify-bundle", str(dist)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"tokenizer: wordpiece.mjs gives the stored ids of {len(samples)}/{len(samples)} samples" in out
    assert f"model: {meta['model']['file']}: {len(samples)}/{len(samples)} sample labels match" in out
    assert f"page: {len(samples)}/{len(samples)} labels and {len(samples)} token ids as stored" in out
    assert "bundle OK" in out
    # without Chromium the page part is a skip naming why, the rest still runs
    monkeypatch.setattr(eval.browser, "unavailable_reason", lambda configured="": "no Chromium on PATH (test)")
    assert main(["verify-bundle", str(dist)]) == 0
    assert "page: skipped (no Chromium on PATH (test))" in capsys.readouterr().out


@pytest.mark.parametrize("edit, message", [
    (lambda m, s: m["text_normalisation"].update(lowercase=False),
     r"text_normalisation\.lowercase is False, tokenizer/tokenizer_config\.json has do_lower_case = True"),
    (lambda m, s: m.update(max_length=8), r"max_length is 8, text_normalisation\.max_length is 32"),
    (lambda m, s: s[1]["reference_logits"][m["model"]["file"]].__setitem__(0, 5.0),
     r"the reference logits of sample 2 in samples\.json were edited \(they no longer give the stored "
     r"probabilities\).*samples\.json edited"),
    # the sample shape check is the app bundle's, with the page's ids key and the one model file
    (lambda m, s: s[0].pop("input_ids"), r"sample 1 needs 'text', 'input_ids' \(integers\).*make web-bundle"),
    # (the model file is the one the web target timed fastest: .ort or .onnx)
    (lambda m, s: s[2]["reference_logits"].clear(),
     r"sample 3 has no reference logits \(3 numbers\) for model/\S+; rebuild the web bundle with `make web-bundle`"),
])
def test_verify_bundle_names_edits_of_the_web_bundle(web_run, tmp_path, edit, message):
    from export.bundle import write_metadata
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    dist = _web_copy(web_run, tmp_path)
    meta, samples = _meta(dist), json.loads((dist / "samples.json").read_text())
    edit(meta, samples)
    (dist / "samples.json").write_text(json.dumps(samples, indent=2))
    if samples != json.loads((Path(web_run.bundle.dist_dir) / f"{web_run.run.name}-web" / "samples.json").read_text()):
        write_metadata(dist, {k: v for k, v in meta.items() if k != "files"})  # hashes rewritten: the replay decides
    else:
        (dist / "metadata.json").write_text(json.dumps(meta, indent=2))
    with pytest.raises(PipelineError, match=message):
        verify_bundle(dist)


@pytest.mark.parametrize("source, said", [
    ("export class WordPiece { constructor( }", "SyntaxError: Unexpected token '}'"),
    ("export class WordPiece { constructor() { throw new TypeError('no vocab here'); } }", "TypeError: no vocab here"),
])
def test_a_broken_page_tokenizer_is_named_by_its_javascript_error(tmp_path, source, said):
    """verify-bundle runs the bundle's own wordpiece.mjs in node: where it fails, the error line names node's
    JavaScript error (not the last lines of its stack) and ends with the fix."""
    from eval.browser import node_path
    from pipeline.errors import PipelineError
    from pipeline.tasks.classification.verify_web import page_token_ids

    if node_path() is None:
        pytest.skip("node is not installed")
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    (tmp_path / "wordpiece.mjs").write_text(source)
    meta = {"text_normalisation": {"lowercase": True}, "max_length": 8}
    with pytest.raises(PipelineError) as e:
        page_token_ids(tmp_path, meta, ["hello"])
    assert str(e.value) == (f"{tmp_path}: the page's tokenizer (wordpiece.mjs): web/tokenize.mjs exited with 1: "
                            f"{said}; rebuild the web bundle with `make web-bundle`")


def test_node_and_replay_processes_past_their_time_are_error_lines(tmp_path):
    """A node script (the web bundle's tokenizer and page checks, the browser bench) or verify-bundle's replay
    process that never answers ends in one message naming what ran and its limit; subprocess.TimeoutExpired
    reached the user as a traceback before."""
    from eval.browser import node_path, run_node_script
    from export.web_bundle import _node
    from pipeline.errors import PipelineError
    from pipeline.verify_bundle_meta import fresh_process

    with pytest.raises(PipelineError, match=r"^dist/x: the model replay in a fresh process gave no answer in 0\.001 s; "
                                            r"rebuild it$"):
        fresh_process(Path("dist/x"), "this", [], None, "model replay", "rebuild it", timeout_s=0.001)
    if node_path() is None:
        pytest.skip("node is not installed")
    with pytest.raises(PipelineError, match=r"^the demo page: web/page_check\.mjs gave no answer in 0\.001 s$"):
        _node("page_check.mjs", ["chromium", str(tmp_path)], {"texts": ["a"]}, "the demo page", timeout_s=0.001)
    with pytest.raises(RuntimeError, match=r"^web/bench\.mjs gave no answer in 0\.001 s$"):
        run_node_script("bench.mjs", {}, timeout_s=0.001)


def test_serve_py_takes_a_port_or_says_what_it_takes():
    """`python3 serve.py --help` (or any word) was a ValueError traceback from int()."""
    import subprocess
    import sys
    from pathlib import Path

    serve = Path(__file__).resolve().parents[1] / "web" / "demo" / "serve.py"
    ok = subprocess.run([sys.executable, str(serve), "--help"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "Usage: python3 serve.py [port]" in ok.stdout
    for argv in (["x"], ["70000"], ["80", "81"]):
        bad = subprocess.run([sys.executable, str(serve), *argv], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr
        assert bad.stderr.startswith("error: usage: python3 serve.py [port] (a port is a number from 1 to 65535")
