"""Stages of the shared graph (pipeline/stage.py) a task has nothing to do in. Each writes, empty, the file the
stage's readers expect and says why; a task binds one with its own reason:
`Step(partial(lazy("pipeline.tasks.skips:skip_compile"), reason="..."))`."""
from __future__ import annotations

import json

from pipeline.task import StageContext

QNN_JSON = "qnn.json"  # compile/: Qualcomm's HTP compile of every static QDQ file (classification/compile.py)
PEER_ROWS = "rows.json"  # peer/: Optimum's files, scored (classification/bench.py)


def skip_compile(ctx: StageContext, reason: str) -> dict:
    (ctx.out / QNN_JSON).write_text(json.dumps({"skipped": reason, "rows": []}, indent=2))
    print(f"[compile] skipped: {reason}")
    return {"skipped": reason}


def skip_peer(ctx: StageContext, reason: str) -> dict:
    """No peer files: peer/rows.json holds no rows and says why (another task, bench.optimum_peer = false)."""
    (ctx.out / PEER_ROWS).write_text(json.dumps({"skipped": reason, "rows": [], "seconds": 0.0}, indent=2))
    print(f"[peer] skipped: {reason}")
    return {"skipped": reason, "rows": 0}


def skip_web_bundle(ctx: StageContext, reason: str) -> dict:
    (ctx.out / "README.md").write_text(f"# No web bundle for run {ctx.cfg.run.name}\n\n{reason}.\n")
    print(f"[web-bundle] skipped: {reason}")
    return {"skipped": reason}
