"""Bad data and config files: each gets one PipelineError naming the problem and the fix, or is read correctly
and, where something was changed, warned about and recorded in split.json. Tiny files written in tmp_path."""
import gzip
import json
import logging
import random
from types import SimpleNamespace

import pytest

from pipeline.cli import main
from pipeline.config import config_from_dict, load_config
from pipeline.data import build_splits
from pipeline.errors import PipelineError
from pipeline.tasks.generation.data import build_lm_splits

ROWS = [f"text number {i} is here,{'pos' if i % 2 else 'neg'}" for i in range(40)]


def cfg_for(path, tmp_path, **data):
    d = {"source": "csv", "train_path": str(path), "text_column": "t", "label_column": "y", **data}
    return config_from_dict({"run": {"runs_dir": str(tmp_path / "runs")}, "data": d}, "test")


def lm_cfg(path, **data):
    return config_from_dict({"run": {"task": "generation"},
                             "data": {"source": "text", "train_path": str(path), **data}}, "test")


def write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# --- config files ---

def test_config_not_utf8_is_one_error_naming_the_line(tmp_path):
    p = write(tmp_path / "c.toml", b'[run]\nname = "caf\xe9"\n')
    with pytest.raises(PipelineError, match=r"not UTF-8 text \(byte 17, line 2\).*save it as UTF-8"):
        load_config(p)


def test_config_with_a_bom_is_read(tmp_path):
    p = write(tmp_path / "c.toml", b'\xef\xbb\xbf[run]\nname = "bom"\n')
    assert load_config(p).run.name == "bom"


def test_config_folder_is_named_as_a_folder(tmp_path):
    with pytest.raises(PipelineError, match="is a folder; give a .toml file"):
        load_config(tmp_path)


