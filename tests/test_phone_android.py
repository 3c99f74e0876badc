"""The Android phone harness driven by a fake `adb` (a Python script first on PATH) that records its
arguments and answers with stored onnxruntime_perf_test output (tests/fixtures/phone/). NPU providers (QNN,
then NNAPI) must get the fixed-shape int8-static file with CPU fallback disabled, and a refusal must become a
failed row, never a CPU timing under the NPU's name."""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from test_bundle_stage import bundled_run

FIXTURES = Path(__file__).parent / "fixtures" / "phone"
SERIAL = "R5CT30 ;x"  # a space and a semicolon: only an argument list keeps it whole
PROPS = {"ro.product.model": "Pixel 7", "ro.product.manufacturer": "Google", "ro.soc.model": "GS201",
         "ro.soc.manufacturer": "Google", "ro.board.platform": "gs201", "ro.hardware": "panther",
         "ro.build.version.release": "14", "ro.product.cpu.abi": "arm64-v8a"}

FAKE_ADB = r'''#!{python}
"""Fake adb: logs argv as one JSON line, answers like adb + a phone with the perf_test fixtures."""
import json, os, shlex, sys
args = sys.argv[1:]
with open(os.environ["FAKE_ADB_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
fixtures = os.environ["FAKE_ADB_FIXTURES"]
serials = [s for s in os.environ.get("FAKE_ADB_SERIALS", "").split(",") if s]
if args == ["devices"]:
    print("List of devices attached")
    for s in serials:
        print(s + "\tdevice")
    sys.exit(0)
if len(args) < 3 or args[0] != "-s" or args[1] not in serials:
    print("error: device not found", file=sys.stderr); sys.exit(1)
cmd = args[2:]
if cmd[0] == "push":
    if os.path.isfile(cmd[1]) and os.environ.get("FAKE_ADB_STORE"):  # keep what reached the "phone"
        import shutil
        shutil.copy(cmd[1], os.path.join(os.environ["FAKE_ADB_STORE"], os.path.basename(cmd[2])))
    sys.exit(0 if os.path.isfile(cmd[1]) else 1)
if cmd[0] == "shell":
    remote = shlex.split(" ".join(cmd[1:]))  # what the phone's sh would see
    if remote[0] == "getprop":
        print(json.loads(os.environ["FAKE_ADB_PROPS"]).get(remote[1], "")); sys.exit(0)
    if len(remote) > 1 and remote[1].endswith("/onnxruntime_perf_test"):
        ep, threads = remote[remote.index("-e") + 1], remote[remote.index("-x") + 1]
        out = os.path.join(fixtures, f"perf_test_{ep}_{threads}t.txt")
        if ep in ("qnn", "nnapi"):  # an NPU row must run the fixed-shape QDQ file with CPU fallback disabled
            if remote[-1].rsplit("/", 1)[-1] != "model_npu.onnx" or "session.disable_cpu_ep_fallback|1" not in remote:
                print("Run failed: fake adb: NPU run without model_npu.onnx or with CPU fallback allowed"); sys.exit(3)
        if ep == "qnn":  # this phone's QNN cannot take every node: ONNX Runtime refuses the session
            sys.stderr.write("[ONNXRuntimeError] : 1 : FAIL : This session contains graph nodes that are assigned to "
                             "the default CPU EP, but fallback to CPU EP has been explicitly disabled by the user.\n")
            sys.exit(255)
        if ep == "xnnpack":
            sys.stderr.write(open(os.path.join(fixtures, "perf_test_xnnpack_stderr.txt")).read()); sys.exit(255)
        if os.path.isfile(out):
            print(open(out).read()); sys.exit(0)
        print("Run failed: no fixture for " + ep); sys.exit(255)
    sys.exit(0)
sys.exit(0)
'''


