"""verify-bundle on the tiny run's bundle (built once, shared with test_bundle_stage.py): per-file reference
logits, paths that leave the bundle, malformed metadata, a machine with only onnxruntime installed, and Core
ML's enumerated shapes (a fake package that enforces them, since Core ML predicts only on macOS)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from test_bundle_stage import bundled_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return bundled_run(tmp_path_factory)


@pytest.fixture
def copy(built, tmp_path) -> Path:
    _, cfg = built
    dst = tmp_path / "bundle"
    shutil.copytree(Path(cfg.bundle.dist_dir) / "tiny", dst)
    return dst


def _rehash(bundle: Path, meta: dict) -> None:
    from export.bundle import write_metadata

    write_metadata(bundle, {k: v for k, v in meta.items() if k not in ("files", "schema_version")})


def _cli(bundle: Path, capsys) -> tuple[int, str, str]:
    from pipeline.cli import main

    rc = main(["verify-bundle", str(bundle)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_without_a_folder_it_checks_the_bundles_the_configs_run_published(built, capsys, monkeypatch):
    """`make verify-bundle CONFIG=...`: <bundle.dist_dir>/<run.name> (and -web where there is one), not dist/demo."""
    import dataclasses

    from pipeline import config
    from pipeline.cli import main

    _, cfg = built
    monkeypatch.setattr(config, "load_config", lambda path, overrides: cfg)
    assert main(["verify-bundle", "--config", "any.toml"]) == 0
    out = capsys.readouterr().out
    assert f"bundle OK: {Path(cfg.bundle.dist_dir) / 'tiny'} (" in out
    other = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, name="never-built"))
    monkeypatch.setattr(config, "load_config", lambda path, overrides: other)
    assert main(["verify-bundle", "--config", "any.toml"]) == 2
    err = capsys.readouterr().err
    assert "run 'never-built' (any.toml) has no published bundle" in err and "make bundle" in err
    assert main(["verify-bundle", str(Path(cfg.bundle.dist_dir) / "tiny"), "--config", "any.toml"]) == 2
    assert "not both" in capsys.readouterr().err


# --- 1. each file against its own reference ---------------------------------------------------------------

def test_every_onnxruntime_file_has_its_own_reference(built, copy, capsys):
    meta = json.loads((copy / "metadata.json").read_text())
    samples = json.loads((copy / "samples.json").read_text())
    files = {meta["models"][k]["file"] for k in ("ort", "onnx", "string_onnx")}
    # the HTP context binaries (where the compile stage passed some) have theirs on the samples that fit them
    qnn = {spec["file"] for e in (meta.get("qnn") or {}).get("chips", {}).values() for spec in e["files"].values()}
    assert all(set(s["reference_logits"]) - qnn == files for s in samples)
    assert all(isinstance(t, int) for s in samples for t in s["token_ids"])
    rc, out, err = _cli(copy, capsys)
    assert rc == 0, err
    # enough digits to see how close a file is to its bound
    assert re.search(r"\bort: model/\S+\.ort: 8/8 sample labels match, max \|logit - reference\| \d\.\d{3}e[-+]\d\d "
                     r"\(allowed 0\.005 \+ 0\.001 x \|reference\|\)", out), out


def test_the_shipped_tokenizer_gives_the_stored_ids(copy, capsys):
    """Apps tokenize with tokenizer/tokenizer.json: verify runs it on the samples (where the tokenizers library
    is installed) and names it when its ids are not the ones the reference logits came from."""
    rc, out, err = _cli(copy, capsys)
    assert rc == 0 and "tokenizer: tokenizer/tokenizer.json gives the stored ids of 8/8 samples" in out, out + err
    samples = json.loads((copy / "samples.json").read_text())
    path = copy / "tokenizer" / "tokenizer.json"
    tok = json.loads(path.read_text())
    vocab = tok["model"]["vocab"]  # swap the ids of the first sample's first word piece and another token
    first = next(t for t, i in vocab.items() if i == samples[0]["token_ids"][1])
    other = next(t for t, i in vocab.items() if i not in samples[0]["token_ids"] and not t.startswith("["))
    vocab[first], vocab[other] = vocab[other], vocab[first]
    path.write_text(json.dumps(tok))
    _rehash(copy, json.loads((copy / "metadata.json").read_text()))  # hashes pass: the ids must not
    rc, out, err = _cli(copy, capsys)
    assert rc == 2 and "tokenizer/tokenizer.json encodes sample 1" in err and "from token 2" in err, err


def test_a_file_is_compared_with_its_own_reference_not_its_twins(built, copy):
    """The .ort swapped for the teacher's .ort, with its own references stored (samples where both models give
    the same label): it passes, though its logits are far from the .onnx's (today's main held every file to the
    .onnx's logits and failed such a bundle)."""
    from pipeline.verify import verify_bundle
    from pipeline.tasks.classification.replay import run_models

    _, cfg = built
    meta = json.loads((copy / "metadata.json").read_text())
    rows = json.loads((cfg.run_dir / "export" / "variants.json").read_text())
    teacher = next(r for r in rows if r["format"] == "ort" and r["model"] == "teacher")
    shutil.copy2(cfg.run_dir / teacher["file"], copy / meta["models"]["ort"]["file"])
    samples = json.loads((copy / "samples.json").read_text())
    logits = run_models(copy, {"ort": meta["models"]["ort"]}, samples)["ort"]
    keep = [(s, row) for s, row in zip(samples, logits) if meta["labels"][int(np.argmax(row))] == s["expected_label"]]
    assert len(keep) >= 3
    ort_rel, onnx_rel = meta["models"]["ort"]["file"], meta["models"]["onnx"]["file"]
    for s, row in keep:
        s["reference_logits"][ort_rel] = row
    gap = max(np.abs(np.array(row) - s["reference_logits"][onnx_rel]).max() for s, row in keep)
    assert gap > 1e-2  # another model: far beyond any logit tolerance from the .onnx's logits
    (copy / "samples.json").write_text(json.dumps([s for s, _ in keep]))
    _rehash(copy, meta)
    summary = verify_bundle(copy)
    assert summary["models"]["ort"]["max_abs_logit_diff"] < 1e-5 and summary["samples"] == len(keep)