def test_cli_prints_one_line_for_a_non_utf8_config(tmp_path, capsys):
    p = write(tmp_path / "c.toml", b'[run]\nname = "\xff"\n')
    assert main(["show-config", "--config", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not UTF-8" in err[0]


def test_delimiter_setting_is_checked_at_load(tmp_path):
    with pytest.raises(PipelineError, match="'data.delimiter' = ';;'"):
        config_from_dict({"data": {"delimiter": ";;"}}, "test")
    with pytest.raises(PipelineError, match="'data.encoding_errors' = 'bogus'"):
        config_from_dict({"data": {"encoding_errors": "bogus"}}, "test")


# --- encodings ---

def test_csv_with_a_bom_reads_its_first_column(tmp_path):
    p = write(tmp_path / "d.csv", ("\ufefft,y\n" + "\n".join(ROWS) + "\n").encode())
    s = build_splits(cfg_for(p, tmp_path))
    assert s["labels"] == ["neg", "pos"] and s["info"]["undecodable"] == []


def test_csv_not_utf8_is_warned_counted_and_recorded(tmp_path, caplog):
    rows = ROWS[:]
    rows[3] = "caf\xe9 cr\xe8me text,pos"  # Latin-1 bytes: 2 undecodable on one line
    p = write(tmp_path / "d.csv", ("t,y\n" + "\n".join(rows) + "\n").encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        s = build_splits(cfg_for(p, tmp_path))
    assert "2 byte(s) on 1 line(s) are not UTF-8 (e.g. line 5)" in caplog.text
    (note,) = s["info"]["undecodable"]
    assert note["file"] == str(p) and note["undecodable_bytes"] == 2 and note["lines_with_undecodable"] == 1
    assert any("caf\ufffd" in ex["text"] for k in ("train", "validation", "test") for ex in s[k])


def test_csv_not_utf8_with_strict_is_one_error(tmp_path):
    p = write(tmp_path / "d.csv", ("t,y\n" + "\n".join(ROWS) + "\ncaf\xe9,pos\n").encode("latin-1"))
    with pytest.raises(PipelineError, match=r"1 byte\(s\) on 1 line\(s\) are not UTF-8, e.g. line 42\. Save the file"):
        build_splits(cfg_for(p, tmp_path, encoding_errors="strict"))


def test_jsonl_not_utf8_with_strict_is_one_error(tmp_path):
    p = write(tmp_path / "d.jsonl", b'{"t": "caf\xe9", "y": "a"}\n')
    with pytest.raises(PipelineError, match="are not UTF-8"):
        build_splits(cfg_for(p, tmp_path, source="jsonl", encoding_errors="strict"))


def test_binary_file_as_a_corpus_is_refused(tmp_path):
    p = write(tmp_path / "noise.txt", random.Random(0).randbytes(4000))
    with pytest.raises(PipelineError, match=r"are not UTF-8 text .*binary data, or text in another encoding"):
        build_lm_splits(lm_cfg(p))
    with pytest.raises(PipelineError, match="binary data"):
        build_splits(cfg_for(write(tmp_path / "noise.csv", b"t,y\n" + random.Random(1).randbytes(4000)), tmp_path))


def test_documents_not_utf8_are_recorded_in_split_json(tmp_path, caplog):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(4):
        write(folder / f"{i}.txt", f"document {i}\n\n".encode() + (b"na\xefve line\n\n" if i == 2 else b"") + b"end\n")
    with caplog.at_level(logging.WARNING):
        s = build_lm_splits(lm_cfg(folder))
    assert "1 byte(s) on 1 line(s) are not UTF-8" in caplog.text
    assert s["info"]["undecodable"] == [{"file": str(folder / "2.txt"), "bytes": 28, "undecodable_bytes": 1,
                                         "lines_with_undecodable": 1}]


# --- CSV structure ---

def test_unquoted_comma_is_refused_with_the_row(tmp_path):
    rows = ROWS[:]
    rows[6] = "good, but slow,pos"  # three fields: "but slow" would become the label
    p = write(tmp_path / "d.csv", "t,y\n" + "\n".join(rows) + "\n")
    with pytest.raises(PipelineError, match=r"row 7 \(line 8\) has 3 fields, the header 2: a text with an unquoted "
                                            r"','\? Quote that field"):
        build_splits(cfg_for(p, tmp_path))


def test_duplicate_header_column_is_refused(tmp_path):
    p = write(tmp_path / "d.csv", "t,y,t\n" + "\n".join(r + ",x" for r in ROWS) + "\n")
    with pytest.raises(PipelineError, match=r"names a column twice: 't' \(columns 1, 3\)"):
        build_splits(cfg_for(p, tmp_path))


def test_semicolon_file_names_the_delimiter_setting(tmp_path):
    p = write(tmp_path / "d.csv", "t;y\n" + "\n".join(r.replace(",", ";") for r in ROWS) + "\n")
    with pytest.raises(PipelineError, match=r"looks ';'-separated: set data.delimiter = ';' \(or \"auto\"\)"):
        build_splits(cfg_for(p, tmp_path))
    assert build_splits(cfg_for(p, tmp_path, delimiter=";"))["labels"] == ["neg", "pos"]
    assert build_splits(cfg_for(p, tmp_path, delimiter="auto"))["labels"] == ["neg", "pos"]


def test_gzip_and_jsonl_given_as_csv(tmp_path):
    gz = write(tmp_path / "d.csv.gz", gzip.compress(("t,y\n" + "\n".join(ROWS)).encode()))
    with pytest.raises(PipelineError, match=r"gzip-compressed .*data.source = \"csv\".*gunzip"):
        build_splits(cfg_for(gz, tmp_path))
    jl = write(tmp_path / "d.csv", "\n".join(json.dumps({"t": r, "y": "a"}) for r in ROWS))
    with pytest.raises(PipelineError, match="looks like JSON .*set data.source = \"jsonl\""):
        build_splits(cfg_for(jl, tmp_path))


def test_a_quote_closed_by_a_stray_quote_lines_later_is_refused(tmp_path):
    """A text starting with a quote that is no CSV quoting ('"great movie'), closed by a stray quote 30 lines on:
    the rows between became part of one text, and 40 rows were 10 examples without a word."""
    rows = ROWS[:]
    rows[5], rows[35] = '"great movie,pos', 'she said "bad,neg'
    for name, delim in (("d.csv", ","), ("d.tsv", "\t")):
        p = write(tmp_path / name, "t,y\n".replace(",", delim) + "\n".join(r.replace(",", delim) for r in rows))
        with pytest.raises(PipelineError, match=r"the row on line 7 opens a quote that a stray quote on a later line "
                                                r"closes, so lines 7-37 would be read as one field and the rows "
                                                r"between them lost. Write a quote inside a text as two"):
            build_splits(cfg_for(p, tmp_path, delimiter=delim))
    # quoted fields over several lines written right, with doubled quotes and Windows line ends, still read
    rows[5], rows[35] = '"great\r\nmovie, ""really"",\r\n\r\nsaid ""I""",pos', '"she said\r\n""bad""",neg'
    s = build_splits(cfg_for(write(tmp_path / "ok.csv", "t,y\r\n" + "\r\n".join(rows) + "\r\n"), tmp_path))
    texts = {ex["text"] for split in ("train", "validation", "test") for ex in s[split]}
    assert len(texts) == 40 and 'great movie, "really", said "I"' in texts and 'she said "bad"' in texts


def test_a_header_repeated_inside_the_file_is_refused(tmp_path):
    """Two CSV files joined with their headers (cat a.csv b.csv, each maybe with its BOM): the second header became an
    example whose label is the column name, a class of one warned about only as too rare to hold out."""
    half = "t,y\n" + "\n".join(ROWS[:20]) + "\n"
    for name, text in (("cat.csv", half + "t,y\n" + "\n".join(ROWS[20:]) + "\n"),
                       ("bom.csv", "\ufeff" + half + "\ufeff" + "t,y\n" + "\n".join(ROWS[20:]) + "\n")):
        with pytest.raises(PipelineError, match=r"row 21 \(line 22\) repeats the header \(t,y\): files joined with "
                                                r"their header lines \(cat a.csv b.csv\)\? Delete that line"):
            build_splits(cfg_for(write(tmp_path / name, text), tmp_path))


def test_a_line_above_the_header_is_named(tmp_path):
    """Excel's "sep=;" line said "no column 't' ... Columns found: , sep="; a title line above the header blamed an
    unquoted comma in row 1."""
    body = "t;y\n" + "\n".join(r.replace(",", ";") for r in ROWS) + "\n"
    p = write(tmp_path / "excel.csv", "sep=;\n" + body)
    with pytest.raises(PipelineError, match=r"excel.csv: line 1 'sep=;' is a hint for Excel, not the header naming the "
                                            r"columns: delete that line and set data.delimiter = ';'$"):
        build_splits(cfg_for(p, tmp_path))
    with pytest.raises(PipelineError, match=r"'sep=;' is a hint for Excel, not the header naming the columns: delete "
                                            r"that line$"):
        build_splits(cfg_for(p, tmp_path, delimiter=";"))
    assert build_splits(cfg_for(write(p, body), tmp_path, delimiter=";"))["labels"] == ["neg", "pos"]  # the fix
    p = write(tmp_path / "title.csv", "Reviews exported 2026\nt,y\n" + "\n".join(ROWS) + "\n")
    with pytest.raises(PipelineError, match=r"title.csv: the header line 'Reviews exported 2026' has 1 field, but "
                                            r"row 1 \(line 2\) has 2: is that line a title or a comment above the "
                                            r"header\? Delete it"):
        build_splits(cfg_for(p, tmp_path))


def test_unnamed_columns_are_not_duplicates(tmp_path):
    """A spreadsheet's trailing empty cells ("t,y,,") make unnamed columns, which no setting reads: refused before
    as a column named twice."""
    p = write(tmp_path / "d.csv", "t,y,,\n" + "\n".join(r + ",," for r in ROWS) + "\n")
    assert build_splits(cfg_for(p, tmp_path))["labels"] == ["neg", "pos"]


def test_a_lfs_pointer_or_a_web_page_in_place_of_the_data_is_named(tmp_path):
    """A clone without its LFS files, or a download that saved the page around the file: "no column 't' ... Columns
    found: version https://git-lfs.github.com/spec/v1", a Parquet reader's footer error, or (a corpus) trained."""
    pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b125"
               "8daaa5e2ca24d17e2393\nsize 12345\n")
    lfs = (r"is a Git LFS pointer, not a {} \(data.source = \"{}\"\): the repository was cloned or downloaded "
           r"without its large files: run git lfs pull in it")
    for source, what, name in (("csv", "CSV file", "d.csv"), ("jsonl", "JSON Lines file", "d.jsonl"),
                               ("parquet", "Parquet file", "d.parquet")):
        with pytest.raises(PipelineError, match=lfs.format(what, source)):
            build_splits(cfg_for(write(tmp_path / name, pointer), tmp_path, source=source))
    (tmp_path / "corpus").mkdir()
    write(tmp_path / "corpus" / "a.txt", "a document\n\nof two paragraphs\n")
    write(tmp_path / "corpus" / "b.txt", pointer)
    with pytest.raises(PipelineError, match=r"b.txt is a Git LFS pointer, not a text file \(data.source = \"text\"\)"):
        build_lm_splits(lm_cfg(tmp_path / "corpus"))
    page = "\n<!DOCTYPE html>\n<html lang=\"en\"><head><title>d.csv</title></head><body>t,y</body></html>\n"
    with pytest.raises(PipelineError, match=r"d.csv is a web page \(HTML\), not a CSV file \(data.source = \"csv\"\): "
                                            r"the download saved the page that shows the file: download the raw file"):
        build_splits(cfg_for(write(tmp_path / "d.csv", page), tmp_path))


def test_a_json_file_given_as_json_lines_is_named_with_its_conversion(tmp_path):
    """One JSON array (on one line or pretty-printed) or objects spread over lines: "expected a JSON object per line,
    got list" or "line 1: not valid JSON", with no word of what the file is."""
    objects = [{"t": r.split(",")[0], "y": r.split(",")[1]} for r in ROWS]
    for indent in (None, 2):
        p = write(tmp_path / "d.json", json.dumps(objects, indent=indent))
        with pytest.raises(PipelineError, match=r"d.json is one JSON array, but JSON Lines needs one object per line: "
                                                r"convert it, e.g. jq -c '.\[\]' d.json > d.jsonl, and point "):
            build_splits(cfg_for(p, tmp_path, source="jsonl"))
    p = write(tmp_path / "d.jsonl", "\n".join(json.dumps(o, indent=2) for o in objects))
    with pytest.raises(PipelineError, match=r"d.jsonl holds JSON spread over several lines \(pretty-printed: its first "
                                            r"line is '\{'\), but .* jq -c '.' d.jsonl > d-lines.jsonl, and point"):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))
    # a bad line further down is that line's error, as before
    p = write(tmp_path / "late.jsonl", "\n".join([json.dumps(o) for o in objects[:3]] + ["{"]))
    with pytest.raises(PipelineError, match=r"late.jsonl:4: not valid JSON"):
        build_splits(cfg_for(p, tmp_path, source="jsonl"))