@pytest.fixture
def fake_adb(tmp_path, monkeypatch):
    bindir = tmp_path / "fake bin"
    bindir.mkdir()
    exe = bindir / "adb"
    exe.write_text(FAKE_ADB.replace("{python}", sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "adb.log"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ADB_LOG", str(log))
    monkeypatch.setenv("FAKE_ADB_FIXTURES", str(FIXTURES))
    monkeypatch.setenv("FAKE_ADB_SERIALS", SERIAL)
    monkeypatch.setenv("FAKE_ADB_PROPS", json.dumps(PROPS))
    store = tmp_path / "on the phone"
    store.mkdir()
    monkeypatch.setenv("FAKE_ADB_STORE", str(store))
    return log


@pytest.fixture
def run_copy(tmp_path_factory, tmp_path):
    """A private copy of the tiny bundled run (phone-bench rewrites its report)."""
    from dataclasses import replace

    _, cfg = bundled_run(tmp_path_factory)
    runs = tmp_path / "runs"
    shutil.copytree(cfg.run_dir, runs / cfg.run.name)
    return replace(cfg, run=replace(cfg.run, runs_dir=str(runs)),
                   phone=replace(cfg.phone, providers=["cpu", "xnnpack", "qnn", "nnapi"], threads=[1], repeats=50))


def _perf_binary(tmp_path: Path) -> Path:
    p = tmp_path / "my tools" / "onnxruntime_perf_test"
    p.parent.mkdir()
    p.write_bytes(b"\x7fELF fake arm64 binary")
    return p


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_parse_perf_test_fixture():
    from eval.phone_android import parse_perf_test

    e = parse_perf_test((FIXTURES / "perf_test_cpu_1t.txt").read_text())
    assert e["p50_ms"] == pytest.approx(10.2911) and e["p90_ms"] == pytest.approx(11.3526)
    assert e["p99_ms"] == pytest.approx(13.2177) and e["mean_ms"] == pytest.approx(10.4375)
    assert e["iterations"] == 50 and e["peak_rss_mb"] == pytest.approx(41213952 / 2**20)
    assert parse_perf_test("Run failed:something") == {}


def test_android_bench_merges_rows_and_passes_arguments_separately(fake_adb, run_copy, tmp_path):
    from pipeline.phone import phone_bench
    from eval.results import validate_results
    from pipeline.stage import status

    binary = _perf_binary(tmp_path)
    out = phone_bench(run_copy, "android", perf_test=str(binary))
    calls = _calls(fake_adb)
    # every device call names the serial as its own argument, right after -s
    assert calls[0] == ["devices"]
    assert all(c[:2] == ["-s", SERIAL] for c in calls[1:])
    pushes = [c[3:] for c in calls[1:] if c[2] == "push"]
    assert [str(binary), "/data/local/tmp/pocketformer/onnxruntime_perf_test"] in pushes  # path with a space, whole
    assert ["/data/local/tmp/pocketformer/model/model.ort"] == [p[1] for p in pushes if p[1].endswith(".ort")]
    assert any(p[1].endswith("test_data_set_0/input_0.pb") for p in pushes)
    qnn = next(c for c in calls[1:] if c[2] == "shell" and "qnn" in c)
    assert "'backend_path|libQnnHtp.so'" in qnn  # quoted for the phone's shell: not a pipe there
    runs = [c for c in calls[1:] if c[2] == "shell" and "-e" in c]
    assert [c[c.index("-e") + 1] for c in runs] == ["cpu", "xnnpack", "qnn", "nnapi"]  # QNN before NNAPI
    for c in runs:  # CPU providers on the bundled .ort; NPU providers on the QDQ file, CPU fallback disabled
        npu = c[c.index("-e") + 1] in ("qnn", "nnapi")
        assert c[-1].endswith("/model/model_npu.onnx" if npu else "/model/model.ort")
        assert ("-C" in c) == npu and (not npu or c[c.index("-C") + 1] == "'session.disable_cpu_ep_fallback|1'")
    # what NPU providers got: the run's int8-static QDQ graph with its shapes fixed to [1, 32]
    import onnx

    npu_model = onnx.load(str(fake_adb.parent / "on the phone" / "model_npu.onnx"))
    assert [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in npu_model.graph.input] == [[1, 32], [1, 32]]
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in npu_model.graph.node}

    results = json.loads((run_copy.run_dir / "report" / "results.json").read_text())
    assert validate_results(results) == []
    meta = json.loads((run_copy.run_dir / "bundle" / "metadata.json").read_text())
    row = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) ==
               ("student", meta["model"]["variant"], "ort"))
    cpu = row["latency"]["android:Pixel 7/cpu/1t"]
    assert cpu["32"]["p50_ms"] == pytest.approx(10.2911) and cpu["session"]["provider"] == "cpu"
    assert row["latency"]["android:Pixel 7/xnnpack/1t"] == {
        "status": "skipped", "reason": "this onnxruntime_perf_test build has no xnnpack provider"}
    # NPU rows sit on the file they timed (the int8-static .onnx), never on the bundled .ort's row
    qdq = next(r for r in results["rows"]
               if (r["model"], r["variant"], r["format"]) == ("student", "int8-static", "onnx"))
    nnapi = qdq["latency"]["android:Pixel 7/nnapi/1t"]
    assert nnapi["32"]["p50_ms"] == pytest.approx(20.7702)
    assert nnapi["session"]["session_config"] == {"session.disable_cpu_ep_fallback": "1"}
    assert nnapi["session"]["model_file"] == "model_npu.onnx"
    assert row["latency"]["android:Pixel 7/nnapi/1t"]["status"] == "skipped"
    assert results["targets"]["android:Pixel 7/nnapi/1t"]["precision"] == "int8-static"
    assert "CPU fallback disabled" in results["targets"]["android:Pixel 7/nnapi/1t"]["description"]
    # a provider that cannot take the whole model is a failure, not a CPU timing under its name
    qnn_row = qdq["latency"]["android:Pixel 7/qnn/1t"]
    assert qnn_row["status"] == "failed" and "cannot run every node of model_npu.onnx" in qnn_row["reason"]
    other = next(r for r in results["rows"] if r is not row)
    assert other["latency"]["android:Pixel 7/cpu/1t"]["status"] == "skipped"
    t = results["targets"]["android:Pixel 7/cpu/1t"]
    assert t["device"]["name"] == "Google Pixel 7" and t["device"]["soc"] == "Google GS201"
    assert t["device"]["serial"] == SERIAL and results["threads"]["android:Pixel 7/cpu/1t"] == 1
    # the report shows the phone beside the host, and the report stage is still up to date
    md = (run_copy.run_dir / "report" / "report.md").read_text()
    assert "android:Pixel 7/cpu/1t p50 ms" in md and "mobile-cpu p50 ms" in md
    assert status(run_copy, "report") == (True, "up to date")
    assert status(run_copy, "bundle")[1] == "its input 'report' changed"  # the bundle quotes the report: rebuild
    # each kept row names the run file of its row and that file's sha256: the bundled .ort is a byte copy of it
    from pipeline.manifest import sha256_file

    kept = json.loads((run_copy.run_dir / "phone" / "android_Pixel_7_cpu_1t.json").read_text())
    assert kept["file"] == row["file"]
    assert kept["file_sha256"] == sha256_file(run_copy.run_dir / "bundle" / meta["models"]["ort"]["file"])
    kept_npu = json.loads((run_copy.run_dir / "phone" / "android_Pixel_7_nnapi_1t.json").read_text())
    assert kept_npu["file"] == qdq["file"] and kept_npu["file_sha256"] == sha256_file(run_copy.run_dir / qdq["file"])
    assert out["device"]["android"] == "14"
    # a re-built report (bench re-ran) gets the saved phone rows back
    from eval.phone import merge_saved

    fresh = _without_phone_rows(json.loads((run_copy.run_dir / "report" / "results.json").read_text()))
    assert sorted(merge_saved(run_copy.run_dir, fresh)) == sorted(out["targets"])
    assert fresh == results