def test_a_wrong_file_with_the_old_references_fails_with_digits(built, copy):
    """Another model's file under the shipped name (hashes rewritten, references not) fails on its logits,
    naming the file, both values, the difference and the bound."""
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    _, cfg = built
    meta = json.loads((copy / "metadata.json").read_text())
    rows = json.loads((cfg.run_dir / "export" / "variants.json").read_text())
    teacher = next(r for r in rows if r["format"] == "ort" and r["model"] == "teacher")
    shutil.copy2(cfg.run_dir / teacher["file"], copy / meta["models"]["ort"]["file"])
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=rf"{re.escape(meta['models']['ort']['file'])} logit \w+ of sample \d+ is "
                                            r"-?\d\S*, its reference is -?\d\S* \(difference \d\.\d{4}e[-+]\d\d, "
                                            r"allowed \d\.\d{4}e-03 = 0\.005 \+ 0\.001 x \|reference\|\); "
                                            r"the file is intact"):
        verify_bundle(copy)


def test_a_reference_off_by_more_than_the_bound_fails(copy):
    from pipeline.errors import PipelineError
    from pipeline.tasks.classification.verify import LOGIT_ATOL, LOGIT_RTOL
    from pipeline.verify import verify_bundle

    meta = json.loads((copy / "metadata.json").read_text())
    samples = json.loads((copy / "samples.json").read_text())
    rel = meta["models"]["string_onnx"]["file"]
    ref = samples[3]["reference_logits"][rel]
    ref[1] += 2 * (LOGIT_ATOL + LOGIT_RTOL * abs(ref[1]))  # twice the bound on one logit of one sample
    (copy / "samples.json").write_text(json.dumps(samples))
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=rf"{re.escape(rel)} logit \w+ of sample 4 "):
        verify_bundle(copy)


def test_the_shipped_tokenizer_cuts_at_max_length_and_verify_checks_it(copy, capsys):
    """tokenizer/ as an app runs it (the tokenizers library) cuts a long text at max_length, [SEP] last, and
    says so in tokenizer_config.json: save_pretrained left 512 / no truncation there, and a long text then
    fed the model positions it does not have. A bundle without the cap is refused, naming the file."""
    from tokenizers import Tokenizer

    meta = json.loads((copy / "metadata.json").read_text())
    n, sep = meta["max_length"], meta["text_normalisation"]["special_tokens"]["sep_token"]["id"]
    for folder in ("tokenizer", "hf"):
        ids = Tokenizer.from_file(str(copy / folder / "tokenizer.json")).encode("good movie " * 100).ids
        assert len(ids) == n and ids[-1] == sep, folder
        assert json.loads((copy / folder / "tokenizer_config.json").read_text())["model_max_length"] == n
    fast, conf = copy / "tokenizer" / "tokenizer.json", copy / "tokenizer" / "tokenizer_config.json"
    original = fast.read_text(encoding="utf-8")
    edited = json.loads(original)
    edited["truncation"] = None
    fast.write_text(json.dumps(edited), encoding="utf-8")
    _rehash(copy, meta)
    rc, out, err = _cli(copy, capsys)
    assert rc == 2 and "bundle OK" not in out
    assert f"tokenizer/tokenizer.json has truncation None, not the bundle's max_length {n}, so an app" in err
    fast.write_text(original, encoding="utf-8")
    tc = json.loads(conf.read_text())
    conf.write_text(json.dumps({**tc, "model_max_length": 512}))
    _rehash(copy, meta)
    rc, _, err = _cli(copy, capsys)
    assert rc == 2 and f"tokenizer/tokenizer_config.json has model_max_length 512, not the bundle's max_length {n}" in err