def test_a_text_column_of_numbers_is_refused(tmp_path):
    """data.text_column on an id or score column: a JSON Lines number is refused as not a string, a CSV one was read
    as text and trained."""
    p = write(tmp_path / "d.csv", "id,t,y\n" + "\n".join(f"{i},{r}" for i, r in enumerate(ROWS)) + "\n")
    with pytest.raises(PipelineError, match=r"every text in column 'id' \(data.text_column\) is a number \(e.g. '0'\): "
                                            r"it looks like an id, a score or a label, not text"):
        build_splits(cfg_for(p, tmp_path, text_column="id"))
    assert build_splits(cfg_for(p, tmp_path))["labels"] == ["neg", "pos"]


def test_zero_width_characters_in_a_label_are_no_second_class(tmp_path):
    """'pos\u200b' (pasted from a web page) was a class of its own beside 'pos', shown the same everywhere; a label
    of zero-width characters alone is a missing one."""
    rows = [r + ("\u200b" if i % 4 == 1 else "") for i, r in enumerate(ROWS)]
    p = write(tmp_path / "d.csv", "t,y\n" + "\n".join(rows) + "\n")
    assert build_splits(cfg_for(p, tmp_path))["labels"] == ["neg", "pos"]
    rows[5] = "text number 5 is here,\u200b"
    p = write(tmp_path / "d.csv", "t,y\n" + "\n".join(rows) + "\n")
    with pytest.raises(PipelineError, match=r"1 row\(s\) have no label in column 'y' \(empty\): row\(s\) 6"):
        build_splits(cfg_for(p, tmp_path))


