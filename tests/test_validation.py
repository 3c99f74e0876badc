"""Settings a run would refuse after training are refused when the config loads, by load_config and by
`python -m pipeline show-config` alike, with one message naming the key and a fix that itself loads."""
from __future__ import annotations

import re

import pytest

from pipeline.config import load_config
from pipeline.errors import PipelineError

GEN = ["run.task=generation"]
# (overrides, the key the message must name first, whether the message suggests a --set fix)
CASES = [
    (["bench.seq_lengths=[]"], "bench.seq_lengths", True),
    (["bench.headline_length=100"], "bench.headline_length", True),
    (['lm.prompts=[""]'], "lm.prompts", True),
    (['bundle.web_target="host-cpu"'], "bundle.web_target", True),
    (['bench.targets=["host-cpu","browser-wasm"]', 'bundle.web_target="browser-wasm-mt"'], "bundle.web_target", True),
    (['export.ort_variants=["fp32","int8-dynamic"]', 'bundle.variant="int8-static"'], "bundle.variant", True),
    (['quantize.models=["teacher","student"]', 'bundle.model="lstm"'], "bundle.model", True),
    (['bundle.model="lstm"', 'bundle.variant="optimized"'], "bundle.variant", True),
    (['bundle.model="gpt"'], "bundle.model", True),
    (["bundle.sample_texts=0"], "bundle.sample_texts", False),
    (["quantize.npu_lengths=[]"], "quantize.npu_lengths", True),
    (['quantize.variants=["fp32","int8-dynamic"]'], "export.ort_variants", True),
    (['export.coreml_models=["teacher","student"]'], "export.coreml_models", True),
    (['quantize.skip_fusions=["skip_layer_nrom"]'], "quantize.skip_fusions", False),
    (['export.ort_disabled_optimizers=["NoSuchFusion"]'], "export.ort_disabled_optimizers", False),
    (GEN + ['quantize.models=["student","lstm_distilled"]'], "quantize.models", False),
    (GEN + ["lm.prompts=[]"], "lm.prompts", True),
    (GEN + ['lm.prompts=["KING:"," "]'], "lm.prompts", True),
    (GEN + ['bundle.model="lstm"'], "bundle.model", True),
    (GEN + ['bundle.variant="int8-static"'], "bundle.variant", True),
    (GEN + ['quantize.models=["teacher","lstm"]'], "quantize.models", True),
    (GEN + ['quantize.variants=["fp16"]'], "quantize.variants", True),
    (GEN + ["teacher.fine_tune=true"], "teacher.fine_tune", True),
    (GEN + ['student.arch="bert"'], "student.arch", True),
    (GEN + ["lm.max_cache=64"], "lm.bench_prompt_tokens", True),
    (GEN + ["data.max_unlabeled=100"], "data.max_unlabeled", True),
    (GEN + ['bench.targets=["host-cpu","gpu"]'], "bench.targets", False),
    (GEN + ['bench.targets=["qnn-htp"]'], "bench.targets", False),
]
FIX = re.compile(r"--set ([a-z_]+\.[a-z_]+=(?:\[[^\]]*\]|\"[^\"]*\"|[^\s,)]+))")


@pytest.mark.parametrize("overrides,key,has_fix", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_refused_at_load_with_the_key_and_a_fix_that_loads(overrides, key, has_fix):
    with pytest.raises(PipelineError) as e:
        load_config(None, overrides)
    msg = str(e.value)
    assert re.search(rf"'{re.escape(key)}'|{re.escape(key)} ", msg), msg
    first = re.findall(r"'([a-z_]+\.[a-z_]+)'", msg) or re.findall(r"\b([a-z_]+\.[a-z_]+) ", msg)
    assert first[0] == key, msg  # the key at fault is named first, not another one
    fixes = FIX.findall(msg)
    assert bool(fixes) == has_fix, msg
    if fixes:
        load_config(None, [*overrides, fixes[0]])  # the suggested fix is accepted


@pytest.mark.parametrize("overrides,key,has_fix", CASES[:8] + CASES[15:18], ids=[" ".join(c[0]) for c in CASES[:8] + CASES[15:18]])
def test_show_config_refuses_the_same(overrides, key, has_fix, capsys):
    from pipeline.cli import main

    argv = ["show-config", "--config", ""]
    for o in overrides:
        argv += ["--set", o]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and key in err and "Traceback" not in err and err.count("\n") == 1
