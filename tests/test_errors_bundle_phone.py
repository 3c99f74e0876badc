"""User-facing error paths of the bundle checks, phone-bench, the NPU device profiles and the student search that
no other test reached (found by a coverage run): each bad input is driven at the highest cheap level (the CLI,
verify_bundle, phone_bench, load_config, the search command) and must give one PipelineError that names the
file or setting at fault and a fix that works, never a traceback.

Covered: bench.devices_file missing / not TOML / a device that is not a table, lacks keys or has a non-numeric
peak (config load); phone-bench with no bundle, on a generation run, with several adb devices and no serial,
with a phone that stops answering or is gone after `adb devices`, and with `adb devices` hanging; verify-bundle on
a folder that is not a bundle (and on the folder above one), on a metadata.json / samples.json that is not JSON
or cannot be read, with an unknown task, a tokenizer.json the tokenizers library cannot parse, a tokenizer
model_max_length below max_length, a model input the replay cannot feed, a model file of another label count, NPU
references that disagree with the samples that fit, an NPU entry without its lookup file, a damaged HTP context
binary, a replay process without onnxruntime, a web bundle's page tokenizer disagreeing with the stored ids; a
generation bundle's unreadable genai_config.json and a sample without its prompt fields; the search's empty or
too short validation split (classification and generation).

Bundles come from the shared tiny runs (tests/test_bundle_stage.py, tests/lm_bundle_fixtures.py), built once."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import tiny_run_config
from lm_bundle_fixtures import bundle_cfg, tiny_inputs
from pipeline.errors import PipelineError
from test_phone_android import SERIAL, _perf_binary, fake_adb, run_copy  # noqa: F401  (fixtures)
from test_verify_bundle import _cli, _rehash, built, copy, npu_copy  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[1]


def _meta(bundle: Path) -> dict:
    return json.loads((bundle / "metadata.json").read_text())


def _samples(bundle: Path) -> list[dict]:
    return json.loads((bundle / "samples.json").read_text())


def _refusal(bundle: Path) -> str:
    """verify_bundle's one error on an edited bundle, as text."""
    from pipeline.verify import verify_bundle

    with pytest.raises(PipelineError) as e:
        verify_bundle(bundle)
    return str(e.value)


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# --- bench.devices_file (the NPU roofline's device profiles), refused when the config loads ------------------

GOOD_DEVICE = ('[x]\nname = "X NPU"\npeak_int8_tops = 10.0\npeak_fp16_tops = 5.0\nmemory_gb_s = 50.0\n'
               'source = "made up"\n')


@pytest.mark.parametrize("text, message", [
    (None, r"NPU device profiles file {p} does not exist; set bench\.devices_file to a TOML file like "
           r"configs/devices\.toml"),
    ('[x]\nname = "X NPU"\npeak_int8_tops = \n',
     r"NPU device profiles file {p} \(bench\.devices_file\) is not valid TOML \(Invalid value \(at line 3, column "
     r"18\)\); fix it: each device a \[table\] like those of configs/devices\.toml"),
    (b'[x]\nname = "caf\xe9"\n', r"{p} \(bench\.devices_file\) is not valid TOML \('utf-8' codec can't decode"),
    ('peak_int8_tops = 10.0\n' + GOOD_DEVICE, r"{p}: 'peak_int8_tops' is not a device \[table\] but 10\.0; each "
                                              r"device a \[table\] like those of configs/devices\.toml"),
    ('[x]\nname = "X NPU"\npeak_int8_tops = 10.0\n', r"{p}: device \[x\] lacks memory_gb_s, peak_fp16_tops, source; "
                                                     r"add them \(each device a \[table\] like those of "
                                                     r"configs/devices\.toml\)"),
    (GOOD_DEVICE.replace("memory_gb_s = 50.0", 'memory_gb_s = "fast"'),
     r"{p}: device \[x\] memory_gb_s = 'fast': give a positive number \(e\.g\. memory_gb_s = 35\.0\)"),
], ids=["missing", "not-toml", "not-utf8", "not-a-table", "lacks-keys", "not-a-number"])
def test_a_bad_devices_file_is_refused_when_the_config_loads(tmp_path, text, message):
    """bench.devices_file is read by the classification config checks: a file that is not TOML (or a device that
    is not a table) was a tomllib / AttributeError traceback from `show-config` on, and a string peak passed the
    checks to fail in the bench's roofline division after training."""
    from pipeline.config import load_config

    p = tmp_path / "my devices.toml"
    if text is not None:
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(PipelineError, match=message.format(p=re.escape(str(p)))):
        load_config(None, [f'bench.devices_file="{p}"', 'bench.npu_device="x"'])
    # the fix: a file like configs/devices.toml (the repo's own loads)
    p.write_text(GOOD_DEVICE)
    assert load_config(None, [f'bench.devices_file="{p}"', 'bench.npu_device="x"']).bench.npu_device == "x"