def test_folder_given_as_a_data_file(tmp_path):
    with pytest.raises(PipelineError, match="is a folder; give a file in data.train_path"):
        build_splits(cfg_for(tmp_path, tmp_path))


def test_text_column_given_as_the_label_column(tmp_path):
    p = write(tmp_path / "d.csv", "t,y\n" + "\n".join(ROWS) + "\n")
    with pytest.raises(PipelineError, match=r"label column 't' \(data.label_column\) has 40 distinct values in 40 rows"
                                            r".*data.text_column \(now 'y'\)"):
        build_splits(cfg_for(p, tmp_path, text_column="y", label_column="t"))


def test_few_shot_intents_are_labels_not_free_text(tmp_path):
    """Many distinct multi-word labels, one or two examples each, with longer texts: intents, not swapped columns."""
    intents = [f"book a flight {i}" for i in range(12)]
    rows = [f"i would like to {intent} next week please,{intent}" for intent in intents]
    p = write(tmp_path / "d.csv", "t,y\n" + "\n".join(rows) + "\n")
    test = write(tmp_path / "test.csv", p.read_text())  # a file of its own: one file as two splits is refused
    s = build_splits(cfg_for(p, tmp_path, text_column="t", label_column="y", dedupe_across_splits=False,
                             test_fraction=0.0, validation_fraction=0.0, test_path=str(test)))
    assert len(s["labels"]) == 12