def test_missing_device_and_binary_one_message(fake_adb, run_copy, monkeypatch):
    from pipeline.phone import phone_bench
    from pipeline.errors import PipelineError

    monkeypatch.setenv("FAKE_ADB_SERIALS", "")
    with pytest.raises(PipelineError) as e:
        phone_bench(run_copy, "android")
    msg = str(e.value)
    assert msg.startswith("phone-bench cannot run, missing:")
    assert "onnxruntime_perf_test binary (not given" in msg and "an Android device" in msg
    with pytest.raises(PipelineError, match=r"adb \('no-such-adb' is not on PATH"):
        phone_bench(run_copy, "android", adb="no-such-adb")
    assert _calls(fake_adb) == [["devices"]]  # nothing was pushed or run


def test_wrong_serial_and_unsafe_remote_dir(fake_adb, run_copy, tmp_path):
    from dataclasses import replace

    from pipeline.phone import phone_bench
    from pipeline.errors import PipelineError

    binary = _perf_binary(tmp_path)
    with pytest.raises(PipelineError, match="the device with serial XYZ"):
        phone_bench(run_copy, "android", perf_test=str(binary), serial="XYZ")
    bad = replace(run_copy, phone=replace(run_copy.phone, remote_dir="/data/local/tmp/x; reboot"))
    with pytest.raises(PipelineError, match="phone.remote_dir"):
        phone_bench(bad, "android", perf_test=str(binary))