def test_a_devices_file_that_is_not_toml_is_one_cli_line(tmp_path, capsys):
    from pipeline.cli import main

    p = tmp_path / "devices.toml"
    p.write_text("[x\n")
    assert main(["show-config", "--set", f'bench.devices_file="{p}"']) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{p} (bench.devices_file) is not valid TOML" in line


# --- phone-bench -----------------------------------------------------------------------------------------------

def test_phone_bench_before_the_bundle_names_the_command_that_builds_it(built, tmp_path, capsys):
    from pipeline.cli import main
    from pipeline.search_report import dumps_toml

    d = json.loads(json.dumps(built[0]))
    d["run"]["runs_dir"] = str(tmp_path / "runs")  # a run nothing has been built in
    cfg = tmp_path / "my run.toml"
    cfg.write_text(dumps_toml(d))
    assert main(["phone-bench", "--config", str(cfg)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (f"error: phone-bench times the bundled model, but {tmp_path / 'runs' / 'tiny' / 'bundle'} has "
                    f"none; run `make bundle` (python -m pipeline bundle --config {cfg}) first")


def test_phone_bench_with_several_devices_asks_for_a_serial_and_the_serial_works(fake_adb, run_copy, tmp_path,
                                                                                monkeypatch):
    from pipeline.phone import phone_bench

    monkeypatch.setenv("FAKE_ADB_SERIALS", f"emulator-5554,{SERIAL}")
    binary = str(_perf_binary(tmp_path))
    with pytest.raises(PipelineError) as e:
        phone_bench(run_copy, "android", perf_test=binary)
    assert str(e.value) == (f"several Android devices are attached (emulator-5554, {SERIAL}); pass --serial or set "
                            f"phone.serial")
    assert [json.loads(line) for line in fake_adb.read_text().splitlines()] == [["devices"]]  # nothing pushed
    cpu_only = replace(run_copy, phone=replace(run_copy.phone, providers=["cpu"]))
    out = phone_bench(cpu_only, "android", perf_test=binary, serial=SERIAL)  # the fix the message gives
    assert out["device"]["serial"] == SERIAL and out["runs"][0]["entry"]["p50_ms"] > 0


GONE_ADB = """#!{python}
import sys
if sys.argv[1:] == ["devices"]:
    print("List of devices attached\\nR5CT30\\tdevice"); sys.exit(0)
print("adb: device 'R5CT30' not found", file=sys.stderr); sys.exit(1)
"""


def test_a_phone_gone_after_adb_devices_is_one_error_naming_the_call(run_copy, tmp_path):
    """Unplugged (or the USB-debugging prompt revoked) between `adb devices` and the first call to it."""
    from pipeline.phone import phone_bench

    adb = tmp_path / "adb"
    adb.write_text(GONE_ADB.replace("{python}", sys.executable))
    adb.chmod(adb.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(PipelineError) as e:
        phone_bench(run_copy, "android", adb=str(adb), perf_test=str(_perf_binary(tmp_path)))
    assert str(e.value) == ("adb shell getprop failed on R5CT30: adb: device 'R5CT30' not found; check the phone "
                            "is unlocked and USB debugging is allowed")


def test_a_phone_that_stops_answering_is_one_error_naming_the_call(tmp_path):
    """The timeout of every adb call (600 s in phone-bench: a 50-run perf_test on a slow phone takes minutes)."""
    from eval.phone_android import Adb

    adb = tmp_path / "adb"
    adb.write_text("#!/bin/sh\nexec sleep 30\n")
    adb.chmod(adb.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(PipelineError) as e:
        Adb(str(adb), "R5CT30", timeout_s=1).shell("getprop", "ro.product.model")
    assert str(e.value) == ("adb shell getprop on R5CT30 gave no answer in 1 s; check the phone is connected and "
                            "unlocked (`adb devices`)")


def test_adb_devices_that_hangs_is_one_error(run_copy, tmp_path, monkeypatch):
    """A wedged adb server: `adb devices` never answers (stood in for by its 60 s limit running out)."""
    import eval.phone_android
    from pipeline.phone import phone_bench

    adb = tmp_path / "adb"
    adb.write_text("#!/bin/sh\nexit 0\n")
    adb.chmod(adb.stat().st_mode | stat.S_IEXEC)
    real = subprocess.run

    def hung(cmd, *args, **kwargs):
        if list(cmd[1:]) == ["devices"]:
            raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout"))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(eval.phone_android.subprocess, "run", hung)
    with pytest.raises(PipelineError) as e:
        phone_bench(run_copy, "android", adb=str(adb), perf_test=str(_perf_binary(tmp_path)))
    assert str(e.value) == (f"`{adb} devices` gave no answer in 60 s: restart the adb server (`adb kill-server`) or "
                            f"pass the right adb with --adb PATH")


# --- verify-bundle: the folder, metadata.json and samples.json as files -----------------------------------------

def test_a_folder_that_is_not_a_bundle(built, tmp_path, capsys):
    """An empty folder is told how to build a bundle; the folder above one (dist/, a run folder), a common slip,
    is told which bundle it holds (it was told to build one)."""
    empty = tmp_path / "nothing here"
    empty.mkdir()
    rc, _, err = _cli(empty, capsys)
    assert rc == 2 and _one_error_line(err) == (f"error: {empty} is not a bundle (no metadata.json); build one with "
                                                f"`make bundle` (python -m pipeline bundle --config ...)")
    _, cfg = built
    dist = Path(cfg.bundle.dist_dir)
    rc, _, err = _cli(dist, capsys)
    assert rc == 2 and _one_error_line(err) == (f"error: {dist} is not a bundle (no metadata.json), it holds one: "
                                                f"pass the bundle folder itself ({dist / 'tiny'})")
    rc, out, _ = _cli(dist / "tiny", capsys)  # the folder it names verifies
    assert rc == 0 and "bundle OK" in out


@pytest.mark.parametrize("name", ["metadata.json", "samples.json"])
def test_json_that_is_cut_short_is_named(copy, capsys, name):  # noqa: F811
    """A truncated copy (an interrupted download or sync): samples.json with its hashes rewritten."""
    meta = _meta(copy)
    path = copy / name
    path.write_text(path.read_text()[:200])
    if name == "samples.json":
        _rehash(copy, meta)
    rc, out, err = _cli(copy, capsys)
    line = _one_error_line(err)
    assert rc == 2 and "bundle OK" not in out
    assert line.startswith(f"error: {path} is not valid JSON (") and line.endswith(
        "); rebuild the bundle with `make bundle` (a web bundle: `make web-bundle`)"), line


def test_an_unreadable_metadata_json_is_named(copy, capsys, monkeypatch):  # noqa: F811
    """A bundle copied from another user with mode 600: metadata.json this user may not read."""
    path = copy / "metadata.json"
    path.chmod(0)
    if os.geteuid() == 0:  # root reads it anyway: the read fails as it would for anyone else
        real = Path.read_text

        def denied(self, *args, **kwargs):
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", denied)
    try:
        rc, _, err = _cli(copy, capsys)
    finally:
        path.chmod(0o644)
    assert rc == 2 and _one_error_line(err) == (
        f"error: {path} cannot be read (Permission denied); check its permissions, or rebuild the bundle with "
        f"`make bundle` (a web bundle: `make web-bundle`)")


def test_an_unknown_task_is_named(copy, capsys):  # noqa: F811
    """A bundle of a task this verify-bundle does not know (a newer pocketformer's, or an edited one)."""
    meta = _meta(copy)
    meta["task"] = "summarization"
    _rehash(copy, meta)
    rc, _, err = _cli(copy, capsys)
    assert rc == 2 and _one_error_line(err) == (
        f"error: {copy}/metadata.json: 'task' is 'summarization', which verify-bundle cannot replay (known: "
        f"classification, generation); rebuild the bundle with `make bundle`")


# --- verify-bundle: a classification bundle's own files, hashes rewritten so only these checks can tell ----------

def test_a_tokenizer_json_the_tokenizers_library_cannot_parse(copy):  # noqa: F811
    from pipeline.verify import verify_bundle

    meta = _meta(copy)
    cut = {"direction": "Right", "max_length": meta["max_length"], "strategy": "LongestFirst", "stride": 0}
    (copy / "tokenizer" / "tokenizer.json").write_text(json.dumps({"version": "1.0", "truncation": cut,
                                                                    "model": {"type": "Nonsense"}}))
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(copy))}: tokenizer/tokenizer\.json cannot be read by "
                                            r"the tokenizers library \(.+\); restore it from the build's "
                                            r"runs/<run>/bundle/ or rebuild the bundle with `make bundle`$"):
        verify_bundle(copy)


def test_a_tokenizer_model_max_length_below_max_length_blames_both_files(copy):  # noqa: F811
    """tokenizer_config.json's model_max_length lowered (an app would truncate there): the message said
    "metadata.json was edited; restore it", which was the file that had not changed."""
    meta = _meta(copy)
    conf = copy / "tokenizer" / "tokenizer_config.json"
    tc = json.loads(conf.read_text())
    tc["model_max_length"] = 16
    conf.write_text(json.dumps(tc))
    _rehash(copy, meta)
    assert _refusal(copy) == (f"{copy}/metadata.json: max_length is 32, beyond the tokenizer's model_max_length 16 "
                              f"(tokenizer/tokenizer_config.json): one of the two was edited; restore them from the "
                              f"build's runs/<run>/ folder or rebuild the bundle with `make bundle` (a web bundle: "
                              f"`make web-bundle`)")


def test_a_model_input_the_replay_cannot_feed_points_at_the_metadata(copy):  # noqa: F811
    """The message said "list the model's inputs in metadata.json": an edit there fails its digest, and a bundle
    stage never writes an input its own replay cannot feed, so the entry was rewritten."""
    meta = _meta(copy)
    meta["models"]["onnx"]["inputs"][1]["name"] = "mask"
    _rehash(copy, meta)
    rel = meta["models"]["onnx"]["file"]
    assert _refusal(copy) == (f"{copy}: {rel}: input 'mask' is not one of input_ids, attention_mask, token_type_ids, "
                              f"so verify-bundle cannot feed it: metadata.json's entry for this file does not match "
                              f"the build's; restore metadata.json from the build's runs/<run>/ folder or rebuild the "
                              f"bundle with `make bundle`")


def _two_class_model(path: Path) -> None:
    """An ONNX classifier over input_ids / attention_mask with 2 logits (the tiny run's models have 3)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Cast", ["input_ids"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceMean", ["xf"], ["m"], keepdims=1),
             helper.make_node("Mul", ["m", "W"], ["logits"])]
    ins = [helper.make_tensor_value_info(k, TensorProto.INT64, [1, "T"]) for k in ("input_ids", "attention_mask")]
    graph = helper.make_graph(nodes, "two", ins, [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2])],
                              [numpy_helper.from_array(np.array([[0.01, -0.01]], dtype=np.float32), "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_model_file_of_another_label_count_is_named_as_such(copy):  # noqa: F811
    """Another run's 2-class model under the shipped name (hashes rewritten): the message said only "rebuild the
    bundle with `make bundle`", also for a web bundle, which `make web-bundle` rebuilds."""
    from pipeline.tasks.classification.logits_check import compare

    meta = _meta(copy)
    rel = meta["models"]["onnx"]["file"]
    _two_class_model(copy / rel)
    _rehash(copy, meta)
    labels = meta["labels"]
    assert _refusal(copy) == (f"{copy}: {rel} gives logits of shape (2,), its reference in samples.json has (3,) (one "
                              f"per label of {labels}): it is not the model this bundle was built with (a file from "
                              f"another run, with metadata.json's hashes rewritten?); restore it from the build's "
                              f"runs/<run>/ folder or rebuild the bundle with `make bundle`")
    # the web bundle's verify compares through the same function: its fix is its own make target
    samples = _samples(copy)
    with pytest.raises(PipelineError, match=r"restore it from the build's runs/<run>/ folder or rebuild the web "
                                            r"bundle with `make web-bundle`$"):
        compare(copy, {**meta, "kind": "web"}, samples, rel, [[0.0, 0.0]] * len(samples))


def test_a_replay_process_without_onnxruntime_says_what_to_install(copy, tmp_path):  # noqa: F811
    """verify-bundle on a machine where onnxruntime is missing: the parent needs none, the replay process fails on
    its import, and the user gets that line and the install command (run as `python -m pipeline verify-bundle`)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import importlib.abc, sys

        class _NoOnnxRuntime(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("onnxruntime", "onnxruntime_extensions"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, _NoOnnxRuntime())
        """))
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}"}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "verify-bundle", str(copy)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert _one_error_line(proc.stderr) == (
        f"error: {copy}: running the models in a fresh process failed (ModuleNotFoundError: No module named "
        f"'onnxruntime'); install onnxruntime and onnxruntime-extensions (pip install onnxruntime "
        f"onnxruntime-extensions)")