def test_too_small_to_split_names_size_and_fractions(tmp_path):
    p = write(tmp_path / "d.csv", "t,y\nfirst text,a\nsecond text,b\nthird text,a\n")
    with pytest.raises(PipelineError, match=r"test split is empty: the data is too small to split \(3 examples after "
                                            r"cleaning; data.test_fraction = 0.1"):
        build_splits(cfg_for(p, tmp_path))
    one = write(tmp_path / "one.txt", "just one paragraph")
    with pytest.raises(PipelineError, match=r"too small to split \(1 documents .* data.test_fraction = 0.5"):
        build_lm_splits(lm_cfg(one, test_fraction=0.5))


def test_too_few_blocks_to_hold_out_name_lm_split_blocks(tmp_path):
    """A lone document cut into fewer blocks than there are splits: every held-out split takes a whole block, so
    the old advice (lower data.test_fraction / data.validation_fraction) could not help."""
    def error(path, blocks):
        cfg = config_from_dict({"run": {"task": "generation"}, "data": {"source": "text", "train_path": str(path)},
                                "lm": {"split_blocks": blocks}}, "test")
        with pytest.raises(PipelineError) as e:
            build_lm_splits(cfg)
        return str(e.value)

    fix = ("or give data.test_path and data.validation_path (or set data.validation_fraction = 0): a split held out "
           "of the blocks takes at least one whatever its fraction, so lower fractions cannot help")
    five = write(tmp_path / "five.txt", "\n\n".join(f"paragraph {i}" for i in range(5)))
    assert error(five, 1) == (
        "the train split is empty: the data is too small to split (1 documents (or blocks of them) after cleaning; "
        "data.test_fraction = 0.1 and data.validation_fraction = 0.1 leave train 0, validation 0, test 1). Give more "
        f"documents (or blocks of them), raise lm.split_blocks (now 1), {fix}")
    assert error(five, 2).endswith(f"validation 1, test 1). Give more documents (or blocks of them), raise "
                                   f"lm.split_blocks (now 2), {fix}")
    # one line: no more blocks to cut, whatever lm.split_blocks says
    assert error(write(tmp_path / "line.txt", "one line only\n"), 20).endswith(
        f"Give more documents (or blocks of them), more paragraphs or lines in them, {fix}")
    build_lm_splits(config_from_dict({"run": {"task": "generation"}, "lm": {"split_blocks": 3},  # the fix
                                      "data": {"source": "text", "train_path": str(five)}}, "test"))