def test_files_the_build_did_not_write_are_refused(copy, capsys):
    """A file metadata.json does not list would ship unchecked (a stray model): refused, naming it; what file
    managers leave (.DS_Store, ._name) is let through with a note."""
    (copy / "model" / "extra.onnx").write_bytes(b"not from the build")
    rc, out, err = _cli(copy, capsys)
    assert rc == 2 and "bundle OK" not in out and len(err.strip().splitlines()) == 1
    assert "1 file that metadata.json does not list (model/extra.onnx): not part of the build" in err
    (copy / "model" / "extra.onnx").unlink()
    (copy / ".DS_Store").write_bytes(b"\0")
    (copy / "model" / "._student.onnx").write_bytes(b"\0")
    rc, out, err = _cli(copy, capsys)
    assert rc == 0, err
    assert "note: file managers' files, not in metadata.json (not checked): .DS_Store, model/._student.onnx" in out
    # a model file gone along with its 'files' entry: the entry that names it is refused
    meta = json.loads((copy / "metadata.json").read_text())
    rel = meta["models"]["onnx"]["file"]
    meta["files"].pop(rel)
    (copy / rel).unlink()
    (copy / "metadata.json").write_text(json.dumps(meta))
    rc, _, err = _cli(copy, capsys)
    assert rc == 2 and f"models.onnx.file = {rel!r} is not in 'files'" in err, err


def _resign_sample(copy: Path, rel: str, edit) -> None:
    """edit(path) on an app sample, then every hash and the digest rewritten to match, as a careful hand would."""
    edit(copy / rel)
    _rehash(copy, json.loads((copy / "metadata.json").read_text()))


def test_a_resigned_edit_of_an_app_sample_fails(copy, capsys):
    """The Kotlin / Swift samples are generated from metadata.json: a sample edited with its sha256 rewritten
    passed verify-bundle, and an app copying it ran code the build never wrote."""
    meta = json.loads((copy / "metadata.json").read_text())
    shipped = sorted(rel for rel in meta["files"] if rel.endswith((".kt", ".swift")))
    assert "android/PocketformerClassifier.kt" in shipped
    rc, out, err = _cli(copy, capsys)
    assert rc == 0 and f"app samples: {len(shipped)} Kotlin / Swift file(s), each what metadata.json generates" in out
    for rel in shipped:
        one = shutil.copytree(copy, copy.with_name(f"edited-{Path(rel).name}"))
        _resign_sample(one, rel, lambda p: p.write_text(p.read_text().replace("pocketformer", "pocketf0rmer", 1)))
        rc, out, err = _cli(one, capsys)
        assert rc == 2 and "bundle OK" not in out
        assert err.strip() == (f"error: {one}: {rel} differs from the sample this bundle's metadata generates "
                               f"(edited after the build, or built by another pocketformer version); rebuild the "
                               f"bundle with `make bundle` (a web bundle: `make web-bundle`)"), err


def test_a_resigned_missing_or_extra_app_sample_fails(copy):
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    gone = shutil.copytree(copy, copy.with_name("gone"))
    _resign_sample(gone, "android/PocketformerClassifier.kt", Path.unlink)
    with pytest.raises(PipelineError, match=r"android/PocketformerClassifier\.kt is missing: this bundle's metadata "
                                            r"generates it and the build ships it; rebuild the bundle"):
        verify_bundle(gone)
    extra = shutil.copytree(copy, copy.with_name("extra"))
    _resign_sample(extra, "android/Extra.kt", lambda p: p.write_text("class Extra\n"))
    with pytest.raises(PipelineError, match=r"android/Extra\.kt is not a sample this bundle's metadata generates "
                                            r"\(the build writes only android/PocketformerClassifier\.kt.*\); delete "
                                            r"it from the bundle and metadata\.json, or rebuild"):
        verify_bundle(extra)
    # a re-signed metadata.json the samples cannot be made from: one error, not a traceback
    meta = json.loads((copy / "metadata.json").read_text())
    _rehash(copy, {**meta, "model": "student"})
    with pytest.raises(PipelineError, match=r"metadata\.json: the app samples cannot be generated from it "
                                            r"\(TypeError: .*\): it was edited; restore it"):
        verify_bundle(copy)