def test_npu_references_and_entries_that_disagree_with_the_files(npu_copy):  # noqa: F811
    """An npu student's static files (tests/test_verify_bundle.py npu_copy), hashes rewritten after each edit:
    a reference removed from a sample that fits the file's length, then an entry whose lookup file is gone."""
    from pipeline.verify import verify_bundle

    meta, samples = _meta(npu_copy), _samples(npu_copy)
    rel = meta["npu"]["nnapi-int8"]["files"]["32"]["file"]
    k = next(i for i, s in enumerate(samples) if rel in s["reference_logits"])
    kept = samples[k]["reference_logits"].pop(rel)
    (npu_copy / "samples.json").write_text(json.dumps(samples))
    _rehash(npu_copy, meta)
    with pytest.raises(PipelineError) as e:
        verify_bundle(npu_copy)
    assert str(e.value) == (f"{npu_copy}: samples.json lacks reference logits for {rel} on sample {k + 1}, which fits "
                            f"its length: samples.json was edited; restore it or rebuild the bundle with `make bundle`")

    samples[k]["reference_logits"][rel] = kept
    (npu_copy / "samples.json").write_text(json.dumps(samples))
    name = next(n for n, entry in meta["npu"].items() if entry.get("lookup"))
    meta["npu"][name]["lookup"] = None
    _rehash(npu_copy, meta)
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(npu_copy))}: \S+: input '\w+' needs the variant's "
                                            rf"lookup file, which npu\.{name} in metadata\.json does not name: that "
                                            r"entry does not match the build's; restore metadata\.json from the "
                                            r"build's runs/<run>/ folder or rebuild the bundle with `make bundle`$"):
        verify_bundle(npu_copy)