def test_nul_bytes_in_a_corpus_are_named_once(tmp_path, caplog):
    """NUL bytes (a binary file, UTF-16 text) in a few documents passed without a word: one mostly made of them is
    refused, as binary data."""
    (tmp_path / "c").mkdir()
    for i in range(4):
        write(tmp_path / "c" / f"{i}.txt", f"document {i}\n")
    write(tmp_path / "c" / "bin.txt", b"some text\x00\x00 and more of it\n")
    write(tmp_path / "v.txt", "held out\x00\n")
    with caplog.at_level(logging.WARNING):
        s = build_lm_splits(lm_cfg(tmp_path / "c", validation_path=str(tmp_path / "v.txt")))
    warned = [r.getMessage() for r in caplog.records if "NUL" in r.getMessage()]
    assert warned == ["WARNING: text data: 2 document(s) hold NUL (\\x00) bytes, a sign of a binary file or of UTF-16 "
                      "text: bin.txt in train (2 bytes), v.txt in validation (1 byte); remove those files, convert "
                      "UTF-16 ones to UTF-8 (iconv -f utf-16 -t utf-8 FILE) or delete the NUL bytes "
                      "(tr -d '\\000' < FILE)"]
    assert s["validation"][0]["text"] == "held out\x00\n"  # kept as read: named, not changed


def test_hidden_files_of_a_corpus_folder_are_no_documents(tmp_path, caplog):
    """macOS's "._name.txt" metadata twins (a corpus copied from a Mac) refused the corpus as binary data, advising
    iconv; a .ipynb_checkpoints or .git folder's text files were trained as documents."""
    (tmp_path / "c" / ".ipynb_checkpoints").mkdir(parents=True)
    (tmp_path / "c" / ".git").mkdir()
    for i in range(8):
        write(tmp_path / "c" / f"{i}.txt", f"document {i}\n")
        write(tmp_path / "c" / f"._{i}.txt", b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + b"\x00" * 4000)
        write(tmp_path / "c" / ".ipynb_checkpoints" / f"{i}-checkpoint.txt", f"document {i}\n")
    write(tmp_path / "c" / ".git" / "description.txt", "Unnamed repository; edit this file to name it.\n")
    with caplog.at_level(logging.INFO):
        s = build_lm_splits(lm_cfg(tmp_path / "c"))
    names = sorted(doc["name"] for split in ("train", "validation", "test") for doc in s[split])
    assert names == [f"{i}.txt" for i in range(8)]
    assert "17 hidden text file(s) left out (._0.txt, ._1.txt, " in caplog.text
    hidden = tmp_path / "h"
    hidden.mkdir()
    write(hidden / ".notes.txt", "a hidden note\n")
    with pytest.raises(PipelineError, match=r"holds no .txt/.md/.text files but hidden ones; point data.\*_path"):
        build_lm_splits(lm_cfg(hidden))


def test_documents_repeated_within_a_split_are_named(tmp_path, caplog):
    """A corpus folder holding one text twice in the same split weighed it double without a word; it is kept, as
    classification keeps a text repeated within a split (across splits, dedupe_across_splits drops it)."""
    (tmp_path / "c").mkdir(), (tmp_path / "t").mkdir()
    for i in range(4):
        write(tmp_path / "c" / f"{i}.txt", f"document {i}\n")
    write(tmp_path / "c" / "copy of 1.txt", "document 1\n")
    write(tmp_path / "t" / "a.txt", "held out\n")
    write(tmp_path / "t" / "b.txt", "held out\n")
    with caplog.at_level(logging.WARNING):
        s = build_lm_splits(lm_cfg(tmp_path / "c", test_path=str(tmp_path / "t"), validation_fraction=0.0))
    assert len(s["train"]) == 5 and len(s["test"]) == 2
    warned = [r.getMessage() for r in caplog.records if "repeat" in r.getMessage()]
    assert warned == ["WARNING: text data: documents repeat others of their own split (1 in train, 1 in test; e.g. "
                      "'copy of 1.txt' = '1.txt'): kept, so that text counts more than once in training or scoring; "
                      "remove the copies unless that is meant"]


# --- tokenizer: the library's long-sequence false alarm, replaced by a count ---

def _tokenizer(tmp_path):
    from tests.conftest import write_tokenizer

    tok = write_tokenizer(tmp_path / "tok")
    tok.model_max_length = 8
    return tok