# --- 2. untrusted metadata ------------------------------------------------------------------------------

def test_paths_outside_the_bundle_are_refused(copy, tmp_path, capsys):
    outside = tmp_path / "secret.txt"
    outside.write_text("not part of the bundle\n")
    from pipeline.manifest import sha256_file

    info = {"sha256": sha256_file(outside), "bytes": outside.stat().st_size}
    meta = json.loads((copy / "metadata.json").read_text())
    cases = {"../secret.txt": "climbs out", str(outside): "is absolute", "model/../../secret.txt": "climbs out"}
    (copy / "link.txt").symlink_to(outside)
    cases["link.txt"] = "leads outside the bundle"
    for rel, why in cases.items():
        m = json.loads(json.dumps(meta))
        m["files"][rel] = info  # correct hash: on today's main this read the file and said OK
        (copy / "metadata.json").write_text(json.dumps(m))
        rc, out, err = _cli(copy, capsys)
        assert rc == 2 and why in err and "bundle OK" not in out, (rel, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    (copy / "link.txt").unlink()  # else refused first as a file metadata.json does not list
    m = json.loads(json.dumps(meta))
    m["samples_file"] = "/etc/passwd"
    (copy / "metadata.json").write_text(json.dumps(m))
    rc, _, err = _cli(copy, capsys)
    assert rc == 2 and "samples_file names '/etc/passwd', which is absolute" in err


@pytest.mark.parametrize("kind, make, dist", [("app", "bundle", "dist/<run>"), ("web", "web-bundle", "dist/<run>-web")])
def test_a_missing_or_changed_file_names_the_bundles_own_make_target(tmp_path, kind, make, dist):
    """A web bundle is re-published by `make web-bundle` into dist/<run>-web (the error said `make bundle`)."""
    from export.bundle import write_metadata
    from pipeline.errors import PipelineError
    from pipeline.verify import check_files

    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.txt").write_text("b\n")
    write_metadata(tmp_path, {"task": "classification", "kind": kind})
    (tmp_path / "a.txt").write_text("A\n")
    with pytest.raises(PipelineError, match=rf"a\.txt was changed: .*re-publish with `make {make}`$"):
        check_files(tmp_path)
    (tmp_path / "a.txt").unlink()
    with pytest.raises(PipelineError, match=rf"a\.txt is missing; .*`make {make}` \(it rebuilds {re.escape(dist)} "):
        check_files(tmp_path)


def test_a_file_or_a_missing_path_is_named_as_such(tmp_path, capsys):
    """Both said "is not a bundle (no metadata.json)"."""
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "metadata.json").write_text("{}")
    (bundle / "labels.json").write_text("[]")
    for path, message in [(bundle / "metadata.json", f"metadata.json is a file, not a bundle; pass the bundle "
                                                     f"folder ({bundle})"),
                          (bundle / "labels.json", f"labels.json is a file, not a bundle; pass the bundle "
                                                   f"folder ({bundle})"),
                          (tmp_path / "nowhere", "nowhere does not exist; pass a bundle folder (e.g. dist/<run>)")]:
        rc, out, err = _cli(path, capsys)
        assert rc == 2 and err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err


