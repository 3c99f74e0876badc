"""The export/ error paths a user can reach with bad input, each driven with realistic input at the highest cheap
level and held to one PipelineError that names the problem and the fix:

- the bundle's choice (export/bundle.py choose): bundle.model whose every file failed its check, or that has no
  file at all; bundle.variant that the quantize stage skipped for the model (a teacher type ORT has no fusions
  for); rows that carry no accuracy (a variants.json from before the stages scored every file);
- the lossless check (export/checks.py) against a quantize.lossless_atol tighter than float32 arithmetic;
- the Hugging Face layout (export/hf_layout.py): a tokenizer folder without tokenizer.json, a graph that is not a
  decoder, a decoder with float16 logits, a tokenizer and config with no eos token (and that the fixes the
  messages name work);
- a truncated ONNX file (export/ort_session.py), as the stages and verify-bundle load it;
- the string-in model (export/string_model.py) over a classifier without the attention_mask input.

Paths the config refuses first (unknown Core ML variant, quantize.static_float part, bundle.dist_dir inside the
run) are tested at load time elsewhere (tests/test_validation.py, tests/test_static_quant.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_texts, tiny_bert_config, write_tokenizer
from pipeline.errors import PipelineError

LABELS = ["negative", "neutral", "positive"]


# --- export/bundle.py: the bundle's choice against the rows the stages wrote ---

def _ort_row(model: str, variant: str, accuracy: float | None = 0.8, failed: str = "") -> dict:
    row = {"model": model, "variant": variant, "format": "ort", "file": f"export/{model}/{variant}.ort",
           "status": "failed" if failed else "passed", "size_bytes": 1000, "accuracy": accuracy,
           "check": {"kind": "argmax_agreement", "passed": not failed, **({"reason": failed} if failed else {})}}
    if accuracy is None:
        del row["accuracy"]
    return row


RESULTS = {"plan": {"headline_length": 64}, "targets": {"mobile-cpu": {"proxy": "host"}}, "rows": []}
INT8_FAILED = ("student int8-dynamic (export/student/int8-dynamic.ort vs int8-dynamic.onnx): argmax agrees with its "
               "source int8-dynamic.onnx on only 50.0% of 64 test texts; the minimum is 90.0% "
               "(quantize.min_argmax_agreement)")


def test_bundle_auto_when_every_file_of_the_model_failed_names_the_checks():
    """export.ort_variants = ["int8-dynamic"] and the student's int8 file failed its agreement check: the bundle
    (bundle.variant = auto) has no student file to ship. It said "add it to quantize.models", where the student
    already was; now it names the failed check and fixes that work."""
    from export.bundle import choose

    rows = [_ort_row("student", "int8-dynamic", failed=INT8_FAILED), _ort_row("lstm", "int8-dynamic")]
    with pytest.raises(PipelineError) as e:
        choose(rows, RESULTS, "auto", "auto", 0.01, "configs/my.toml")
    msg = str(e.value)
    assert "student" in msg and "quantize.models" not in msg, msg
    assert INT8_FAILED in msg  # which file, and the numbers that failed it
    assert "'fp32'" in msg and "export.ort_variants" in msg and "bundle.model" in msg and "lstm" in msg, msg
    assert "--config configs/my.toml" in msg
    # failed in the quantize stage (no .ort was made from it): the same, from the bundle stage's failed map
    with pytest.raises(PipelineError, match=r"student.*int8-dynamic.onnx failed"):
        choose([_ort_row("lstm", "int8-dynamic")], RESULTS, "auto", "auto", 0.01, "c.toml",
               failed={("student", "int8-dynamic"): "student int8-dynamic.onnx failed: 40% agreement"})


def test_bundle_model_with_no_file_at_all_names_both_settings():
    """bundle.model = lstm with export.ort_variants = ["optimized"]: the LSTM is in quantize.models but no .ort
    of it is made (optimized is transformer-only). The message names the model, what was made, and both ways
    to get a file."""
    from export.bundle import choose

    with pytest.raises(PipelineError) as e:
        choose([_ort_row("student", "optimized")], RESULTS, "lstm", "auto", 0.01, "c.toml")
    msg = str(e.value)
    assert "no .ort file for model 'lstm'" in msg and "(they have: student)" in msg, msg
    assert "quantize.models" in msg and "export.ort_variants" in msg and "optimized" in msg, msg


def test_bundle_variant_the_quantize_stage_skipped_says_why():
    """bundle.model = teacher, bundle.variant = optimized with a DeBERTa teacher: ORT fuses nothing in it, so the
    quantize stage skips its optimized file (results.json's not_made). The message told the user to add the
    variant to export.ort_variants, where it already was (the config refuses it otherwise); now it gives the
    skip's reason and the variants that were made."""
    from export.bundle import choose

    why = ("teacher -> onnx-optimized: ORT's transformer optimizer fused nothing in model type 'deberta' (it has "
           "no fusion patterns for it); the other variants are made")
    results = {**RESULTS, "not_made": [{"model": "teacher", "variant": "optimized", "reason": why}]}
    rows = [_ort_row("teacher", "fp32"), _ort_row("teacher", "int8-dynamic"), _ort_row("student", "optimized")]
    with pytest.raises(PipelineError) as e:
        choose(rows, results, "teacher", "optimized", 0.01, "c.toml")
    msg = str(e.value)
    assert msg.startswith("bundle.variant = 'optimized'") and why in msg, msg
    assert "fp32, int8-dynamic" in msg and "'auto'" in msg and "add it to export.ort_variants" not in msg, msg
    # a variant the rows simply lack (no reason on record): the settings that make one
    with pytest.raises(PipelineError, match=r"bundle.variant = 'fp16' has no .ort file for teacher \(made: fp32, "
                                            r"int8-dynamic\); add it to export.ort_variants"):
        choose(rows, RESULTS, "teacher", "fp16", 0.01, "c.toml")


def test_bundle_rows_without_accuracy_ask_for_the_quantize_stage():
    """An export/variants.json written before the stages scored every file: no accuracy to choose on."""
    from export.bundle import choose

    rows = [_ort_row("student", "fp32", accuracy=None), _ort_row("student", "int8-dynamic", accuracy=None)]
    with pytest.raises(PipelineError, match=r"the student .ort rows carry no accuracy; run `python -m pipeline "
                                            r"quantize --config c.toml`"):
        choose(rows, RESULTS, "auto", "auto", 0.01, "c.toml")


# --- export/checks.py: a lossless tolerance tighter than float32 ---

@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny BERT classifier folder (loaded), its fp32 ONNX file and its tokenizer folder."""
    from transformers import BertForSequenceClassification

    from distill.models import HFLogits, load_model, save_model
    from export.onnx_export import export_onnx

    root = tmp_path_factory.mktemp("errors_export")
    tok = write_tokenizer(root / "tok")
    torch.manual_seed(0)
    save_model(root / "bert", HFLogits(BertForSequenceClassification(tiny_bert_config(num_labels=3))), tok,
               LABELS, "hf", 32)
    m = load_model(root / "bert", "student")
    export_onnx(m.model, root / "fp32.onnx", 17, "student", m.pad_id, False)
    return m, root / "fp32.onnx", root


def test_lossless_check_names_quantize_lossless_atol(bert):
    """quantize.lossless_atol = 1e-12 (the config takes any positive value): the fp32 file's logits differ from
    PyTorch's by float32 rounding, and the quantize stage stops naming the setting and the texts it ran on."""
    from export.checks import check_inputs, max_abs_diff_check, ort_runner, torch_runner
    from export.ort_session import ort_session

    m, fp32, _ = bert
    inputs = check_inputs(m.tokenizer, [t for t, _ in make_texts(20, seed=1)], m.max_length, wanted=16)
    run, ref = ort_runner(ort_session(fp32)), torch_runner(m.model)
    assert max_abs_diff_check(run, ref, inputs, 1e-4, "student fp32")["passed"]  # the default passes
    with pytest.raises(PipelineError) as e:
        max_abs_diff_check(run, ref, inputs, 1e-12, "student fp32 (quantize/student/fp32.onnx)")
    msg = str(e.value)
    assert msg.startswith("student fp32 (quantize/student/fp32.onnx): max abs difference of logits"), msg
    assert "exceeds the tolerance 1e-12 (quantize.lossless_atol) on 20 test texts" in msg, msg


# --- export/ort_session.py: a file onnxruntime cannot load ---

def test_truncated_onnx_file_is_one_error_naming_the_file_and_the_fix(bert, tmp_path):
    """A model file cut short (a full disk, an interrupted copy): the stages and verify-bundle say which file
    and how to get it back, not onnxruntime's traceback."""
    from export.ort_session import ort_session
    from pipeline.tasks.classification.replay import ort_logits

    _, fp32, _ = bert
    cut = tmp_path / "student-int8-dynamic.onnx"
    cut.write_bytes(fp32.read_bytes()[: fp32.stat().st_size // 2])
    with pytest.raises(PipelineError) as e:
        ort_session(cut)
    msg = str(e.value)
    assert msg.startswith(f"{cut}: onnxruntime cannot load it (") and msg.endswith("re-run the stage that wrote it")
    assert "\n" not in msg  # ORT's first line only
    spec = {"file": "model/student-int8-dynamic.onnx", "inputs": [{"name": "input_ids", "type": "tensor(int64)"}],
            "outputs": [{"name": "logits"}]}
    with pytest.raises(PipelineError, match=r"^model/student-int8-dynamic.onnx: onnxruntime cannot load it \(.*\); "
                                            r"restore the file or rebuild the bundle with `make bundle`$"):
        ort_logits(cut, spec, [{"token_ids": [2, 5, 3]}])


# --- export/hf_layout.py ---

def test_hf_layout_refuses_a_tokenizer_folder_without_tokenizer_json(bert, tmp_path):
    """Hugging Face clients (transformers.js, Optimum) read tokenizer.json; a tokenizer folder with only
    vocab.txt is refused naming the folder and the missing file, and re-saving the tokenizer (what the quantize
    stage does) gives a folder the layout takes."""
    from transformers import AutoTokenizer

    from export.hf_layout import write_hf_layout

    m, fp32, root = bert
    tok_dir = tmp_path / "tokenizer"
    write_tokenizer(tok_dir)
    (tok_dir / "tokenizer.json").unlink()
    with pytest.raises(PipelineError) as e:
        write_hf_layout(tmp_path / "hf", m.folder, tok_dir, LABELS, 32, {"model.onnx": fp32})
    msg = str(e.value)
    assert msg.startswith(f"{tok_dir} lacks tokenizer.json, which Hugging Face clients need"), msg
    assert "re-run the quantize stage" in msg
    AutoTokenizer.from_pretrained(tok_dir).save_pretrained(tok_dir)  # the quantize stage's save_pretrained
    info = write_hf_layout(tmp_path / "hf", m.folder, tok_dir, LABELS, 32, {"model.onnx": fp32})
    assert "tokenizer.json" in info["tokenizer_files"] and (tmp_path / "hf" / "onnx" / "model.onnx").is_file()


def _decoder(path: Path, ids: str = "input_ids", logits_type: int | None = None, vocab: int = 6) -> Path:
    """A one-Gather 'decoder': ids (1, T) -> logits (1, T, vocab) from a constant table."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    t = TensorProto.FLOAT if logits_type is None else logits_type
    dtype = np.float32 if t == TensorProto.FLOAT else np.float16
    table = numpy_helper.from_array(np.eye(vocab, dtype=dtype), "table")  # (vocab, vocab)
    graph = helper.make_graph([helper.make_node("Gather", ["table", ids], ["logits"], axis=0)], "decoder",
                              [helper.make_tensor_value_info(ids, TensorProto.INT64, [1, "T"])],
                              [helper.make_tensor_value_info("logits", t, [1, "T", vocab])], initializer=[table])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_map_vocab_refuses_a_graph_that_is_not_a_decoder_or_has_float16_logits(tmp_path):
    """The generation bundle maps the quantize stage's decoder onto the teacher's vocabulary: a graph that takes
    no input_ids (a file from elsewhere) and one whose logits are float16 are refused by name, never written."""
    from onnx import TensorProto

    from distill.vocab import VocabMap
    from export.hf_layout import map_vocab

    vmap = VocabMap(np.array([0, 2, 3, 5, 7]), 10, True)  # 5 kept teacher ids + "other" = the graph's 6 rows
    assert map_vocab(_decoder(tmp_path / "ok.onnx"), tmp_path / "out" / "ok.onnx", vmap).is_file()
    src = _decoder(tmp_path / "ids.onnx", ids="ids")
    with pytest.raises(PipelineError, match=rf"^{src} is not a decoder graph with input 'input_ids' and output "
                                            r"'logits'; re-run the quantize stage$"):
        map_vocab(src, tmp_path / "out" / "a.onnx", vmap)
    half = _decoder(tmp_path / "half.onnx", logits_type=TensorProto.FLOAT16)
    with pytest.raises(PipelineError, match=r"half.onnx: logits are not float32; ship the fp32 or int8-dynamic graph "
                                            r"\(bundle.variant\)"):
        map_vocab(half, tmp_path / "out" / "b.onnx", vmap)
    assert not (tmp_path / "out" / "a.onnx").exists() and not (tmp_path / "out" / "b.onnx").exists()


def test_special_ids_without_eos_names_where_to_set_it(tmp_path):
    """A teacher whose tokenizer and config name no eos token: the generation bundle could never stop, so it is
    refused; setting eos_token in tokenizer_config.json, as the message says, is enough."""
    from transformers import AutoTokenizer, LlamaConfig

    from export.hf_layout import special_ids

    folder = tmp_path / "teacher"
    tok = write_tokenizer(folder)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    assert tok.eos_token_id is None
    with pytest.raises(PipelineError, match=r"name no eos token; the generation bundle needs one to stop \(set "
                                            r"eos_token in the teacher's tokenizer_config.json\)"):
        special_ids(tok, config)
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tc, "eos_token": "[SEP]"}))
    fixed = AutoTokenizer.from_pretrained(folder)
    assert special_ids(fixed, config)["eos_token_id"] == fixed.convert_tokens_to_ids("[SEP]")


def test_special_ids_take_the_first_of_a_config_eos_list(tmp_path):
    """A config with a Llama-3 style eos list and a tokenizer without eos_token: the first id (end-of-text) is the
    bundle's eos, not an error saying there is none."""
    from transformers import LlamaConfig

    from export.hf_layout import special_ids

    tok = write_tokenizer(tmp_path / "teacher")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, bos_token_id=1, eos_token_id=[2, 3], pad_token_id=0)
    assert tok.eos_token_id is None
    assert special_ids(tok, config) == {"eos_token_id": 2, "bos_token_id": 1, "pad_token_id": tok.pad_token_id}


def test_greedy_check_names_the_two_sides_and_the_fix_that_applies():
    """A diverging greedy decode names what was compared and a fix for that file: another opset for an ONNX
    export (the default), but not for a .ort conversion or the bundle, where the opset plays no part."""
    from export.checks import check_greedy

    assert check_greedy([5, 6, 7], [5, 6, 9], "student int8-dynamic ONNX", must_match=False) == {
        "tokens": 3, "matching_prefix": 2, "match": False}
    with pytest.raises(PipelineError, match=r"^student fp32 ONNX: the ONNX greedy decode diverges from PyTorch at "
                                            r"token 3 of 3 \(PyTorch 7, ONNX 9\); the export is wrong - try "
                                            r"another quantize.opset$"):
        check_greedy([5, 6, 7], [5, 6, 9], "student fp32 ONNX", must_match=True)
    from pipeline.tasks.generation.ship import ORT_FIX
    with pytest.raises(PipelineError, match=r"the .ort greedy decode diverges from .onnx at token 1 of 2 "
                                            r"\(.onnx 5, .ort 4\); leave this variant out of export.ort_variants, "
                                            r"or name the fusion at fault in export.ort_disabled_optimizers$") as e:
        check_greedy([5, 6], [4, 6], "student fp32 .ort", must_match=True, sides=(".onnx", ".ort"), fix=ORT_FIX)
    assert "opset" not in str(e.value)


# --- export/string_model.py ---

def test_string_model_refuses_a_classifier_without_the_mask_input(bert, tmp_path):
    """The string-in model feeds the classifier input_ids and attention_mask from its in-graph tokenizer: a
    graph with other inputs is refused naming what it has."""
    import onnx

    from export.string_model import build_string_model

    m, fp32, _ = bert
    model = onnx.load(str(fp32))
    mask = next(i for i in model.graph.input if i.name == "attention_mask")
    model.graph.input.remove(mask)  # the mask becomes an undefined value: the input list is what is checked
    src = tmp_path / "no-mask.onnx"
    onnx.save(model, str(src))
    with pytest.raises(PipelineError, match=rf"^{src}: expected inputs input_ids, attention_mask and output logits, "
                                            r"got \['input_ids'\] -> \['logits'\]; re-run the quantize stage$"):
        build_string_model(src, m.tokenizer, 32, tmp_path / "text.onnx")
    assert not (tmp_path / "text.onnx").exists()
