"""Shared fixtures: a tiny random-weight BERT encoder saved as a Hugging Face folder (the "pretrained
teacher" of the unit tests), a small synthetic sentiment CSV, and a tiny run config pointing at both.
Everything here builds in a second or two; the packaged demo models are never used by tests."""
from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest
import torch

POS = ["good", "great", "love", "happy", "excellent", "nice", "wonderful", "fun"]
NEG = ["bad", "awful", "hate", "sad", "terrible", "poor", "boring", "ugly"]
NEU = ["table", "car", "road", "window", "paper", "city", "train", "phone"]
FILLER = ["the", "a", "this", "is", "was", "my", "day", "movie", "food", "really", "very", "so"]
WORDS = POS + NEG + NEU + FILLER
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LABEL_WORDS = {"positive": POS, "negative": NEG, "neutral": NEU}


def make_texts(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Texts whose label is decided by which word list dominates: learnable by every model here."""
    rng = random.Random(seed)
    out = []
    labels = sorted(LABEL_WORDS)
    for i in range(n):
        label = labels[i % 3]
        words = rng.choices(FILLER, k=rng.randint(2, 8)) + rng.choices(LABEL_WORDS[label], k=rng.randint(1, 3))
        rng.shuffle(words)
        out.append((" ".join(words), label))
    return out


def write_tokenizer(folder: Path):
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(SPECIAL + WORDS) + "\n")
    tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(folder)
    return tok


def tiny_bert_config(**kw):
    from transformers import BertConfig

    base = dict(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=128, pad_token_id=0)
    base.update(kw)
    return BertConfig(**base)


def save_tiny_bert(folder: Path) -> Path:
    """A 'pretrained' encoder folder (BertModel, random weights, seed 0) with its tokenizer."""
    from transformers import BertModel

    torch.manual_seed(0)
    BertModel(tiny_bert_config()).save_pretrained(folder, safe_serialization=True)
    write_tokenizer(folder)
    return folder


def write_tiny_csv(path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["review", "sentiment"])
        w.writerows(make_texts(600))
    return path


def tiny_run_config(bert_dir: Path, csv_path: Path, runs_dir: Path) -> dict:
    """The classification stages of a run small enough to finish in seconds."""
    return {
        "run": {"name": "tiny", "seed": 3, "runs_dir": str(runs_dir), "threads": 1},
        "data": {"source": "csv", "train_path": str(csv_path), "text_column": "review", "label_column": "sentiment",
                 "validation_fraction": 0.1, "test_fraction": 0.2},
        "teacher": {"model": str(bert_dir), "max_length": 32, "epochs": 6.0, "batch_size": 16, "lr": 2e-3,
                    "eval_batch_size": 32},
        "augment": {"copies": 1},
        "student": {"layers": 2, "hidden": 16, "heads": 2, "ffn": 32, "max_length": 32},
        "distill": {"epochs": 3.0, "batch_size": 16, "lr": 3e-3},
        "baseline": {"embed_dim": 16, "hidden": 16, "epochs": 3.0, "batch_size": 16, "lr": 5e-3},
    }


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def tiny_csv(tmp_path_factory) -> Path:
    return write_tiny_csv(tmp_path_factory.mktemp("tiny_data") / "reviews.csv")


@pytest.fixture
def tiny_cfg_dict(tiny_bert_dir, tiny_csv, tmp_path) -> dict:
    """The tiny run with the layer-transfer losses on, so every distillation path runs."""
    cfg = tiny_run_config(tiny_bert_dir, tiny_csv, tmp_path / "runs")
    cfg["distill"].update(hidden_weight=1.0, attention_weight=1.0, intermediate_epochs=1.0)
    return cfg


@pytest.fixture
def tiny_cfg(tiny_cfg_dict):
    from pipeline.config import config_from_dict

    return config_from_dict(tiny_cfg_dict, "tiny-test-config")


def browser_or_skip(what: str) -> None:
    """Skip with the reason the browser targets themselves report (eval/browser.py), printed for -rs."""
    from eval.browser import unavailable_reason

    why = unavailable_reason()
    if why:
        print(f"\n{what} skipped: {why}")
        pytest.skip(why)


# What a stage may read without declaring it: where the run lives and how many threads it trains on change no
# result (pipeline.config ALWAYS_READ has the two run keys that do)
UNDECLARED_OK = ("run.name", "run.runs_dir", "run.threads")


class _Items:
    """A list setting of which the step declares single items ("lm.prompts[0]"): records "key[i]" for an item
    read, and the whole key for any other use. Not a list: code that would read it another way (json.dumps, an
    isinstance test) fails the test instead of passing unrecorded."""

    def __init__(self, key: str, value, seen: set):
        self._key, self._value, self._seen = key, value, seen

    def _all(self):
        self._seen.add(self._key)
        return self._value

    def __getitem__(self, i):
        if isinstance(i, int) and i >= 0:
            self._seen.add(f"{self._key}[{i}]")
            return self._value[i]
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())

    def __bool__(self):
        return bool(self._all())

    def __eq__(self, other):
        return self._all() == other

    def __repr__(self):
        return repr(self._all())


def _recording(cfg, seen: set, itemized: frozenset = frozenset()):
    """A copy of cfg whose sections add every "section.key" read from them to seen; a key in itemized is read
    through _Items, which records the single items read."""
    from dataclasses import fields, replace

    from pipeline.config import SECTIONS

    sections = {}
    for name, cls in SECTIONS.items():
        obj, keys = getattr(cfg, name), {f.name for f in fields(cls)}

        def read(self, attr, _name=name, _keys=keys):
            value = object.__getattribute__(self, attr)
            if f"{_name}.{attr}" in itemized:
                return _Items(f"{_name}.{attr}", value, seen)
            if attr in _keys:
                seen.add(f"{_name}.{attr}")
            return value
        copy = object.__new__(type(cls.__name__, (type(obj),), {"__getattribute__": read}))
        copy.__dict__.update(obj.__dict__)
        sections[name] = copy
    return replace(cfg, **sections)


@pytest.fixture(autouse=True)
def stages_read_only_declared_keys(monkeypatch):
    """Every stage any test runs through pipeline.stage reads only the config keys its step declares (Step.reads,
    "-" entries included): a key read but not declared would leave the stage's result stale when it changes.
    The check rides along every test that runs stages, tiny end-to-end runs included."""
    from pipeline import stage as st
    from pipeline.config import read_keys, unkeyed_reads
    from pipeline.tasks import task_of

    real, runs = st.StageContext, []

    def context(cfg, name, *args, **kwargs):
        seen: set = set()
        step = task_of(cfg).step(name)
        runs.append((step, name, task_of(cfg).name, seen))
        # a list setting the step declares by items only ("lm.prompts[0]"), not as a whole
        declared = {*read_keys(step.reads), *unkeyed_reads(step.reads)}
        itemized = frozenset(k.split("[")[0] for k in declared if "[" in k) - declared
        return real(_recording(cfg, seen, itemized), name, *args, **kwargs)
    monkeypatch.setattr(st, "StageContext", context)
    yield
    for step, name, task, seen in runs:
        declared = {*read_keys(step.reads), *unkeyed_reads(step.reads), *UNDECLARED_OK}
        assert seen <= declared, (f"{task} step '{name}' reads {sorted(seen - declared)} without declaring them "
                                  f"in its Step.reads")


def use_toy_stages(monkeypatch, stages):
    """Replace the stage graph and the classification task's steps with toy ones for runner tests.
    stages: [(name, fn, deps, sections)]."""
    from dataclasses import replace

    from pipeline import stage as st
    from pipeline.task import Step
    from pipeline.tasks import TASKS

    monkeypatch.setattr(st, "STAGES", {n: st.Stage(n, deps) for n, _, deps, _ in stages})
    steps = {n: Step(fn, secs) for n, fn, _, secs in stages}
    monkeypatch.setitem(TASKS, "classification", replace(TASKS["classification"], steps=steps))
    return st.STAGES


def negate_logits(path) -> None:
    """A file that computes the wrong answer on purpose: its logits negated (argmax becomes argmin)."""
    import onnx
    from onnx import helper

    m = onnx.load(str(path))
    producer = next(n for n in m.graph.node if "logits" in n.output)
    producer.output[list(producer.output).index("logits")] = "logits_before_neg"
    m.graph.node.append(helper.make_node("Neg", ["logits_before_neg"], ["logits"], name="broken_on_purpose"))
    onnx.save(m, str(path))