def test_a_link_loop_is_one_error_naming_the_file(copy, capsys):
    """A file replaced by a link to itself (pathlib's resolve raised "Symlink loop": a traceback)."""
    (copy / "labels.json").unlink()
    (copy / "labels.json").symlink_to("labels.json")
    rc, out, err = _cli(copy, capsys)
    assert rc == 2 and "bundle OK" not in out
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "labels.json is a broken link (a loop" in err


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(schema_version=1), r"schema_version 1, this verify-bundle reads 3 .*re-runs the stage"),
    (lambda m: m.update(schema_version="3"), r"schema_version is '3', not an integer: the file was edited"),
    # the OS refuses both names with exceptions of its own (a ValueError; ENAMETOOLONG from is_file)
    (lambda m: m["files"].update({"a\0b.json": {"bytes": 1, "sha256": "0" * 64}}), r"names 'a\\x00b.json', which "
                                                                                     r"holds a NUL byte"),
    (lambda m: m["files"].update({"x" * 300: {"bytes": 1, "sha256": "0" * 64}}), "has a name longer than 255 bytes"),
    (lambda m: m.update(files={}), "'files' lists no files"),
    (lambda m: m.pop("files"), "'files' is missing"),
    (lambda m: m.update(files=["labels.json"]), re.escape("""'files' must be an object of path -> {bytes, sha256}, """
                                                          """not ["labels.json"]""")),
    (lambda m: m["files"].update({"labels.json": "abc"}), r"files\['labels\.json'\] needs 'bytes'"),
    (lambda m: m["files"]["labels.json"].update(bytes="12"), r"files\['labels\.json'\] needs 'bytes'"),
    # the file is still there, unlisted: refused as not the build's (gone too: the test below)
    (lambda m: m["files"].pop(m["models"]["onnx"]["file"]), r"1 file that metadata.json does not list \(model/"),
    (lambda m: m.update(models={}), "'models' names no model"),
    (lambda m: m["models"]["ort"].pop("inputs"), "models.ort.inputs must list named tensors"),
    (lambda m: m["models"]["ort"].update(file=None), "models.ort.file names None"),
    (lambda m: m.update(labels="negative"), "'labels' must list the class names"),
])
def test_malformed_metadata_is_one_clear_error(copy, capsys, change, message):
    meta = json.loads((copy / "metadata.json").read_text())
    change(meta)
    (copy / "metadata.json").write_text(json.dumps(meta))
    rc, out, err = _cli(copy, capsys)
    assert rc == 2 and re.search(message, err), err
    assert "Traceback" not in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("change, message", [
    (lambda s: s.clear(), "holds no samples"),
    (lambda s: s[0].pop("token_ids"), "sample 1 needs 'text', 'token_ids'"),
    (lambda s: s[1].update(token_ids=["a"]), "sample 2 needs"),
    (lambda s: s[2]["reference_logits"].clear(), "sample 3 has no reference logits"),
])
def test_malformed_samples_are_one_clear_error(copy, capsys, change, message):
    meta = json.loads((copy / "metadata.json").read_text())
    samples = json.loads((copy / "samples.json").read_text())
    change(samples)
    (copy / "samples.json").write_text(json.dumps(samples))
    _rehash(copy, meta)
    rc, _, err = _cli(copy, capsys)
    assert rc == 2 and message in err and "Traceback" not in err, err


_BLOCKER = """
# Installed by tests/test_verify_bundle.py: a Python that has only onnxruntime, onnxruntime-extensions, their
# declared dependencies, the standard library and this repo's code. Other top-level imports fail as if absent.
import importlib.abc, importlib.metadata as md, os, re, sys

def _key(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def _closure(names):
    seen, todo = set(), list(names)
    while todo:
        d = todo.pop()
        if _key(d) in seen:
            continue
        seen.add(_key(d))
        for req in md.requires(d) or []:
            if "extra ==" not in req:
                todo.append(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
    return seen

_dists = _closure(["onnxruntime", "onnxruntime-extensions"])
_allowed = set(sys.stdlib_module_names) | {"pipeline", "export", "sitecustomize"}
_allowed |= {m for m, ds in md.packages_distributions().items() if any(_key(d) in _dists for d in ds)}
_allowed |= {m.split(".")[0] for m in sys.modules}  # what the interpreter loaded before this file

class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top not in _allowed:
            with open(os.environ["BLOCKED_LOG"], "a") as f:
                f.write(top + "\\n")
            raise ModuleNotFoundError(f"No module named {top!r} (blocked by the test)", name=top)
        return None

sys.meta_path.insert(0, _Block())
"""