@pytest.mark.parametrize("providers, code", [(["qnn", "xnnpack"], 1), (["cpu", "qnn"], 0)])
def test_exit_status_says_whether_anything_was_timed(fake_adb, run_copy, tmp_path, monkeypatch, capsys,
                                                      providers, code):
    """Every run failed (this phone's QNN refuses the graph, the binary has no XNNPACK): the rows are merged and
    printed, but the command fails, so a script does not take an empty benchmark as done. One timed run is a
    result, with the failures beside it."""
    import argparse
    from dataclasses import replace

    from pipeline import phone

    cfg = replace(run_copy, phone=replace(run_copy.phone, providers=providers))
    monkeypatch.setattr(phone, "load_config", lambda path, overrides: cfg)
    args = argparse.Namespace(config="unused.toml", overrides=[], platform="android", adb=None,
                              perf_test=str(_perf_binary(tmp_path)), serial=None)
    assert phone.run_cli(args) == code
    out, err = capsys.readouterr()
    assert "/qnn/1t: failed: the qnn provider cannot run every node" in out and "merged into" in out
    assert ("phone-bench timed nothing" in err) == (code == 1)
    rows = json.loads((cfg.run_dir / "report" / "results.json").read_text())["rows"]
    assert any(k.startswith("android:") for r in rows for k in r["latency"])


def test_apple_path_skips_clearly_off_macos(run_copy):
    from pipeline.phone import phone_bench
    from pipeline.errors import PipelineError

    if sys.platform == "darwin":
        pytest.skip("this checks the message on other systems")
    with pytest.raises(PipelineError, match="Core ML prediction needs macOS"):
        phone_bench(run_copy, "apple")


def test_npu_rows_skip_without_a_qdq_file(fake_adb, run_copy, tmp_path, monkeypatch):
    """No int8-static file: the NPU rows say so and nothing is timed under their names."""
    from pipeline.phone import phone_bench

    # editing quantize/variants.json makes the bundle out of date (eval/phone.py _bundle refuses that): this
    # test stands in for a run made without int8-static, whose bundle would be up to date
    monkeypatch.setattr("pipeline.stage.statuses", lambda cfg, names, accept=None: {"bundle": (True, "up to date")})
    variants = run_copy.run_dir / "quantize" / "variants.json"
    rows = json.loads(variants.read_text())
    variants.write_text(json.dumps([r for r in rows if r["variant"] != "int8-static"]))
    out = phone_bench(run_copy, "android", perf_test=str(_perf_binary(tmp_path)))
    by = {run["provider"]: run for run in out["runs"]}
    for ep in ("qnn", "nnapi"):
        assert by[ep]["status"] == "skipped" and "add int8-static to quantize.variants" in by[ep]["reason"]
    calls = _calls(fake_adb)
    assert not any(c[2] == "shell" and ("qnn" in c or "nnapi" in c) for c in calls[1:])
    assert not any(c[2] == "push" and c[-1].endswith("model_npu.onnx") for c in calls[1:])
    assert by["cpu"]["entry"]["p50_ms"] == pytest.approx(10.2911)