def test_a_damaged_htp_context_binary_is_named(copy, tmp_path):  # noqa: F811
    """A shipped HTP context binary (metadata "qnn") damaged with its hashes rewritten: the emulator refuses it."""
    from eval import qnn

    if why := qnn.unavailable_reason():
        pytest.skip(f"HTP compiler unavailable: {why}")
    from export.app_samples import write_classification_samples
    from export.qnn_bundle import add_qnn_files
    from pipeline.tasks.classification.replay import qnn_logits
    from pipeline.verify import verify_bundle
    from test_qnn_bundle import fake_run, token_classifier

    meta, samples = _meta(copy), _samples(copy)
    run = tmp_path / "run"
    src = token_classifier(run / "quantize" / "tok-32.onnx", 32, classes=len(meta["labels"]))
    rec = qnn.compile_htp(src, "8gen3", run / "compile" / "qnn" / "student" / "8gen3", "npu-tok-32")
    assert rec["compiled"], rec["message"]
    fake_run(run, [{"model": "student", "variant": "npu-tok", "length": 32, "file": "quantize/tok-32.onnx", **rec,
                    "context": Path(rec["context"]).relative_to(run).as_posix(), "status": "passed",
                    "emulator": {"samples": 4, "argmax_agreement": 1.0, "max_abs_diff": 0.01}}])
    meta["qnn"] = add_qnn_files(run, run / "compile", "student", copy, fallback=meta["models"]["ort"]["file"], pad_id=0)
    write_classification_samples(copy, meta)  # as the build does: the NPU sample names the shipped chips
    spec = meta["qnn"]["chips"]["8gen3"]["files"]["32"]
    for s, row in zip(samples, qnn_logits(copy, meta["qnn"], samples)[spec["file"]]):
        if row is not None:
            s["reference_logits"][spec["file"]] = row
    (copy / "samples.json").write_text(json.dumps(samples))
    binary = copy / spec["binary"]
    data = bytearray(binary.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = bytes(64)
    binary.write_bytes(bytes(data))
    _rehash(copy, meta)
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(copy))}: {re.escape(spec['file'])} did not run on the "
                                            r"HTP emulator for 8gen3 \(.+\); the file is intact \(sha256 matches\): "
                                            r"check that onnxruntime-qnn matches metadata\.json's qnn\.compiler, or "
                                            r"rebuild the bundle with `make bundle`$"):
        verify_bundle(copy)