def test_verify_runs_with_only_onnxruntime_installed(copy, tmp_path):
    """`python -m pipeline verify-bundle` and its fresh process, with torch, transformers, onnx, ... blocked."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(_BLOCKER))
    log = tmp_path / "blocked.txt"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "BLOCKED_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "verify-bundle", str(copy)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)
    blocked = set(log.read_text().split()) if log.exists() else set()
    assert proc.returncode == 0, proc.stderr
    assert "bundle OK" in proc.stdout and re.search(r"string_onnx: .*8/8", proc.stdout)
    assert "onnxruntime" not in blocked and "numpy" not in blocked
    assert not blocked & {"torch", "transformers", "coremltools", "optimum", "distill", "eval"}, blocked
    # the guard is live in that environment: an import verify-bundle must not make is refused and logged
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, cwd=REPO, env=env,
                           timeout=120)
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr and "torch" in log.read_text().split()
    # the tokenizer check is optional: without the tokenizers library it is skipped, saying so
    assert "tokenizer: skipped (the tokenizers library is not installed" in proc.stdout, proc.stdout


# --- 3. metadata.json is covered; what a mismatch is blamed on -----------------------------------------------

@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(max_length=64),
     r"max_length is 64, text_normalisation\.max_length is 32: metadata\.json was edited"),
    (lambda m: (m.update(max_length=64), m["text_normalisation"].update(max_length=64)),
     r"max_length is 64, the model was trained at 32 \(tokenizer/pocketformer\.json\): metadata\.json was edited"),
    (lambda m: m["text_normalisation"].update(lowercase=False),
     r"text_normalisation\.lowercase is False, tokenizer/tokenizer_config\.json has do_lower_case = True: "
     r"metadata\.json was edited"),
    (lambda m: m.update(labels=m["labels"][::-1], label_map={str(i): x for i, x in enumerate(m["labels"][::-1])}),
     r"'labels' is \[.*\], labels\.json says \[.*\]: metadata\.json was edited"),
    # nothing to cross-check it against: the digest catches it
    (lambda m: m["string_model_check"].update(minimum=0.5), r"metadata\.json was edited after the build"),
])
def test_edited_metadata_fails_naming_the_edit(copy, capsys, change, message):
    """Apps read labels, max_length and the lowercasing from metadata.json, which no sha256 covered: each of
    these edits passed verify-bundle before metadata.json carried its digest."""
    meta = json.loads((copy / "metadata.json").read_text())
    change(meta)
    (copy / "metadata.json").write_text(json.dumps(meta, indent=2))
    rc, out, err = _cli(copy, capsys)
    assert rc == 2 and re.search(message, err) and "bundle OK" not in out, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_metadata_edits_with_a_recomputed_digest_still_cross_check(copy):
    """An edited max_length whose digest was recomputed (a tool rewriting metadata.json) still disagrees with
    the tokenizer the model was trained with."""
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    meta = json.loads((copy / "metadata.json").read_text())
    meta.update(max_length=16)
    meta["text_normalisation"].update(max_length=16)
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=r"max_length is 16, the model was trained at 32"):
        verify_bundle(copy)


@pytest.mark.parametrize("change", [
    lambda lm: lm.update({"0": lm["1"], "1": lm["0"]}),  # two classes swapped
    lambda lm: lm.update({"3": "other"}),  # a class the model has not
    lambda lm: lm.pop("2"),
    lambda lm: lm.update({"0": 0}),
])
def test_an_edited_label_map_fails_as_edited_labels_do(copy, change):
    """label_map (class id -> name) is cross-checked against labels.json as 'labels' is: with the digest
    recomputed, a swapped or extra entry, or a label_map that is a string, passed verify-bundle."""
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    meta = json.loads((copy / "metadata.json").read_text())
    change(meta["label_map"])
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=r"'label_map' is \{.*\}, labels\.json says \[.*\], which makes it "
                                            r"\{'0': .*\}: metadata\.json was edited"):
        verify_bundle(copy)
    meta.update(label_map="negative,neutral,positive")
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=r"'label_map' is 'negative,neutral,positive', labels\.json says"):
        verify_bundle(copy)


def test_edited_reference_logits_are_named_as_such(copy):
    """One reference logit edited (hashes rewritten): the file is intact and the other files' references of
    that sample agree with it, so samples.json is blamed, not the CPU's kernels."""
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    meta = json.loads((copy / "metadata.json").read_text())
    samples = json.loads((copy / "samples.json").read_text())
    rel = meta["models"]["string_onnx"]["file"]
    samples[3]["reference_logits"][rel][1] += 0.05
    (copy / "samples.json").write_text(json.dumps(samples))
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=rf"{re.escape(rel)} logit \w+ of sample 4 .*the reference logits of "
                                            r"sample 4 in samples\.json were edited .*samples\.json edited: "
                                            r"restore it") as e:
        verify_bundle(copy)
    assert "kernels" not in str(e.value) and "pip install onnxruntime" not in str(e.value)