def _without_phone_rows(results: dict) -> dict:
    """results.json as the report stage builds it before merging runs/<run>/phone/."""
    fresh = json.loads(json.dumps(results))
    for r in fresh["rows"]:
        r["latency"] = {k: v for k, v in r["latency"].items() if not k.startswith("android:")}
    for key in ("targets", "threads"):
        fresh[key] = {k: v for k, v in fresh[key].items() if not k.startswith("android:")}
    return fresh


def test_kept_rows_are_dropped_once_their_file_changed(fake_adb, run_copy, tmp_path, caplog):
    """A retrained model's row must not show the old model's phone timings: the report stage re-adds a kept
    phone row only while its row's file has the sha256 it had when timed, and says which it left out."""
    from eval.phone import merge_saved
    from pipeline.manifest import sha256_file
    from pipeline.phone import phone_bench
    from pipeline.stage import run_stage

    phone_bench(run_copy, "android", perf_test=str(_perf_binary(tmp_path)))
    run_dir = run_copy.run_dir
    results = json.loads((run_dir / "report" / "results.json").read_text())
    meta = json.loads((run_dir / "bundle" / "metadata.json").read_text())
    ort_row = next(r for r in results["rows"] if (r["model"], r["variant"], r["format"]) ==
                   ("student", meta["model"]["variant"], "ort"))
    ort = run_dir / ort_row["file"]
    timed = sha256_file(ort)
    ort.write_bytes(ort.read_bytes() + b"retrained")  # what a retrain + export leaves under the same name
    fresh = _without_phone_rows(results)
    kept = merge_saved(run_dir, fresh)
    # the rows timed on the .ort are gone; the NPU rows timed the unchanged int8-static .onnx and stay
    assert sorted(kept) == ["android:Pixel 7/nnapi/1t", "android:Pixel 7/qnn/1t"]
    assert not any(k.startswith("android:Pixel 7/cpu") for r in fresh["rows"] for k in r["latency"])
    assert [n.split(":", 2)[:2] for n in fresh["phone_dropped"]] == [["android", "Pixel 7/cpu/1t"],
                                                                      ["android", "Pixel 7/xnnpack/1t"]]
    assert (f"left out (it timed {ort_row['file']} at sha256 {timed[:12]}, now sha256 {sha256_file(ort)[:12]})"
            in fresh["phone_dropped"][0])
    assert fresh["phone_dropped"][0].endswith("run `make phone-bench` again to time the current file")
    # a row kept before phone-bench recorded the file's sha256 cannot be tied to a file: left out too
    legacy = run_dir / "phone" / "android_Pixel_7_nnapi_1t.json"
    record = json.loads(legacy.read_text())
    del record["file_sha256"]
    legacy.write_text(json.dumps(record))
    fresh = _without_phone_rows(results)
    assert merge_saved(run_dir, fresh) == ["android:Pixel 7/qnn/1t"]
    assert any(n.startswith("android:Pixel 7/nnapi/1t: left out (measured before phone-bench recorded which file "
                            "it timed)") for n in fresh["phone_dropped"])
    # the report stage itself: the note is logged and shown under Targets, the stale timings are not
    with caplog.at_level("WARNING"):
        run_stage(run_copy, "report")
    rebuilt = json.loads((run_dir / "report" / "results.json").read_text())
    assert "android:Pixel 7/cpu/1t" not in rebuilt["targets"] and "android:Pixel 7/qnn/1t" in rebuilt["targets"]
    md = (run_dir / "report" / "report.md").read_text()
    assert f"Phone measurement android:Pixel 7/cpu/1t: left out (it timed {ort_row['file']} at sha256" in md
    assert any("android:Pixel 7/cpu/1t: left out" in r.getMessage() for r in caplog.records)