def test_a_web_page_tokenizer_that_disagrees_with_the_stored_ids(copy):  # noqa: F811
    """The web bundle's check of its own wordpiece.mjs (with metadata's text_normalisation) against samples.json's
    input_ids, on the tiny run's vocabulary and texts: one stored id edited (hashes rewritten) is named."""
    from eval.browser import node_path
    from pipeline.tasks.classification.verify_web import check_token_ids

    if node_path() is None:
        pytest.skip("node is not installed")
    shutil.copy2(REPO / "web" / "demo" / "wordpiece.mjs", copy / "wordpiece.mjs")
    meta = _meta(copy)
    samples = [{**s, "input_ids": s["token_ids"]} for s in _samples(copy)][:3]
    assert check_token_ids(copy, meta, samples) == {"texts": 3, "ids_match": 3}  # the page's ids are the stored ones
    samples[1]["input_ids"][2] += 1  # another word piece at token 3
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(copy))}: the page's tokenizer \(wordpiece\.mjs with "
                                            r"metadata\.json's text_normalisation, lowercase = True, max_length = 32\) "
                                            r"encodes sample 2 \(.+\) as \[.+\], not the stored \[.+\]; metadata\.json "
                                            r"or samples\.json was edited: restore them or rebuild the web bundle "
                                            r"with `make web-bundle`$"):
        check_token_ids(copy, meta, samples)


