"""What a generation user's own config and data get (an audit on 2026-11-29): settings the run would refuse only
after training, or never, now refused when the config loads or by the first stage that can tell; data that was
silently changed is read as it is written, or named."""
from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import fields

import pytest

from pipeline.config import SECTIONS, config_from_dict, load_config, read_keys, unkeyed_reads
from pipeline.errors import PipelineError
from pipeline.stage import run
from test_errors_config_data import datasets_cache, lm_cfg  # noqa: F401  (fixture)
from test_gpt_pipeline import corpus, gen_cfg, tiny_llama_dir  # noqa: F401  (fixtures)

GEN = 'run.task="generation"'


@pytest.mark.parametrize("sets,match", [
    (["lm.sample_tokens=0"], r"'lm.sample_tokens' = 0 must be > 0"),
    (["lm.context_length=300"], r"'lm.context_length' = 300 is longer than the students' positions 'lm.max_cache' "
                                r"\(256\), the table they are trained, exported and shipped with; shorten the "
                                r"windows, --set lm.context_length=256, or raise lm.max_cache"),
    (['bench.targets=["edge-npu"]'], r"'bench.targets' = \['edge-npu'\]: the generation bench skips each of them "
                                     r"\(.*\), so it would time nothing; add one it times"),
    (['lm.prompts=["\u200b\u200d"]'], r"'lm.prompts' item 0 is empty"),
    (['lm.prompts=["\u00a0"]'], r"'lm.prompts' item 0 is empty"),  # a no-break space, as a data text's is blank
    # the fix it gives loads: it suggested the blank prompt back when it held a newline
    (['lm.prompts=["KING :", "  \\n  "]'], r"'lm.prompts' item 1 is empty: .* e\.g\. --set 'lm\.prompts=\[\"KING :\"\]' "),
    (["quantize.min_argmax_agreement=0.99"], r"'quantize.min_argmax_agreement' = 0.99 is a classification setting "
                                             r"no generation stage reads: remove it"),
    (["quantize.check_samples=500"], r"is a classification setting no generation stage reads \(generation has "
                                     r"'lm.check_tokens'\)"),
    (["export.coreml_lengths=[8]"], r"\(generation has 'lm.max_cache'\)"),
    (["bundle.sample_texts=2"], r"\(generation has 'lm.prompts'\)"),
    (["npu.emulator_samples=5"], r"'npu.emulator_samples' = 5 is a classification setting"),
    # no upper bound before: the Core ML export would allocate the whole cache after training
    (["lm.max_cache=1000000"], r"^<defaults>: 'lm.max_cache' = 1000000: the student's KV cache for that many "
                               r"positions takes 3.8 GiB \(keys and values of 4 layers x 128 floats, 4096 bytes a "
                               r"position\), over the 1 GiB limit: the Core ML package allocates it whole, and a phone "
                               r"app holds it beside the model; --set lm.max_cache=262144 or less \[the value came "
                               r"from --set 'lm.max_cache=1000000'\]$"),
])
def test_generation_settings_a_run_would_refuse_late_are_refused_at_load(sets, match):
    with pytest.raises(PipelineError, match=match):
        load_config(None, [GEN, *sets])


def test_max_cache_is_bounded_by_the_students_kv_cache_not_the_teachers_positions():
    """The limit the message suggests loads (4 x 128 fp32 keys and values: 4096 bytes a position, 1 GiB in all);
    past the packaged teacher's 8192 positions is fine, as positions past lm.context_length are untrained anyway."""
    assert load_config(None, [GEN, "lm.max_cache=262144"]).lm.max_cache == 262144
    with pytest.raises(PipelineError, match=r"'lm.max_cache' = 2049: .* \(keys and values of 8 layers x 8192 floats, "
                                            r"524288 bytes a position\), .* --set lm.max_cache=2048 or less"):
        load_config(None, [GEN, "lm.max_cache=2049", "student.layers=8", "student.hidden=8192", "student.heads=64",
                           'student.init="random"'])


def test_every_setting_no_generation_step_reads_is_refused():
    """The keys no generation stage declares reading (pipeline/tasks/generation/__init__.py), but for those the
    commands read (run, search, phone) and the ones refused by their own check, are all CLASSIFICATION_ONLY: a
    value there was silently ignored (no gate, no re-run)."""
    from pipeline.tasks import TASKS
    from pipeline.tasks.generation.checks import CLASSIFICATION_ONLY

    task = TASKS["generation"]
    read = {k for name, step in task.steps.items() if name != "search"
            for k in (*read_keys(step.reads), *unkeyed_reads(step.reads))}
    every = {f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)}
    commands = {k for k in every if k.split(".")[0] in ("run", "search", "phone")} | {"teacher.fine_tune"}
    assert every - read - commands <= set(CLASSIFICATION_ONLY), sorted(every - read - commands - set(CLASSIFICATION_ONLY))


