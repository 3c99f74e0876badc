"""Save / load for the plain-PyTorch models (RNN classifier, LSTM language model, NPU student): their
config dataclass as config.json next to model.safetensors. The Hugging Face models use save_pretrained."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from torch import nn

from pipeline.errors import PipelineError


class FolderModel(nn.Module):
    config_class: type  # the dataclass __init__ takes as its only argument

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(asdict(self.config), indent=2))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(folder / "model.safetensors"))

    @classmethod
    def load(cls, folder: Path, embedding: dict | None = None):
        """In eval mode. `embedding`: the CompactEmbedding spec from pocketformer.json when the model was saved
        with one swapped in by set_input_embeddings (distill/embeddings.py)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            model = cls(cls.config_class(**json.loads((folder / "config.json").read_text())))
            if embedding is not None:
                from distill.embeddings import CompactEmbedding

                model.set_input_embeddings(CompactEmbedding.from_spec(embedding))
            model.load_state_dict(load_file(str(folder / "model.safetensors")))
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError) as e:
            raise PipelineError(f"the checkpoint in {folder} is missing or corrupt ({e}); re-run its stage") from None
        return model.eval()