# --- a generation run: its bundle, phone-bench and the search -------------------------------------------------------

@pytest.fixture(scope="module")
def gen_run(tmp_path_factory):
    """(config dict, the published bundle, corpus, teacher) of the tiny generation run (lm_bundle_fixtures)."""
    from pipeline.config import config_from_dict
    from pipeline.stage import run

    root = tmp_path_factory.mktemp("gen_errors")
    corpus, teacher = tiny_inputs(root)
    d = bundle_cfg(root, corpus, teacher)
    assert run(config_from_dict(d, "tiny-gen-errors"), ["bundle"])[-1] == "bundle"
    return d, Path(d["bundle"]["dist_dir"]) / d["run"]["name"], corpus, teacher


@pytest.mark.parametrize("text, said", [
    ('{"model": {"decoder": ', r"is not valid JSON \(Expecting value: line 1 column 23 \(char 22\)\)"),
    ('{"search": {"max_length": 64}}', r"has no model\.decoder section, which onnxruntime-genai and the replay read"),
    ('[1, 2]', r"is not a JSON object"),
], ids=["not-json", "no-model", "a-list"])
def test_an_unreadable_genai_config_is_named(gen_run, tmp_path, text, said):
    from pipeline.verify import verify_bundle

    _, dist, _, _ = gen_run
    copy = shutil.copytree(dist, tmp_path / "copy")
    (copy / "genai_config.json").write_text(text)
    _rehash(copy, _meta(copy))
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(copy))}/genai_config\.json {said}; "
                                            r"rebuild the bundle with `make bundle`$"):
        verify_bundle(copy)


