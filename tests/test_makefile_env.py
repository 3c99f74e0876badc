"""The Makefile hands CONFIG and SET to the CLI through the environment: a value with `;`, quotes, spaces
or brackets reaches the config as typed and runs nothing in the shell."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.cli_args import env_argv, env_settings, split_sets

ROOT = Path(__file__).resolve().parent.parent


def _make(target: str, **variables: str) -> subprocess.CompletedProcess:
    if shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("needs make and the project's .venv (make install)")
    # -o: never (re)build .venv here, whatever the stamp's age
    args = ["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed-stamp", target]
    args += [f"{k}={v}" for k, v in variables.items()]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", ["touch {}", ":>{}"])
def test_set_with_shell_syntax_runs_nothing(tmp_path, command):
    marker = tmp_path / "pwned"
    p = _make("status", SET="run.name=x;" + command.format(marker))
    assert not marker.exists()
    assert p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "run.name" in errors[0] and "Traceback" not in p.stderr


def test_set_list_with_spaces_and_quotes_reaches_the_config():
    p = _make("show-config", SET='bench.targets=["host-cpu", "mobile-cpu", "browser-wasm"] '
                                 'distill.epochs=2 bench.iterations=5 run.name="my run"')
    assert p.returncode == 0, p.stderr
    cfg = json.loads(p.stdout)
    assert cfg["bench"]["targets"] == ["host-cpu", "mobile-cpu", "browser-wasm"]
    assert cfg["distill"]["epochs"] == 2 and cfg["bench"]["iterations"] == 5
    assert cfg["run"]["name"] == "my run"


def test_config_path_is_taken_whole():
    p = _make("show-config", CONFIG="configs/no such;file.toml")
    assert p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "configs/no such;file.toml does not exist" in errors[0]


def test_split_sets_keeps_values_whole():
    assert split_sets("") == [] and split_sets("  ") == []
    # what looks like a next item inside a quoted string or a list is part of the value
    assert split_sets('lm.prompts=["a b.c=1", "d"] run.name="x"') == ['lm.prompts=["a b.c=1", "d"]', 'run.name="x"']
    assert split_sets('run.name="say a.b=c" bundle.web=false') == ['run.name="say a.b=c"', "bundle.web=false"]
    assert split_sets("distill.epochs=2  bench.iterations=5") == ["distill.epochs=2", "bench.iterations=5"]
    assert split_sets('bench.targets=["a", "b"] run.name="x y" bundle.web=false') == [
        'bench.targets=["a", "b"]', 'run.name="x y"', "bundle.web=false"]
    assert split_sets("run.name=x;touch f") == ["run.name=x;touch f"]


def test_env_settings_and_argv():
    env = {"POCKETFORMER_CONFIG": "configs/gpt-demo.toml", "POCKETFORMER_SET": 'a.b=[1, 2] c.d="e f"'}
    assert env_settings(env) == ("configs/gpt-demo.toml", ["a.b=[1, 2]", 'c.d="e f"'])
    assert env_argv(env) == ["--config", "configs/gpt-demo.toml", "--set", "a.b=[1, 2]", "--set", 'c.d="e f"']
    assert env_argv({}) == ["--config", "configs/demo.toml"]


def test_search_values_run_nothing(tmp_path):
    marker = tmp_path / "pwned"
    p = _make("search", TARGET=f"mobile-cpu;touch {marker}", BUDGET_MS="2", TRIALS="3")
    assert not marker.exists() and p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "is not a known target" in errors[0] and "Traceback" not in p.stderr


def test_search_without_a_budget_says_how():
    p = _make("search", TARGET="mobile-cpu")
    assert p.returncode != 0 and "make search needs TARGET and BUDGET_MS" in p.stderr


def test_make_help_names_every_target_a_user_runs():
    """`make help` listed six targets and left out gpt, verify-bundle, phone-bench and the rest the README names:
    every target of the Makefile but the set-up pieces is in it."""
    import re

    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.M)) - {"help", "js-client", "web-deps"}
    out = _make("help").stdout
    assert "make <stage>" in out and "make all" in out
    missing = sorted(t for t in targets if not re.search(rf"make {re.escape(t)}\b", out))
    assert missing == [], missing