@pytest.mark.parametrize("key,value", [("lm.top_k", "3"), ("lm.prompts", '["ROMEO:"]'), ("lm.max_cache", "64")])
def test_classification_refuses_generation_settings(key, value):
    with pytest.raises(PipelineError, match=rf"'{key}' = .* is a generation setting no classification stage reads: "
                                            rf"remove it, or set run.task = \"generation\" under \[run\]"):
        load_config(None, [f"{key}={value}"])


def test_a_generation_config_without_its_task_says_so():
    with pytest.raises(PipelineError, match=r"'student.arch' = 'llama' is a generation student, and run.task is "
                                            r"'classification': a generation config sets run.task = \"generation\" "
                                            r"under \[run\]; a classification one picks 'bert' or 'npu'"):
        load_config(None, ['student.arch="llama"'])


def test_local_teacher_folders_are_checked_at_load(tmp_path, corpus, tiny_llama_dir, tiny_bert_dir):
    """A BERT folder is no decoder; the bench's prompt and new tokens must fit the teacher's own 256 positions,
    as the bench times it decoding too (it blamed lm.max_cache after the whole run)."""
    with pytest.raises(PipelineError, match="is a 'bert' model .* not a causal language model"):
        config_from_dict(gen_cfg(tmp_path, corpus, tiny_bert_dir), "tiny-gen")
    long = gen_cfg(tmp_path, corpus, tiny_llama_dir, lm__eval_windows=0, lm__bench_prompt_tokens=250,
                   lm__bench_decode_tokens=40, lm__max_cache=300)
    with pytest.raises(PipelineError, match=r"'lm.bench_prompt_tokens' \(250\) \+ 'lm.bench_decode_tokens' \(40\) "
                                            r"\+ 1 exceeds the teacher's positions \(llama: 256\).*"
                                            r"--set lm.bench_prompt_tokens=215"):
        config_from_dict(long, "tiny-gen")
    long["quantize"]["models"] = ["student", "lstm", "lstm_distilled"]  # the teacher is not timed: nothing to fit
    assert config_from_dict(long, "tiny-gen").lm.bench_prompt_tokens == 250