def test_a_model_file_from_another_bundle_is_named_as_such(built, copy):
    """The teacher's .ort copied over the shipped one: the hashes say it matches no file of this bundle (another
    run); with the hashes rewritten, its logits are off on most samples, so it is another model, not a CPU."""
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    _, cfg = built
    meta = json.loads((copy / "metadata.json").read_text())
    rows = json.loads((cfg.run_dir / "export" / "variants.json").read_text())
    teacher = next(r for r in rows if r["format"] == "ort" and r["model"] == "teacher")
    rel = meta["models"]["ort"]["file"]
    shutil.copy2(cfg.run_dir / teacher["file"], copy / rel)
    with pytest.raises(PipelineError, match=rf"{re.escape(rel)} was changed: it is not the file this bundle \(run "
                                            r"'tiny'\) was built with \(its sha256 matches no file metadata\.json "
                                            r"lists\): edited, damaged, or from another run"):
        verify_bundle(copy)
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=r"misses its reference logits on \d+ of 8 samples.*not the model these "
                                            r"references were made with \(a file from another run") as e:
        verify_bundle(copy)
    assert "kernels" not in str(e.value)
    # a copy of another file of the bundle says which
    onnx = meta["models"]["onnx"]["file"]
    shutil.copy2(copy / onnx, copy / meta["models"]["string_onnx"]["file"])
    _rehash(copy, json.loads((copy / "metadata.json").read_text()))
    meta2 = json.loads((copy / "metadata.json").read_text())
    meta2["files"][meta["models"]["string_onnx"]["file"]] = meta["files"][meta["models"]["string_onnx"]["file"]]
    (copy / "metadata.json").write_text(json.dumps(meta2))
    with pytest.raises(PipelineError, match=r"was replaced by a copy of (\S+ = )?\S+ \(its sha256") as e:
        verify_bundle(copy)
    assert onnx in str(e.value)


def test_bundle_says_its_kind_and_verify_dispatches_on_it(copy, capsys):
    meta = json.loads((copy / "metadata.json").read_text())
    assert (meta["task"], meta["kind"]) == ("classification", "app")
    meta["kind"] = "web"  # the app bundle read as a web bundle: its shape is wrong, said as such
    _rehash(copy, meta)
    rc, _, err = _cli(copy, capsys)
    assert rc == 2 and "'model' needs 'file' and 'format'" in err
    meta.pop("kind")
    _rehash(copy, meta)
    rc, _, err = _cli(copy, capsys)
    assert rc == 2 and "'kind' must be one of app, web (it is None)" in err


# --- 4. an npu student's NPU files ------------------------------------------------------------------------

@pytest.fixture
def npu_copy(copy, tmp_path):
    """The tiny bundle carrying an npu student's static NPU files (both provider variants, lengths 16 and 32),
    as export/npu_bundle.py adds them, with their reference logits stored as the bundle stage stores them."""
    import torch

    from distill.npu_student import NpuStudent, NpuStudentConfig
    from export.npu import NPU_VARIANTS, write_variant
    from export.npu_bundle import add_npu_files
    from pipeline.tasks.classification.replay import npu_logits

    meta = json.loads((copy / "metadata.json").read_text())
    samples = json.loads((copy / "samples.json").read_text())
    torch.manual_seed(0)
    student = NpuStudent(NpuStudentConfig(vocab_size=64, num_labels=len(meta["labels"]), hidden_size=32,
                                          num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                          max_position_embeddings=64)).eval()
    run, rows = tmp_path / "run", []
    for name in ("nnapi-int8", "coreml-int8w"):  # two of the default quantize.npu_variants: one of each kind
        v = NPU_VARIANTS[name]
        made = write_variant(student, run / "quantize" / "student" / "npu", name, [16, 32], 17,
                             [s["token_ids"] for s in samples], 0, "student")
        rows.append({"model": "student", "variant": f"npu-{name}", "provider": v.provider, "lengths": [16, 32],
                     "files": {str(n): p.relative_to(run).as_posix() for n, p in made["files"].items()},
                     "lookup": made["lookup"].relative_to(run).as_posix() if made["lookup"] else None})
    (run / "quantize" / "npu.json").write_text(json.dumps(rows))
    meta["npu"] = add_npu_files(run, run / "quantize", "student", copy, pad_id=0)
    for rel, got in npu_logits(copy, meta["npu"], samples).items():
        for s, row in zip(samples, got):
            if row is not None:
                s["reference_logits"][rel] = row
    (copy / "samples.json").write_text(json.dumps(samples))
    _rehash(copy, meta)
    return copy