def test_report_is_out_of_date_when_kept_phone_rows_change(fake_adb, run_copy, tmp_path):
    """The phone folder is one of the report stage's inputs: a kept row removed (or one a phone-bench wrote
    without re-rendering the report) re-runs the report."""
    from pipeline.phone import phone_bench
    from pipeline.stage import status

    phone_bench(run_copy, "android", perf_test=str(_perf_binary(tmp_path)))
    assert status(run_copy, "report") == (True, "up to date")
    (run_copy.run_dir / "phone" / "android_Pixel_7_cpu_1t.json").unlink()
    assert status(run_copy, "report") == (False, "its input 'phone' changed")


def test_stale_bundle_is_refused_but_a_second_phone_is_not(fake_adb, run_copy, tmp_path):
    """An out-of-date bundle holds an older model: phone-bench refuses in one line before touching the phone.
    Its own re-rendering of the report (which the bundle quotes) does not count: a second phone needs no
    rebuild."""
    from dataclasses import replace

    from pipeline.errors import PipelineError
    from pipeline.phone import phone_bench

    binary = str(_perf_binary(tmp_path))
    phone_bench(run_copy, "android", perf_test=binary)
    out = phone_bench(run_copy, "android", perf_test=binary)  # the same model: accepted
    assert out["targets"][0] == "android:Pixel 7/cpu/1t"
    results = (run_copy.run_dir / "report" / "results.json").read_bytes()
    kept = {p.name: p.read_bytes() for p in (run_copy.run_dir / "phone").iterdir()}
    calls = len(_calls(fake_adb))
    retrained = replace(run_copy, student=replace(run_copy.student, layers=run_copy.student.layers + 1))
    with pytest.raises(PipelineError) as e:
        phone_bench(retrained, "android", perf_test=binary)
    assert str(e.value) == ("the bundle is out of date (its input 'distill' will re-run): run `make bundle` first")
    assert len(_calls(fake_adb)) == calls  # the phone was not touched
    assert (run_copy.run_dir / "report" / "results.json").read_bytes() == results
    assert {p.name: p.read_bytes() for p in (run_copy.run_dir / "phone").iterdir()} == kept


def test_rows_are_not_kept_when_validation_fails(fake_adb, run_copy, tmp_path, monkeypatch):
    """"nothing was written" holds for the kept rows too: the next report must not merge rows that failed."""
    from pipeline.errors import PipelineError
    from pipeline.phone import phone_bench

    monkeypatch.setattr("eval.results.validate_results", lambda doc: ["rows[0]: a made-up problem"])
    results = (run_copy.run_dir / "report" / "results.json").read_bytes()
    with pytest.raises(PipelineError, match="nothing was written"):
        phone_bench(run_copy, "android", perf_test=str(_perf_binary(tmp_path)))
    assert list((run_copy.run_dir / "phone").glob("*")) == []  # no folder, or an empty one
    assert (run_copy.run_dir / "report" / "results.json").read_bytes() == results


def test_bench_ids_are_exactly_the_length_real_word_pieces_between_cls_and_sep(tmp_path):
    from conftest import write_tokenizer
    from eval.phone import bench_ids

    tok = write_tokenizer(tmp_path / "tok")
    pieces = tok("good movie", add_special_tokens=False)["input_ids"]
    assert len(pieces) == 2 and tok.unk_token_id not in pieces
    ids = bench_ids(tok, ["good movie"], 9)  # the two pieces repeated to fill 7 places
    assert ids == [tok.cls_token_id, *(pieces * 4)[:7], tok.sep_token_id]
    assert bench_ids(tok, ["good movie"], 3) == [tok.cls_token_id, pieces[0], tok.sep_token_id]
    assert bench_ids(tok, ["good movie"], 2) == [tok.cls_token_id, tok.sep_token_id]
    assert bench_ids(tok, [], 5)[1:-1] == (tok("a short text", add_special_tokens=False)["input_ids"] * 3)[:3]