@pytest.mark.parametrize("layers", [1, 3])
def test_a_teacher_config_that_disagrees_with_its_weights_is_refused(layers, tmp_path, corpus, tiny_llama_dir):
    """config.json of 3 layers over 2 layers' weights: transformers started layer 2 random (1 layer: dropped the
    second), with a warning only, and the teacher stage scored and distilled that model."""
    teacher = shutil.copytree(tiny_llama_dir, tmp_path / "teacher")
    config = json.loads((teacher / "config.json").read_text())
    (teacher / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    cfg = config_from_dict(gen_cfg(tmp_path, corpus, teacher), "tiny-gen")
    with pytest.raises(PipelineError, match=rf"teacher.model: the weights in .*teacher do not fit its config.json \(9 "
                                            rf"weight\(s\) missing, unused or of another shape, e.g. "
                                            rf"model.layers.{min(layers, 2)}.input_layernorm.weight\)"):
        run(cfg, ["teacher"])
    assert not (cfg.run_dir / "teacher").exists()


def test_a_teacher_without_eos_is_refused_by_the_teacher_stage(tmp_path, corpus, tiny_llama_dir):
    """Documents are joined with the eos and generation stops at it: before, every stage ran (documents joined
    with id 0) and the bundle refused the run at the end."""
    teacher = shutil.copytree(tiny_llama_dir, tmp_path / "noeos")
    for name in ("tokenizer_config.json", "special_tokens_map.json", "config.json", "generation_config.json"):
        path = teacher / name
        if path.is_file():
            d = json.loads(path.read_text())
            for key in ("eos_token", "pad_token"):
                d.pop(key, None)
            if name.endswith("config.json") and name != "tokenizer_config.json":
                d.update(eos_token_id=None, pad_token_id=None)  # absent, LlamaConfig would default it to 2
            path.write_text(json.dumps(d))
    cfg = config_from_dict(gen_cfg(tmp_path, corpus, teacher), "tiny-gen")
    with pytest.raises(PipelineError, match=r"its tokenizer and config name no eos token, which ends every training "
                                            r"document and every generation"):
        run(cfg, ["teacher"])
    assert not (cfg.run_dir / "teacher").exists()


def test_a_prompt_past_the_positions_is_refused_before_training(tmp_path, corpus, tiny_llama_dir):
    long = "ROMEO : " + " ".join(["love"] * 70)
    cfg = config_from_dict(gen_cfg(tmp_path, corpus, tiny_llama_dir, lm__prompts=["KING : the crown", long]),
                           "tiny-gen")
    with pytest.raises(PipelineError, match=r"'lm.prompts' item 1 \('ROMEO : love love.*'\.\.\.\) is 72 tokens: with 6 "
                                            r"new tokens after it, it exceeds the students' positions 'lm.max_cache' "
                                            r"\(64\); shorten it, or raise lm.max_cache to at least 78"):
        run(cfg, ["teacher"])


def test_a_test_split_shorter_than_a_window_is_refused_before_the_teacher_pass(tmp_path, tiny_llama_dir):
    """eval scores the test split in windows: one too short to hold one was found after distill and baseline."""
    plays = tmp_path / "plays"
    plays.mkdir()
    for i, word in enumerate(("love", "crown", "sword", "night", "day")):
        (plays / f"p{i}.txt").write_text(" ".join([f"ROMEO : my {word} is here ."] * 20) + "\n")
    (tmp_path / "test.txt").write_text("KING : the crown .\n")
    cfg = config_from_dict(gen_cfg(tmp_path, plays, tiny_llama_dir, data__test_path=str(tmp_path / "test.txt")),
                           "tiny-gen")
    with pytest.raises(PipelineError, match=r"test split: the text has \d+ tokens, shorter than one window of "
                                            r"lm.context_length \+ 1 = 17"):
        run(cfg, ["logits"])
    assert not (cfg.run_dir / "logits").exists() and not (cfg.run_dir / "distill").exists()


@pytest.mark.parametrize("values,shown", [([["#", "A"], ["b"]], "\"['#', 'A']\" (list)"), ([1, 2], "'1' (int)")])
def test_hub_texts_that_are_not_strings_are_refused(values, shown, tmp_path, datasets_cache):  # noqa: F811
    from pipeline.tasks.generation.data import build_lm_splits

    folder = tmp_path / "ds"
    datasets_cache.DatasetDict({"train": datasets_cache.Dataset.from_dict({"text": values * 10})}).save_to_disk(
        str(folder))
    with pytest.raises(PipelineError, match=r"ds\[train\]: 20 text\(s\) in column 'text' are not strings, e.g. row 1: "
                                            + re.escape(shown)):
        build_lm_splits(lm_cfg(source="hub", hub_name=str(folder)))


@pytest.mark.parametrize("split", ["test", "validation"])
def test_a_given_split_file_with_no_text_left_is_refused(split, tmp_path):
    """Every text of data.test_path empty and dropped: the test split was held out of the training documents
    instead, without a word, and the perplexity reported on other text than the file named."""
    from pipeline.tasks.generation.data import build_lm_splits

    (tmp_path / "train").mkdir()
    for i in range(4):
        (tmp_path / "train" / f"p{i}.txt").write_text(f"ROMEO : my love {i} .\n")
    (tmp_path / "blank.txt").write_text("\n  \n")
    cfg = lm_cfg(source="text", train_path=str(tmp_path / "train"), on_empty_text="drop",
                 **{f"{split}_path": str(tmp_path / "blank.txt")})
    with pytest.raises(PipelineError, match=rf"data.{split}_path = '.*blank.txt' leaves the {split} split empty "
                                            rf"\(every text in it was empty and dropped, .*remove data.{split}_path"):
        build_lm_splits(cfg)


def test_markdown_front_matter_is_no_text(tmp_path):
    """A notes folder's YAML front matter trained as text; a .md file of front matter alone as a document."""
    from pipeline.tasks.generation.data import build_lm_splits, strip_markdown

    assert strip_markdown("---\ntitle: Notes\ntags:\n  - a\n---\n# Day\n\nROMEO: hi\n") == "Day\n\nROMEO: hi\n"
    # a rule above prose is kept as it was: no "key: value" line follows the opening ---
    assert strip_markdown("---\n\nROMEO: my love\n\n---\nmore\n") == "---\n\nROMEO: my love\n\n---\nmore\n"
    (tmp_path / "c").mkdir()
    for i in range(4):
        (tmp_path / "c" / f"p{i}.md").write_text(f"ROMEO : my love {i} .\n")
    (tmp_path / "c" / "fm.md").write_text("---\ntitle: Hello\ndate: 2026-01-01\n---\n")
    with pytest.raises(PipelineError, match=r"document 'fm.md' is empty as it renders \(its front matter and markup "
                                            r"are no text\). Remove it, or set data.on_empty_text = \"drop\""):
        build_lm_splits(lm_cfg(source="text", train_path=str(tmp_path / "c")))


def test_markdown_is_read_as_it_renders():
    """A user's .md file keeps what Markdown keeps (it ate backslashes and spaced asterisks)."""
    from pipeline.tasks.generation.data import strip_markdown

    md = "# Setup\n\nRun `C:\\tools\\setup.exe`, then a * b * c = 2 * 3.  \nKeep snake_case and x*y*z.\\\n" \
         "**ROMEO** _aside_ *softly* \\*not emphasis\\*"
    assert strip_markdown(md) == ("Setup\n\nRun `C:\\tools\\setup.exe`, then a * b * c = 2 * 3.\nKeep snake_case and "
                                  "x*y*z.\nROMEO aside softly *not emphasis*\n")


def test_files_a_corpus_folder_leaves_out_are_named(tmp_path, caplog):
    from pipeline.tasks.generation.data import read_documents

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("one text\n")
    for name in ("b.rst", "README", ".hidden", "__init__.py"):
        (tmp_path / "c" / name).write_text("more text\n")
    with caplog.at_level(logging.WARNING):
        docs = read_documents(tmp_path / "c", lm_cfg().data)
    assert [d["name"] for d in docs] == ["a.txt"]
    assert "2 file(s) are not .txt/.md/.text and are left out (README, b.rst)" in caplog.text
