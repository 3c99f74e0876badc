"""File digests shared by the bundle writer (export/bundle.py) and the run manifests (pipeline/manifest.py).
Standard library only: verify-bundle imports it on a machine with nothing but onnxruntime."""
from __future__ import annotations

import hashlib
from pathlib import Path

METADATA = "metadata.json"  # a bundle's file that lists every other file's sha256 (bundle.py, publish.py)


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
