"""The bundle stage on a tiny run (every stage up to report on random-weight models, ~40 s once per session):
the string-in model, metadata, samples generated from metadata, the published dist copy, verify-bundle and
its failures (a changed file names the file, a missing variant names the stage)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import save_tiny_bert, tiny_run_config, write_tiny_csv
from eval.rows import rounds_p50

_RUN: dict = {}


def tiny_run_dict(root: Path) -> dict:
    bert = save_tiny_bert(root / "bert")
    data = write_tiny_csv(root / "reviews.csv")
    return {
        **tiny_run_config(bert, data, root / "runs"),
        # optimized: int8-dynamic then quantizes the fused graph (QAttention), as in the demo bundle;
        # int8-static: the fixed-shape QDQ file phone-bench runs on NPU providers (tests/test_phone_android.py)
        "quantize": {"models": ["teacher", "student", "lstm"],
                     "variants": ["fp32", "optimized", "int8-dynamic", "int8-static"],
                     "check_samples": 16},
        "export": {"ort_variants": ["fp32", "int8-dynamic"], "coreml_models": ["student"],
                   "coreml_variants": ["fp16"], "coreml_lengths": [16, 32]},
        "bench": {"targets": ["host-cpu", "mobile-cpu"], "sweep_variants": ["int8-dynamic"], "seq_lengths": [16, 32],
                  "headline_length": 32,
                  "iterations": 3, "warmup": 1, "min_iterations": 2, "optimum_peer": False},
        # no browser target is timed here, so no web bundle (load_config refuses one it could not choose)
        "bundle": {"dist_dir": str(root / "dist"), "web": False},
    }


def _template(tmp_path_factory) -> dict:
    """The config dict of a tiny run whose bundle stage has run, built once per test session: the pytest-xdist
    workers share it through their common temp folder, under a lock (the first builds it, the others wait)."""
    import fcntl

    from pipeline.config import config_from_dict
    from pipeline.stage import run

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root, done = shared / "bundle_template", shared / "bundle_template.json"
    with open(shared / "bundle_template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            d = tiny_run_dict(root)
            run(config_from_dict(d, "tiny-bundle-config"), ["bundle"])
            done.write_text(json.dumps(d))
    return json.loads(done.read_text())


def bundled_run(tmp_path_factory):
    """(config dict, Config) of a tiny run whose bundle stage has run, this process's own copy (tests change
    it): the shared template's run folder copied, and its bundle stage run again into this copy's dist folder
    (the only stage whose settings differ), which takes seconds where building the run takes about 40."""
    if not _RUN:
        from pipeline.config import config_from_dict
        from pipeline.stage import run

        d = _template(tmp_path_factory)
        mine = tmp_path_factory.mktemp("bundle_run")
        shutil.copytree(d["run"]["runs_dir"], mine / "runs", ignore=shutil.ignore_patterns(".lock"))
        d["run"]["runs_dir"], d["bundle"]["dist_dir"] = str(mine / "runs"), str(mine / "dist")
        cfg = config_from_dict(d, "tiny-bundle-config")
        assert run(cfg, ["bundle"]) == ["bundle"]
        _RUN.update(d=d, cfg=cfg)
    return _RUN["d"], _RUN["cfg"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return bundled_run(tmp_path_factory)


def _meta(cfg) -> dict:
    return json.loads((cfg.run_dir / "bundle" / "metadata.json").read_text())


def test_bundle_contents_and_choice(built):
    _, cfg = built
    meta = _meta(cfg)
    bundle = cfg.run_dir / "bundle"
    assert meta["model"]["name"] == "student"
    # the choice follows the documented rule on the report's own numbers
    cands = meta["model"]["choice"]["candidates"]
    best = max(c["accuracy"] for c in cands)
    ok = [c for c in cands if c["accuracy"] >= best - cfg.bundle.accuracy_window]
    # equal p50s fall to the higher accuracy, then the smaller file (export/bundle.py choose)
    pick = min(ok, key=lambda c: (c["mobile-cpu_p50_ms"], -c["accuracy"], c["size_bytes"]))
    assert meta["model"]["variant"] == pick["variant"]
    results = json.loads((cfg.run_dir / "report" / "results.json").read_text())
    row = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) ==
               ("student", meta["model"]["variant"], "ort"))
    # the report's sweep number, and the median of the file's interleaved rounds that chose it
    got = meta["latency"]["mobile-cpu"]
    assert got["p50_ms"] == row["latency"]["mobile-cpu"]["32"]["p50_ms"]
    assert got["rounds_p50_ms"] == rounds_p50(row, "mobile-cpu", 32) > 0
    # the bundle scores its file one text per call; the report's figure for it (padded batches) is named beside it
    acc, readme = meta["accuracy"], (bundle / "README.md").read_text()
    assert (acc["batch"], acc["report"]["file"], acc["report"]["batch"]) == (1, row["file"], cfg.teacher.eval_batch_size)
    assert acc["report"]["accuracy"] == row["accuracy"]
    assert f"on {acc['texts']} test texts, one text per call as an app runs it" in " ".join(readme.split())
    stem = f"student-{meta['model']['variant']}"
    for rel in (f"model/{stem}.ort", f"model/{stem}.onnx", f"model/{stem}-text.onnx", "tokenizer/vocab.txt",
                "labels.json", "samples.json", "README.md", "android/PocketformerClassifier.kt",
                "ios/PocketformerClassifier.swift", "model/student-fp16.mlpackage/Manifest.json"):
        assert rel in meta["files"], rel
        assert (bundle / rel).is_file()
    assert meta["labels"] == ["negative", "neutral", "positive"]
    assert meta["label_map"] == {"0": "negative", "1": "neutral", "2": "positive"}
    assert [i["name"] for i in meta["models"]["ort"]["inputs"]] == ["input_ids", "attention_mask"]
    assert meta["models"]["string_onnx"]["inputs"] == [{"name": "text", "type": "tensor(string)", "shape": [1]}]
    assert meta["text_normalisation"]["lowercase"] is True and meta["max_length"] == 32
    # Core ML's types as the shipped package declares them (an fp16 package returns float16 logits)
    cm = meta["models"]["coreml"]
    assert [i["type"] for i in cm["inputs"]] == ["int32", "int32"] and cm["outputs"][0]["type"] == "float16"
    assert meta["string_model_check"]["agreement"] >= cfg.bundle.min_agreement
    assert meta["string_model_check"]["texts"] == 120 and meta["string_model_check"]["token_ids_differ"] == 0
    assert "onnxruntime" in meta["versions"] and "onnxruntime-extensions" in meta["versions"]
    # the file per workload on mobile-cpu: batch 1 is the shipped file (the same rule as the choice), batch 32
    # the most sequences/s among the files timed at batch 32 (int8-dynamic, the only sweep variant here)
    work = meta["workloads"]
    assert set(work) == {"batch1", "batch32"}
    assert work["batch1"]["variant"] == meta["model"]["variant"] and work["batch1"]["in_bundle"] is True
    assert work["batch1"]["file"] == f"model/{stem}.ort" and work["batch1"]["p50_ms"] > 0
    b32 = work["batch32"]
    int8_in = next(c["within_window"] for c in cands if c["variant"] == "int8-dynamic")
    if not int8_in:  # the one file timed at batch 32 is outside the window: nothing to name, and why
        assert b32["status"] == "not measured" and "batch-32" in b32["reason"]
    elif b32["variant"] == meta["model"]["variant"]:
        assert b32["in_bundle"] is True and b32["file"] == f"model/{stem}.ort"
    else:
        assert b32["in_bundle"] is False and b32["run_file"] == f"export/student/{b32['variant']}.ort"
    if int8_in:
        assert b32["variant"] == "int8-dynamic" and b32["batch"] == 32 and b32["sequences_per_s"] > 0
    # the published copy is the same bundle, with no partial folders left beside it
    dist = Path(cfg.bundle.dist_dir) / "tiny"
    assert json.loads((dist / "metadata.json").read_text())["files"] == meta["files"]
    assert sorted(p.name for p in dist.parent.iterdir()) == ["tiny"]


def test_string_model_matches_tokenizer_pair_on_raw_text(built, tmp_path):
    from transformers import AutoTokenizer

    from export.checks import ort_runner, predict
    from export.ort_session import ort_session
    from export.string_model import build_string_model, predict_strings, token_id_mismatches

    _, cfg = built
    bundle = cfg.run_dir / "bundle"
    # truncation past max_length, accents, an empty text, and what BERT's text cleaning drops (U+FFFD from
    # undecodable bytes, a zero-width joiner, a control char): the extensions op alone keeps those as [UNK]
    texts = ["GOOD movie, really great!", "the awful awful train " * 12, "Café paper window", "",
             "good\ufffd\ufffd day\u200d train\x01 \ufffd"]
    tok = AutoTokenizer.from_pretrained(bundle / "tokenizer")
    assert token_id_mismatches(bundle / _meta(cfg)["models"]["string_onnx"]["file"], tok, texts, 32) == 0
    for variant in ("fp32", "int8-dynamic"):  # whichever the bundle chose, both must hold
        src = cfg.run_dir / "quantize" / "student" / f"{variant}.onnx"
        pair = predict(ort_runner(ort_session(src)), tok, texts, 32, 1)  # (5, 3), one text per call
        string = build_string_model(src, tok, 32, tmp_path / f"{variant}-text.onnx")
        got = predict_strings(ort_session(string, 1, custom_ops=True), texts)  # (5, 3)
        np.testing.assert_allclose(got, pair, atol=1e-5, err_msg=variant)  # incl. truncation past max_length


def test_samples_take_names_from_metadata(built):
    from export.app_samples.android import classifier as kotlin
    from export.app_samples.ios import classifier as swift

    _, cfg = built
    meta, bundle = _meta(cfg), cfg.run_dir / "bundle"
    kt = (bundle / "android" / "PocketformerClassifier.kt").read_text()
    sw = (bundle / "ios" / "PocketformerClassifier.swift").read_text()
    assert 'mapOf("text" to input)' in kt and 'result.get("probabilities")' in kt
    assert f'assets.open("{meta["models"]["string_onnx"]["file"].split("/")[-1]}")' in kt
    assert 'listOf("negative", "neutral", "positive")' in kt
    assert '["input_ids": inputIds, "attention_mask": mask]' in sw and 'featureValue(for: "logits")' in sw
    assert "maxLength = 32" in sw
    # renamed inputs / outputs in the metadata must change the generated code, not be ignored
    m = json.loads(json.dumps(meta))
    m["models"]["string_onnx"]["inputs"][0]["name"] = "raw_text"
    m["models"]["coreml"]["inputs"][0]["name"] = "ids"
    m["models"]["coreml"]["outputs"][0]["name"] = "scores"
    assert 'mapOf("raw_text" to input)' in kotlin(m) and '"text" to' not in kotlin(m)
    s2 = swift(m)
    assert '["ids": inputIds' in s2 and 'featureValue(for: "scores")' in s2
    readme = (bundle / "README.md").read_text()
    assert "Android Studio" in readme and "Xcode" in readme and "verify-bundle" in readme
    assert f"Core ML's {cm_target(meta)}: set the app's minimum deployment to iOS " in readme
    assert "output\n   `logits` (float16)" in readme or "`logits` (float16)" in " ".join(readme.split())
    assert ("## Android NPU" in readme) == bool(meta["qnn"].get("shipped"))  # where context binaries ship
    # the Swift tokenizer follows the tokenizer's own switches: a cased one neither lower-cases nor strips
    assert "let lowercase = true" in sw and "let stripAccents = true" in sw and "let chineseChars = true" in sw
    cased = json.loads(json.dumps(meta))
    cased["text_normalisation"].update(lowercase=False, strip_accents=None, tokenize_chinese_chars=False)
    s3 = swift(cased)
    assert "let lowercase = false" in s3 and "let stripAccents = false" in s3 and "let chineseChars = false" in s3
    assert "/// - lower-case" not in s3 and "/// - lower-case" in sw
    # a latency measured on a stand-in for the phone says so (the report and metadata label it a proxy)
    proxied = [t for t, v in meta["latency"].items() if v.get("proxy") and "p50_ms" in v]
    assert proxied and all(f"{t} {meta['latency'][t]['p50_ms']:.2f} ms (host proxy, not a phone)" in readme
                           for t in proxied)


def cm_target(meta: dict) -> str:
    return meta["models"]["coreml"]["deployment_target"]


def test_readme_npu_section_where_context_binaries_ship(built):
    """Where the bundle ships HTP context binaries, the README says where each file goes in the app."""
    from export.app_samples import classification_readme

    _, cfg = built
    m = _meta(cfg)
    m["qnn"] = {"shipped": True, "fallback": "model/student-int8-dynamic.ort",
                "chips": {"8gen2": {"name": "Snapdragon 8 Gen 2", "android_soc_model": "SM8550"}}}
    readme = " ".join(classification_readme(m).split())
    assert "## Android NPU (Qualcomm Hexagon, ONNX Runtime QNN)" in readme
    assert "for Snapdragon 8 Gen 2 (`SM8550`)" in readme and "`android/PocketformerNpuClassifier.kt`" in readme
    assert ("Copy the bundle's `npu/` folder into `app/src/main/assets/` as it is, and "
            "`model/student-int8-dynamic.ort` to `assets/student-int8-dynamic.ort`") in readme
    assert f"(it cuts at {m['max_length']} tokens)" in readme


def _verify(path: Path) -> subprocess.CompletedProcess:
    code = ("import argparse, sys\nfrom pipeline import verify\np = argparse.ArgumentParser()\n"
            "verify.add_cli(p.add_subparsers(dest='command'))\nsys.exit(verify.run_cli(p.parse_args(sys.argv[1:])))")
    return subprocess.run([sys.executable, "-c", code, "verify-bundle", str(path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=300)


def test_verify_bundle_passes_then_names_a_changed_file(built, tmp_path):
    _, cfg = built
    copy = tmp_path / "bundle copy"  # a space in the path: arguments, not a shell string
    shutil.copytree(Path(cfg.bundle.dist_dir) / "tiny", copy)
    ok = _verify(copy)
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"string_onnx: .*8/8 sample labels match", ok.stdout)
    assert re.search(r"\bort: .*8/8 sample labels match", ok.stdout)
    meta = json.loads((copy / "metadata.json").read_text())
    onnx_file = copy / meta["models"]["onnx"]["file"]
    data = bytearray(onnx_file.read_bytes())
    data[-1] ^= 0xFF
    onnx_file.write_bytes(bytes(data))
    bad = _verify(copy)
    assert bad.returncode == 2
    assert f"{meta['models']['onnx']['file']} was changed" in bad.stderr
    (copy / "labels.json").unlink()
    onnx_file.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 0xFF]))  # restored
    missing = _verify(copy)
    assert missing.returncode == 2 and "labels.json is missing" in missing.stderr


def test_verify_fails_when_stored_labels_disagree(built, tmp_path):
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle
    from export.bundle import write_metadata

    _, cfg = built
    copy = tmp_path / "b"
    shutil.copytree(Path(cfg.bundle.dist_dir) / "tiny", copy)
    samples = json.loads((copy / "samples.json").read_text())
    labels = json.loads((copy / "labels.json").read_text())
    samples[0]["expected_label"] = next(lab for lab in labels if lab != samples[0]["expected_label"])
    (copy / "samples.json").write_text(json.dumps(samples))
    meta = json.loads((copy / "metadata.json").read_text())
    write_metadata(copy, {k: v for k, v in meta.items() if k != "files"})  # hashes agree: only labels differ
    with pytest.raises(PipelineError, match=r"labels sample 1 .* samples\.json expects .*samples\.json was edited"):
        verify_bundle(copy)


def test_missing_variant_names_the_stage(built):
    from pipeline.config import config_from_dict
    from pipeline.errors import PipelineError
    from pipeline.stage import run

    d, _ = built
    d = json.loads(json.dumps(d))
    d["bundle"]["variant"] = "int8-static"
    # refused when the config loads, before any stage runs (pipeline/config_rules.py)
    with pytest.raises(PipelineError, match=r"'bundle.variant' = 'int8-static': no \.ort file.*export\.ort_variants"):
        run(config_from_dict(d, "cfg"), ["bundle"])
    d["bundle"].update(model="lstm_distilled", variant="auto")
    with pytest.raises(PipelineError, match=r"'bundle.model' = 'lstm_distilled' ships the lstm_distilled, which "
                                            r"'quantize.models'.*--set 'quantize.models="):
        run(config_from_dict(d, "cfg"), ["bundle"])


def test_publish_never_leaves_a_half_bundle(tmp_path, monkeypatch):
    from export.publish import publish

    src = tmp_path / "src"
    (src / "model").mkdir(parents=True)
    (src / "model" / "a.ort").write_bytes(b"new")
    dest = tmp_path / "dist" / "run"
    (dest).mkdir(parents=True)
    (dest / "old.txt").write_text("old bundle")

    def broken(s, d, *a, **k):  # interrupted half-way through the copy
        Path(d).mkdir(parents=True)
        (Path(d) / "half").write_text("x")
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copytree", broken)
    with pytest.raises(KeyboardInterrupt):
        publish(src, dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["run"]
    assert (dest / "old.txt").read_text() == "old bundle"  # the old bundle is untouched
    monkeypatch.undo()
    publish(src, dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["run"]
    assert (dest / "model" / "a.ort").read_bytes() == b"new" and not (dest / "old.txt").exists()


def test_string_model_disagreement_fails_the_stage(built, monkeypatch):
    """An in-graph tokenizer that cuts texts shorter than training did must fail the check, and the
    published bundle must stay the previous one."""
    import export.string_model as sm
    from pipeline.config import config_from_dict
    from pipeline.errors import PipelineError
    from pipeline.stage import run

    d, cfg = built
    before = (Path(cfg.bundle.dist_dir) / "tiny" / "metadata.json").read_text()
    real = sm.build_string_model
    monkeypatch.setattr(sm, "build_string_model", lambda path, tok, max_length, out: real(path, tok, 3, out))
    with pytest.raises(PipelineError, match=r"agrees with tokenizer \+ model on only .*bundle.min_agreement"):
        run(config_from_dict(d, "cfg"), ["bundle"], force=("bundle",))
    assert (Path(cfg.bundle.dist_dir) / "tiny" / "metadata.json").read_text() == before
    assert (cfg.run_dir / "bundle" / "metadata.json").is_file()  # the finished stage folder was kept


def test_string_model_gate_refuses_a_test_split_too_small_for_its_share(built, monkeypatch):
    """"100% on 1 test text" passed bundle.min_agreement = 0.99 before: the gate now needs 1 / (1 - 0.99) = 100
    texts, says so before anything is built, and the published bundle stays the previous one."""
    import pipeline.tasks.classification.bundle as B
    from pipeline.config import config_from_dict
    from pipeline.errors import PipelineError
    from pipeline.stage import run

    d, cfg = built
    meta = _meta(cfg)
    assert meta["string_model_check"]["texts"] == 120 and meta["string_model_check"]["needed_texts"] == 100
    before = (Path(cfg.bundle.dist_dir) / "tiny" / "metadata.json").read_text()
    real = B.read_split
    monkeypatch.setattr(B, "read_split", lambda folder, split: real(folder, split)[:1])
    with pytest.raises(PipelineError, match=r"the string-in model's agreement check would be decided on 1 test "
                                            r"text\(s\), but bundle.min_agreement = 0.99 needs at least 100: .*"
                                            r"bigger test split .*lower bundle.min_agreement"):
        run(config_from_dict(d, "cfg"), ["bundle"], force=("bundle",))
    assert (Path(cfg.bundle.dist_dir) / "tiny" / "metadata.json").read_text() == before


def test_the_readme_names_the_reports_accuracy_where_batching_moved_it():
    from export.app_samples import _how_scored

    acc = {"accuracy": 0.74736, "batch": 1, "report": {"file": "export/student/int8-dynamic.ort", "accuracy": 0.75,
                                                       "batch": 64}}
    assert _how_scored(acc) == (", one text per call as an app runs it (the report's 0.7500 ran "
                                "`export/student/int8-dynamic.ort` over the same texts in padded batches of 64: a "
                                "quantized file's scores move with the batch)")
    assert _how_scored({**acc, "accuracy": 0.75}) == ", one text per call as an app runs it"
    assert _how_scored({"accuracy": 0.75}) == ""  # a bundle from before the batch was recorded


# Texts a dataset can put in a label or the first sample: each is a different escape in Kotlin and Swift
_AWKWARD = ["form\x0cfeed", "bell\x07 bs\x08 nul\x00", "tab\t nl\n cr\r", "back\\slash \\f \\u0041", 'q "x" \'y\'',
            "dollar $x ${y} $", "\\(interp)", "caf\u00e9 \u4e2d", "emoji \U0001F600\U0001F44D", "sep \u2028 del \x7f", ""]


def _kotlin_value(literal: str) -> str:
    """The string a Kotlin literal denotes, by Kotlin's rules; AssertionError on anything kotlinc refuses (an
    escape it lacks, such as JSON's \\f) or reads otherwise ($ starting a template, a raw quote or line break)."""
    assert literal[0] == literal[-1] == '"', literal
    body, units, i = literal[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            e = body[i + 1]
            if e == "u":
                units.append(int(body[i + 2:i + 6], 16))
                i += 6
                continue
            assert e in "tbnr'\"\\$", f"{literal}: \\{e} is no Kotlin escape"
            units.append(ord({"t": "\t", "b": "\b", "n": "\n", "r": "\r"}.get(e, e)))
            i += 2
        else:
            assert c not in '"$\n\r' and " " <= c <= "~", f"{literal}: raw {c!r}"
            units.append(ord(c))
            i += 1
    return b"".join(u.to_bytes(2, "little") for u in units).decode("utf-16-le")


def _swift_value(literal: str) -> str:
    """The string a Swift literal denotes, by Swift's rules (\\0 \\\\ \\t \\n \\r \\" \\' \\u{1-8 hex digits}, a
    Unicode scalar); AssertionError on what swiftc refuses (JSON's \\uXXXX, \\b, \\f) or interpolates (\\()."""
    assert literal[0] == literal[-1] == '"', literal
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            e = body[i + 1]
            if e == "u":
                assert body[i + 2] == "{", f"{literal}: \\u without braces is no Swift escape"
                end = body.index("}", i)
                code = int(body[i + 3:end], 16)
                assert 1 <= end - i - 3 <= 8 and not 0xD800 <= code <= 0xDFFF, f"{literal}: \\u{{{code:x}}}"
                out.append(chr(code))
                i = end + 1
                continue
            assert e in "0\\tnr\"'", f"{literal}: \\{e} is no Swift escape"
            out.append({"0": "\0", "t": "\t", "n": "\n", "r": "\r"}.get(e, e))
            i += 2
        else:
            assert c not in '"\n\r' and " " <= c <= "~", f"{literal}: raw {c!r}"
            out.append(c)
            i += 1
    return "".join(out)


@pytest.mark.parametrize("text", _AWKWARD)
def test_sample_string_literals_are_kotlin_and_swift_ones(text):
    """kotlinc 2.4 refused the demo text of a sample with a form feed ("unsupported escape sequence": JSON's \\f),
    and Swift has none of JSON's \\uXXXX, \\b, \\f (json.dumps wrote the Swift sample's labels and text)."""
    from export.app_samples.common import kt_string, swift_string

    assert _kotlin_value(kt_string(text)) == text
    assert _swift_value(swift_string(text)) == text


def test_plain_ascii_literals_are_unchanged():
    """Bundles built before the escaping fix regenerate byte for byte (verify-bundle) where the text is printable
    ASCII: the literal is json.dumps's (and $ escaped for Kotlin)."""
    from export.app_samples.common import kt_string, swift_string

    for text in ("@AmericanAir Worst airline. I wait 30 mins?!!", 'say "hi" \\ $5', "negative", "tab\tnl\n"):
        assert kt_string(text) == json.dumps(text).replace("$", "\\$")
        assert swift_string(text) == json.dumps(text)


def _awkward_meta() -> dict:
    """Classification metadata with every sample file, labels and first text from _AWKWARD."""
    labels = ['neg "q" $x', "pos \\ caf\u00e9 \U0001F600", "mid\x0cdle"]
    io = [{"name": "input_ids", "type": "tensor(int64)"}, {"name": "attention_mask", "type": "tensor(int64)"}]
    return {
        "run": "r", "model": {"name": "student", "variant": "int8-dynamic"}, "versions": {"onnxruntime": "1.32.0"},
        "labels": labels, "bert_wordpiece": True,
        "samples": [{"text": "".join(_AWKWARD), "token_ids": [101, 7, 102], "expected_label": labels[1]}],
        "models": {"string_onnx": {"file": "model/s-text.onnx", "inputs": [{"name": "text"}],
                                   "outputs": [{"name": "logits"}, {"name": "probabilities"}]},
                   "ort": {"file": "model/s.ort", "inputs": io},
                   "coreml": {"file": "model/s.mlpackage", "inputs": io, "outputs": [{"name": "logits"}],
                              "sequence_lengths": [16, 32], "pad_id": 0}},
        "text_normalisation": {"strip_accents": None, "lowercase": True, "tokenize_chinese_chars": True,
                               "max_length": 32, "special_tokens": {}},
        "qnn": {"shipped": True, "pad_id": 0, "chips": {"8gen2": {
            "name": "Snapdragon 8 Gen 2", "android_soc_model": "SM8550", "variant": "int8-static", "lengths": [16],
            "files": {"16": {"inputs": io}}}}},
    }


def test_samples_write_labels_and_text_as_literals_of_their_language():
    """Every label and the demo text reach the Kotlin and Swift samples as literals their compilers read back as
    the same string; the NPU sample's demo wrote its expected label raw into a Kotlin string (a quote, $ or
    backslash in a label broke the build: kotlinc "unsupported escape sequence")."""
    from export.app_samples.android import classifier, npu_classifier
    from export.app_samples.common import kt_in_string, kt_string, swift_string
    from export.app_samples.ios import classifier as swift

    m = _awkward_meta()
    text, kt, npu, sw = m["samples"][0]["text"], classifier(m), npu_classifier(m), swift(m)
    assert f"val LABELS = listOf({', '.join(map(kt_string, m['labels']))})" in kt
    assert f"val LABELS = listOf({', '.join(map(kt_string, m['labels']))})" in npu
    assert f"c.classify({kt_string(text)})" in kt
    assert f'"label=$label (samples.json expects {kt_in_string(m["labels"][1])})"' in npu
    assert _kotlin_value(f'"{kt_in_string(m["labels"][1])}"') == m["labels"][1]
    assert f"static let labels = [{', '.join(map(swift_string, m['labels']))}]" in sw
    assert f"PocketformerClassifier().classify({swift_string(text)})" in sw
    for label in m["labels"]:
        assert _kotlin_value(kt_string(label)) == label and _swift_value(swift_string(label)) == label


def test_npu_sample_runs_a_text_longer_than_its_lengths_on_the_cpu_file():
    """Compiled lengths can stop short of max_length (quantize.npu_lengths, or a length whose compile failed): the
    NPU sample cut such a text to its longest length, dropping [SEP] and the text's end (on the JVM, with the
    compiled graphs' QDQ sources in place of the context binaries and lengths cut to 16 and 32, a 36-id demo
    sample came out neutral for positive). It now runs it whole on the CPU .ort, loaded at the first such text."""
    from export.app_samples import _npu
    from export.app_samples.android import npu_classifier

    kt = npu_classifier(_awkward_meta())
    assert "if (npu.isNotEmpty() && ids.size <= lengths.last()) runNpu(ids) else runCpu(ids)" in kt
    assert "val n = lengths.first { it >= ids.size }" in kt and "?: lengths.last()" not in kt
    assert "private val cpuFile = lazy {" in kt and 'env.createSession(context.assets.open("s.ort")' in kt
    assert "cpuFile.value.run(mapOf(" in kt and "if (cpuFile.isInitialized()) cpuFile.value.close()" in kt
    assert "(a longer text runs s.ort on the CPU)" in kt and kt.count("{") == kt.count("}")
    m = {**_awkward_meta(), "max_length": 32, "qnn": {**_awkward_meta()["qnn"], "fallback": "model/s.ort"}}
    assert "text longer than the chip's longest compiled length runs on `model/s.ort` (whole: never cut to fit)" in \
        " ".join(_npu(m).split())