def test_encode_is_silent_and_the_stage_reports_its_truncations(tmp_path, caplog):
    from distill.batching import encode
    from pipeline.tasks.common import reports_truncation

    tok = _tokenizer(tmp_path)
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    hf_log = logging.getLogger("transformers.tokenization_utils_base")
    hf_log.addHandler(handler)

    @reports_truncation
    def step(ctx):
        encode(tok, ["good " * 20, "bad", "good bad " * 10], 6, where="training texts")
        tok("good " * 20)  # a library call elsewhere (the bench's token streams): its warning is dropped too
        return {"done": True}

    try:
        with caplog.at_level(logging.INFO):
            summary = step(SimpleNamespace(name="distill"))
        assert [r for r in seen if "Token indices sequence length" in r.getMessage()] == []
        tok2 = _tokenizer(tmp_path / "b")
        tok2("good " * 20)  # outside a step the library behaves as before
        assert any("Token indices sequence length" in r.getMessage() for r in seen)
    finally:
        hf_log.removeHandler(handler)
    assert summary == {"done": True, "truncated": {"training texts": {"texts": 3, "truncated": 2, "max_length": 6}}}
    assert "distill: 2 text(s) longer than max_length were truncated (training texts: 2 of 3 at 6 tokens)" in caplog.text


