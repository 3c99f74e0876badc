"""The probes in tools/ answer bad arguments with one line, not a traceback deep in a library call."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("module, argv, message", [
    ("pair_batches", ["--run", "{tmp}/none"], "run folder {tmp}/none does not exist: give --run runs/<name>"),
    ("profile_ops", ["--run", "{tmp}/none"], "run folder {tmp}/none does not exist"),
    ("bundle_tolerance", ["--run", "{tmp}/none"], "{tmp}/none has no finished bundle stage; run `make bundle` first"),
    ("throughput", ["--config", "{tmp}/none.toml"], "config file {tmp}/none.toml does not exist"),
    ("throughput", ["--set", "distill.nosuch=1"], "unknown key 'distill.nosuch'"),
    # these four and the two below exited 1 (SystemExit with a message) where the README says 2
    ("fusion_probe", ["--config", "{tmp}/none.toml"], "config file {tmp}/none.toml does not exist"),
    ("compact_probe", ["--config", "{tmp}/none.toml"], "config file {tmp}/none.toml does not exist"),
    ("static_probe", ["--config", "{tmp}/none.toml"], "config file {tmp}/none.toml does not exist"),
    ("shape_files", ["--config", "{tmp}/none.toml", "--tokenizer", "t", "--out", "o"],
     "config file {tmp}/none.toml does not exist"),
    ("compare_files", ["{tmp}/a.ort", "{tmp}/b.ort", "--tokenizer", "t", "--texts", "x"], "{tmp}/a.ort does not exist"),
    # refused before any jar is fetched or JVM started (no test runs the JVM)
    ("app_samples_jvm", ["{tmp}/none", "--jars", "{tmp}/jars"],
     "{tmp}/none is not a bundle folder (no metadata.json): give dist/<run> of `make bundle`"),
])
def test_a_missing_run_or_bad_config_is_one_error_line(module, argv, message, tmp_path, capsys, monkeypatch):
    import importlib

    from tools.cli import main_exit

    mod = importlib.import_module(f"tools.{module}")
    argv = [a.format(tmp=tmp_path) for a in argv]
    monkeypatch.setattr("sys.argv", [module, *argv])  # throughput reads sys.argv (make bench-ddp's runpy)
    call = (lambda: mod.main()) if module == "throughput" else (lambda: mod.main(argv))
    assert main_exit(call) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message.format(tmp=tmp_path) in err and err.count("\n") == 1


@pytest.mark.parametrize("module, argv, message", [
    ("pair_batches", ["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    ("profile_ops", ["--batch", "1", "x"], "argument --batch: expected a whole number, got 'x'"),
    ("profile_ops", ["--warmup", "-1"], "argument --warmup: must be 0 or more, got -1"),
    ("fusion_probe", ["--config", "c.toml", "--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    ("compact_probe", ["--config", "c.toml", "--calls", "0"], "argument --calls: must be at least 1, got 0"),
    ("compare_files", ["--texts", "t.jsonl", "--threads", "0"], "argument --threads: must be at least 1, got 0"),
    ("qnn_agreement", ["--texts", "-1"], "argument --texts: must be 0 or more, got -1"),
    ("static_probe", ["--texts", "x"], "argument --texts: expected a whole number, got 'x'"),
    ("wasm_profile", ["--length", "0"], "argument --length: must be at least 1, got 0"),
    ("wasm_profile", ["f.ort", "--length", "1"], "argument --length: must be at least 2 ([CLS] and [SEP]), got 1"),
    ("wasm_profile", ["f.ort", "--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    ("wasm_profile", ["f.ort", "--runs", "-2"], "argument --runs: must be at least 1, got -2"),
    ("wasm_profile", ["f.ort", "--top", "0"], "argument --top: must be at least 1, got 0"),
    ("wasm_profile", ["f.ort", "--warmup", "-1"], "argument --warmup: must be 0 or more, got -1"),
    ("corpus_folder", ["a.tgz"], "the following arguments are required: out"),
    ("shape_files", ["--out", "o"], "the following arguments are required: --tokenizer"),
    ("teacher_families", ["o", "--task", "x"], "argument --task: invalid choice: 'x'"),
    ("bundle_tolerance", ["--run", "r", "--texts", "0"], "argument --texts: must be at least 1, got 0"),
    ("throughput", ["--steps", "5", "--warmup", "10"], "--steps (5) must be more than --warmup (10)"),
    ("lm_loss_bench", ["--calls", "0"], "argument --calls: must be at least 1, got 0"),
    ("lm_loss_bench", ["--dtype", "fp8"], "argument --dtype: invalid choice: 'fp8'"),
    ("app_samples_jvm", ["dist/demo"], "the following arguments are required: --jars"),
])
def test_counts_are_checked_by_the_parser(module, argv, message, capsys, monkeypatch):
    import importlib

    mod = importlib.import_module(f"tools.{module}")
    monkeypatch.setattr("sys.argv", [module, *argv])
    with pytest.raises(SystemExit) as e:
        mod.main() if module == "throughput" else mod.main(argv)
    err = capsys.readouterr().err
    # one line: argparse's usage block before it buried what to fix (tools.cli.ToolParser)
    assert e.value.code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1


def test_a_count_of_0_from_the_command_line_is_one_line_and_exit_2():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "tools.pair_batches", "--rounds", "0"], cwd=root, capture_output=True,
                       text=True, env={"PYTHONPATH": str(root), "PATH": ""}, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "error: argument --rounds: must be at least 1, got 0\n")


@pytest.mark.parametrize("compare", [False, True])
def test_wasm_profile_exits_1_when_no_runtime_measured_a_file(compare, tmp_path, monkeypatch, capsys):
    """Every file failed in every runtime: the failures are printed and the exit status says so (it was 0)."""
    from tools import wasm_profile as W

    f = tmp_path / "m.ort"
    f.write_bytes(b"x")
    failed = {"versions": {}, "runtimes": {"node-wasm": {"files": {"m.ort": {"error": "bad model"}}},
                                           "node-native": {"error": "no onnxruntime-node"}}}
    monkeypatch.setattr(W, "run_node_script", lambda *a, **k: failed)
    argv = [str(f), "--runtimes", "node-wasm,node-native", *(["--compare"] if compare else [])]
    assert W.main(argv) == 1
    out = capsys.readouterr()
    assert "bad model" in out.out and "no onnxruntime-node" in out.out
    assert out.err == "error: no file was measured in any runtime (the failures are above)\n"
    one = {"events": []}
    monkeypatch.setattr(W, "aggregate", lambda events, warmup: {"run_ms": 1.0, "ops": {}, "nodes": {}, "runs": 1})
    monkeypatch.setattr(W, "op_table", lambda *a: "")
    monkeypatch.setattr(W, "node_table", lambda *a: "")
    if not compare:  # one runtime measured the file: 0
        failed["runtimes"]["node-wasm"]["files"]["m.ort"] = one
        assert W.main(argv) == 0