@pytest.mark.parametrize("edit", [lambda s: s.pop("prompt"), lambda s: s.update(prompt_ids=[]),
                                  lambda s: s.update(continuation_ids="12 7")], ids=["no-prompt", "no-ids", "a-string"])
def test_a_generation_sample_without_its_prompt_fields_is_named(gen_run, tmp_path, edit):
    from pipeline.verify import verify_bundle

    _, dist, _, _ = gen_run
    copy = shutil.copytree(dist, tmp_path / "copy")
    samples = _samples(copy)
    edit(samples[1])
    (copy / "samples.json").write_text(json.dumps(samples))
    _rehash(copy, _meta(copy))
    with pytest.raises(PipelineError) as e:
        verify_bundle(copy)
    assert str(e.value) == (f"{copy}/samples.json: sample 2 needs 'prompt', 'prompt_ids' (integers), 'max_new_tokens', "
                            f"'continuation_ids' (integers) and 'continuation' (its text); rebuild the bundle with "
                            f"`make bundle`")


def test_phone_bench_on_a_generation_run_says_it_times_classification_bundles(gen_run, tmp_path, capsys):
    """It read the generation bundle as a classifier's: a Hugging Face 'Repo id must be in the form' traceback
    (bundle/tokenizer does not exist there)."""
    from pipeline.cli import main
    from pipeline.search_report import dumps_toml

    d, _, _, _ = gen_run
    cfg = tmp_path / "gen.toml"
    cfg.write_text(dumps_toml(d))
    assert main(["phone-bench", "--config", str(cfg)]) == 2
    assert _one_error_line(capsys.readouterr().err) == (
        f"error: phone-bench times a text-classification bundle (its .ort on Android, its Core ML package on a Mac); "
        f"run.task = 'generation' ({cfg}) makes a bundle it does not time: that model's latency is in the bench "
        f"stage's rows (`make bench`). Give phone-bench a classification run's config, e.g. --config configs/demo.toml")


def test_generation_search_on_a_short_validation_file_names_that_file(gen_run, tmp_path, capsys):
    """A validation file is the split as given: the message said "raise data.validation_fraction", which then
    holds nothing out."""
    from pipeline.cli import main
    from pipeline.search_report import dumps_toml

    _, _, corpus, teacher = gen_run
    d = bundle_cfg(tmp_path, corpus, teacher)
    val = tmp_path / "validation.txt"
    val.write_text("KING : the crown .\n")
    d["data"]["validation_path"] = str(val)
    cfg = tmp_path / "gen.toml"
    cfg.write_text(dumps_toml(d))
    rc = main(["search", "--config", str(cfg), "--target", "host-cpu", "--budget-ms", "1000", "--trials", "1",
               "--space", "tiny"])
    assert rc == 2
    assert re.fullmatch(rf"error: the search scores candidates on the validation split, which holds \d+ tokens, fewer "
                        rf"than one window of lm\.context_length \+ 1 = 17: give data\.validation_path "
                        rf"\({re.escape(str(val))}\) more text or lower lm\.context_length",
                        capsys.readouterr().err.strip().splitlines()[-1])


def test_classification_search_on_an_empty_validation_split(tiny_bert_dir, tiny_csv, tmp_path, capsys):
    """data.validation_fraction > 0 that rounds to no example: the search stops after the logits stage, saying
    which setting gives it texts to score on."""
    from pipeline.cli import main
    from pipeline.search_report import dumps_toml

    d = tiny_run_config(tiny_bert_dir, tiny_csv, tmp_path / "runs")
    d["data"]["validation_fraction"] = 0.0005  # of 600 texts: 0.3 of one
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(dumps_toml(d))
    rc = main(["search", "--config", str(cfg), "--target", "host-cpu", "--budget-ms", "1000", "--trials", "1",
               "--space", "tiny"])
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: the search scores candidates on the validation split, which is empty: raise "
        "data.validation_fraction (e.g. 0.1)")