def test_npu_files_are_hashed_and_replayed(npu_copy, capsys):
    meta = json.loads((npu_copy / "metadata.json").read_text())
    npu_files = [f["file"] for e in meta["npu"].values() for f in e["files"].values()]
    assert len(npu_files) == 4 and all(rel in meta["files"] for rel in npu_files)
    rc, out, err = _cli(npu_copy, capsys)
    assert rc == 0, err
    for rel in npu_files:  # every length holds some sample (max_length 32), each against its own reference
        assert re.search(rf"npu:{re.escape(rel)}: {re.escape(rel)}: [1-8]/8 samples fit its length, max \|logit - "
                         r"reference\| \d\.\d{3}e[-+]\d\d", out), out


def test_npu_files_outside_the_hashes_are_refused(npu_copy, capsys):
    """An NPU file that metadata.json names but does not list (so no sha256 covers it), changed: refused, not
    a "files not in metadata.json (not checked)" note and "bundle OK"."""
    meta = json.loads((npu_copy / "metadata.json").read_text())
    rel = meta["npu"]["nnapi-int8"]["files"]["16"]["file"]
    data = bytearray((npu_copy / rel).read_bytes())
    data[-1] ^= 1
    (npu_copy / rel).write_bytes(bytes(data))
    rc, _, err = _cli(npu_copy, capsys)
    assert rc == 2 and re.search(rf"{re.escape(rel)} was changed: it is not the file this bundle \(run 'tiny'\)", err)
    meta["files"].pop(rel)
    (npu_copy / "metadata.json").write_text(json.dumps(meta))
    rc, out, err = _cli(npu_copy, capsys)
    # the file is there but unlisted: refused as a file the build did not write; gone as well: the entry is named
    assert rc == 2 and f"1 file that metadata.json does not list ({rel}): not part of the build" in err
    assert "bundle OK" not in out
    (npu_copy / rel).unlink()
    rc, out, err = _cli(npu_copy, capsys)
    assert rc == 2 and f"npu.nnapi-int8.files.16.file = {rel!r} is not in 'files', so its sha256 is unchecked" in err
    assert "bundle OK" not in out


def test_npu_reference_edits_and_swapped_files_are_named(npu_copy):
    """An NPU file's reference logits edited (hashes rewritten): its other length reproduces the same
    sample, so samples.json is blamed; the NNAPI 32-token file swapped for the Core ML one of that length
    (another model, other inputs): its replay cannot even feed it."""
    from pipeline.errors import PipelineError
    from pipeline.verify import verify_bundle

    meta = json.loads((npu_copy / "metadata.json").read_text())
    samples = json.loads((npu_copy / "samples.json").read_text())
    rel = meta["npu"]["coreml-int8w"]["files"]["32"]["file"]
    k = next(i for i, s in enumerate(samples) if rel in s["reference_logits"])
    samples[k]["reference_logits"][rel][0] += 0.5
    (npu_copy / "samples.json").write_text(json.dumps(samples))
    _rehash(npu_copy, meta)
    with pytest.raises(PipelineError, match=rf"{re.escape(rel)} logit \w+ of sample {k + 1} .*the reference logits "
                                            rf"of sample {k + 1} in samples\.json were edited \(another file's "
                                            r"reference of that sample agrees with the file\): samples\.json edited"):
        verify_bundle(npu_copy)
    (npu_copy / "samples.json").write_text(json.dumps(_restore(samples, k, rel)))
    nnapi = meta["npu"]["nnapi-int8"]["files"]["32"]["file"]
    shutil.copy2(npu_copy / rel, npu_copy / nnapi)
    _rehash(npu_copy, meta)
    with pytest.raises(PipelineError, match=rf"{re.escape(nnapi)}: onnxruntime cannot run it with the inputs "
                                            r"metadata\.json lists .*a file from another variant or run"):
        verify_bundle(npu_copy)


def _restore(samples: list[dict], k: int, rel: str) -> list[dict]:
    samples[k]["reference_logits"][rel][0] -= 0.5
    return samples


def test_a_failed_replay_process_gets_the_fix_for_its_failure(tmp_path):
    """A missing package is fixed by installing it; any other failure of the replay process is a runtime refusing
    a file, which no install fixes."""
    from pipeline.errors import PipelineError
    from pipeline.verify_bundle_meta import fresh_process

    with pytest.raises(PipelineError, match=r"No module named .*; install onnxruntime$"):
        fresh_process(tmp_path, "no_such_module_pocketformer", [], None, "models", "install onnxruntime")
    with pytest.raises(PipelineError, match=r"failed \(FileNotFoundError: .*metadata\.json'\); a runtime refused a "
                                            r"bundle file: restore the bundle"):
        fresh_process(tmp_path, "pipeline.tasks.generation.replay", ["--child", str(tmp_path)], None, "decoder",
                      "install onnxruntime")
