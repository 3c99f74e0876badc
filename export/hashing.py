"""File digests shared by the bundle writer (export/bundle.py) and the run manifests (pipeline/manifest.py).
Standard library only: verify-bundle imports it on a machine with nothing but onnxruntime."""
from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