def test_cli_data_stage_prints_one_line_and_writes_nothing(tmp_path, capsys):
    rows = ROWS[:]
    rows[2] = "fine, really,neg"
    csv_path = write(tmp_path / "d.csv", "\ufefft,y\n" + "\n".join(rows) + "\n")
    cfg = write(tmp_path / "c.toml", f'[run]\nruns_dir = "{tmp_path / "runs"}"\n[data]\nsource = "csv"\n'
                                     f'train_path = "{csv_path}"\ntext_column = "t"\nlabel_column = "y"\n')
    assert main(["data", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "row 3 (line 4) has 3 fields" in err[0]
    assert not (tmp_path / "runs" / "demo" / "data" / "split.json").exists()


def test_a_nan_reference_logit_fails_verify_instead_of_passing_every_check(tmp_path):
    """A NaN compared with anything is False: one NaN in samples.json's reference made verify-bundle skip every
    logit of that file and say OK. It is not a number for the metadata checks, and off by any measure."""
    from pipeline.tasks.classification.logits_check import compare
    from pipeline.verify_bundle_meta import is_number

    assert not is_number(float("nan")) and not is_number(float("inf")) and is_number(1.5) and not is_number(True)
    meta = {"labels": ["neg", "pos"]}
    samples = [{"reference_logits": {"m.ort": [float("nan"), 0.0]}, "expected_label": "pos"},
               {"reference_logits": {"m.ort": [100.0, -100.0]}, "expected_label": "neg"}]
    with pytest.raises(PipelineError, match="m.ort logit neg of sample 1 is 1, its reference is nan"):
        compare(tmp_path, meta, samples, "m.ort", [[1.0, 0.0], [100.0, -100.0]])


@pytest.mark.parametrize("argv", [["verify-bundle", ""], ["verify-bundle", "--config", ""]])
def test_verify_bundle_with_an_empty_argument_verifies_nothing(argv, capsys):
    """An unset "$DIR" used to verify the demo's published bundles and say OK."""
    assert main(argv) == 2
    assert "is empty (an unset variable?)" in capsys.readouterr().err


def test_odd_manifests_and_names_are_one_line(tmp_path, capsys):
    from pipeline.manifest import read_manifest

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "manifest.json").write_text(json.dumps(
        {"config_hash": "x", "summary": {}, "inputs": {}, "outputs": {}, "notes": 5}))
    assert read_manifest(tmp_path / "s") is None  # a damaged manifest is an unfinished stage, not a TypeError later
    for value, what in (('"a\\u0000b"', "run.name"), ('"' + "x" * 300 + '"', "run.name"), ('"a\\nb"', "run.name"),
                        ('"a\\tb"', "run.name"), ('"demo "', "run.name"), ('" demo"', "run.name")):
        with pytest.raises(PipelineError, match=f"'{what}' must be a plain folder name"):
            load_config(None, [f"{what}={value}"])
    with pytest.raises(PipelineError, match=r"'run.runs_dir' = 'xxx.*'\.\.\. is not a usable path \(File name too long\)"):
        load_config(None, ['run.runs_dir="' + "x" * 5000 + '"'])
    # an unset variable, a NUL byte, a symlink loop: one line each (an empty runs_dir wrote into the current
    # folder; the other two were tracebacks)
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    for item, message in (("run.runs_dir=", "'run.runs_dir' is empty (an unset variable?); point it at a folder, "
                                            "e.g. \"runs\""),
                          ('bundle.dist_dir=" "', "'bundle.dist_dir' is empty"),
                          ('run.runs_dir="r\\u0000"', "'run.runs_dir' = 'r\\x00' is not a usable path (a NUL byte"),
                          ('bundle.dist_dir="d\\u0000"', "'bundle.dist_dir' = 'd\\x00' is not a usable path"),
                          (f"run.runs_dir={tmp_path / 'loop1'}", f"'run.runs_dir' = '{tmp_path / 'loop1'}' is not a "
                                                                  f"usable path (Symlink loop"),
                          (f"bundle.dist_dir={tmp_path / 'loop2'}", "is not a usable path (Symlink loop")):
        with pytest.raises(PipelineError) as e:
            load_config(None, [item])
        assert message in str(e.value), (item, str(e.value))


def test_permission_denied_is_one_line(monkeypatch, capsys):
    import pipeline.config

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", "/srv/cfg.toml")

    monkeypatch.setattr(pipeline.config, "load_config", denied)
    assert main(["show-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: permission denied on /srv/cfg.toml (Permission denied)") and "Traceback" not in err


def test_an_adb_that_is_no_adb_is_named(tmp_path):
    from eval.phone_android import devices

    with pytest.raises(PipelineError, match=r"`/bin/false devices` failed: exit code 1, no output; is /bin/false "):
        devices("/bin/false")
    (tmp_path / "adb").write_text("not a program")
    with pytest.raises(PipelineError, match=r"devices` cannot run \(Permission denied\)"):
        devices(str(tmp_path / "adb"))


def test_a_document_in_two_splits_leaves_training(tmp_path, caplog):
    """A corpus holding one text twice (book.txt, book (1).txt) scored the test split on text the student had
    trained on: generation ignored data.dedupe_across_splits."""
    train, test = tmp_path / "train", tmp_path / "test"
    train.mkdir(), test.mkdir()
    for i in range(6):
        write(train / f"{i}.txt", f"document {i}\n\nsome lines of it\n")
    write(test / "copy.txt", "document 3\n\nsome lines of it\n")
    write(test / "own.txt", "a held-out text\n")
    with caplog.at_level(logging.WARNING):
        s = build_lm_splits(lm_cfg(train, test_path=str(test), validation_fraction=0.0))
    assert "1 from train" in caplog.text
    assert [d["name"] for d in s["train"]] == ["0.txt", "1.txt", "2.txt", "4.txt", "5.txt"]
    assert s["info"]["dedupe_across_splits"] == {"enabled": True, "shared_texts": {
        "test & train": 0, "validation & train": 0, "test & validation": 0},
        "removed": {"train": ["3.txt"], "validation": [], "test": []}}
    kept = build_lm_splits(lm_cfg(train, test_path=str(test), validation_fraction=0.0, dedupe_across_splits=False))
    assert len(kept["train"]) == 6 and kept["info"]["dedupe_across_splits"]["shared_texts"]["test & train"] == 1
    assert "dedupe_across_splits" not in build_lm_splits(lm_cfg(train, validation_fraction=0.0))["info"]
    write(test / "all.txt", "".join(f"document {i}\n\nsome lines of it\n" for i in range(6)))
    for i in range(6):
        write(test / f"c{i}.txt", f"document {i}\n\nsome lines of it\n")
    with pytest.raises(PipelineError, match="every training document is also in the test or validation split.*"
                                            "provide training documents of their own$"):
        build_lm_splits(lm_cfg(train, test_path=str(test), validation_fraction=0.0))
