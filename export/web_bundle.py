"""The web bundle: the student file that runs fastest in the browser, a client-side demo page and the
checks that the page labels texts as the model does. Published to dist/<run>-web/ beside the phone bundle.

Layout:

    index.html, app.mjs          the demo page: type a text, see label, probabilities and latency
    classifier.mjs, wordpiece.mjs   text -> WordPiece ids -> onnxruntime-web -> label (no server code)
    ort/                         onnxruntime-web's WASM runtime (from web/node_modules, the pinned version)
    model/<model>-<variant>.onnx|.ort   the file chosen on the browser target's rows
    tokenizer/, labels.json, samples.json (texts, expected labels, probabilities and token ids)
    metadata.json, README.md, serve.py (a static server with the COOP/COEP headers WASM threads need)

The choice is export/bundle.py's rule on another target: the student's .onnx and .ort files within the
accuracy window, fastest p50 on `bundle.web_target` (browser-wasm: 1 thread, as a page runs by default).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from eval.browser import WEB_DIR, chromium_path, node_failure, node_path, unavailable_reason
from pipeline.errors import PipelineError

DEMO_DIR = WEB_DIR / "demo"
ORT_DIST = WEB_DIR / "node_modules" / "onnxruntime-web" / "dist"
# the WASM build only (no WebGL/WebGPU): the module, its loader and the SIMD+threads binary
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
PAGE_FILES = ("index.html", "app.mjs", "classifier.mjs", "wordpiece.mjs", "serve.py")
FORMATS = ("onnx", "ort")


def runtime_missing() -> str | None:
    """Why the page cannot be assembled here (onnxruntime-web not installed), or None."""
    missing = [f for f in ORT_FILES if not (ORT_DIST / f).is_file()]
    if missing:
        return f"web/node_modules has no onnxruntime-web ({', '.join(missing)}): run `make web-deps`"
    if node_path() is None:
        return "node is not installed: the JavaScript tokenizer cannot be checked (install Node.js 18+)"
    return None


def ort_web_version() -> str:
    return json.loads((ORT_DIST.parent / "package.json").read_text())["version"]


def copy_page(out: Path) -> None:
    for name in PAGE_FILES:
        shutil.copy2(DEMO_DIR / name, out / name)
    (out / "ort").mkdir()
    for name in ORT_FILES:
        shutil.copy2(ORT_DIST / name, out / "ort" / name)


def _node(script: str, args: list[str], inputs: dict[str, object], what: str, timeout_s: float = 600):
    """Run web/<script> on args, then a JSON file per entry of inputs, then the file it writes; its JSON."""
    with tempfile.TemporaryDirectory(prefix="pocketformer-node-") as tmp:
        files = [Path(tmp) / f"{name}.json" for name in [*inputs, "out"]]
        for f, value in zip(files, inputs.values()):
            f.write_text(json.dumps(value))
        try:
            proc = subprocess.run([node_path() or "node", str(WEB_DIR / script), *args, *map(str, files)],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:  # a browser that never answers, a hung node
            raise PipelineError(f"{what}: web/{script} gave no answer in {timeout_s:g} s") from None
        if proc.returncode != 0:
            raise PipelineError(f"{what}: web/{script} exited with {proc.returncode}: "
                                f"{node_failure(proc.stderr or proc.stdout)}")
        return json.loads(files[-1].read_text())


def js_token_ids(vocab: Path, norm: dict, texts: list[str], wordpiece: Path | None = None,
                 what: str = "the web bundle's tokenizer check") -> list[list[int]]:
    """The ids the page's tokenizer gives each text, run in node: wordpiece (a bundle's own wordpiece.mjs) or the
    module the bundle stage copies into the page."""
    # the WordPiece constructor options (web/demo/wordpiece.mjs) from metadata's text_normalisation
    opts = {"lowercase": norm["lowercase"], "stripAccents": norm["strip_accents"],
            "tokenizeChineseChars": norm["tokenize_chinese_chars"], "maxLength": norm["max_length"],
            **({"module": str(Path(wordpiece).resolve())} if wordpiece else {})}
    return _node("tokenize.mjs", [str(vocab)], {"opts": opts, "texts": texts}, what)


def tokenizer_check(js: list[list[int]], py: list[list[int]], texts: list[str], minimum: float) -> dict:
    differ = [i for i, (a, b) in enumerate(zip(js, py)) if a != b]
    share = 1 - len(differ) / max(1, len(texts))
    return {"split": "test", "texts": len(texts), "differ": len(differ), "agreement": share, "minimum": minimum,
            "examples": [{"text": texts[i][:120], "python": py[i][:40], "javascript": js[i][:40]} for i in differ[:3]]}


def drive_page(bundle: Path, texts: list[str], executable: str = "", timeout_s: float = 600) -> dict:
    """Type each text into the bundle's page in headless Chromium and read the answers back
    (web/page_check.mjs). Raises PipelineError when the page fails."""
    exe = chromium_path(executable)
    if exe is None:
        raise PipelineError(unavailable_reason(executable) or "no Chromium")
    return _node("page_check.mjs", [exe, str(bundle)], {"texts": texts}, "the web bundle's demo page", timeout_s)


def page_summary(doc: dict, samples: list[dict], labels: list[str]) -> dict:
    """The page's answers against the stored samples: labels, probabilities, token ids, latency."""
    import numpy as np

    res = doc["results"]
    same = [r["label"] == s["expected_label"] for r, s in zip(res, samples)]
    prob_diff = max(float(np.abs(np.array(r["probabilities"]) - np.array(s["probabilities"])).max())
                    for r, s in zip(res, samples))
    lat = [r["latency_ms"] for r in res]
    return {"texts": len(res), "labels_agree": sum(same), "agreement": sum(same) / max(1, len(res)),
            "ids_agree": sum(r["ids"] == s["input_ids"] for r, s in zip(res, samples)),
            "max_probability_diff": prob_diff, "latency_ms": {"p50": float(np.median(lat)), "max": max(lat)},
            "latency_note": "tokenizer + model per text, performance.now() in the page, 1 WASM thread",
            "chromium": doc["versions"]["chromium"], "cross_origin_isolated": doc["isolated"],
            "page_errors": doc["page_errors"]}


def readme(meta: dict) -> str:
    m = meta["model"]
    lat = meta.get("latency", {}).get(m["choice"]["target"], {})
    when = f"{lat['p50_ms']:.2f} ms p50 at {lat['seq_len']} tokens" if "p50_ms" in lat else lat.get("reason", "not timed")
    page = meta.get("page_check", {})
    # the page's figure is a whole answer (the JavaScript tokenizer and the session call on one text of its own
    # length), the report's the model alone on padded ids: say which is which
    checked = (f"{page['labels_agree']} of {page['texts']} sample texts labelled as stored, page latency p50 "
               f"{page['latency_ms']['p50']:.1f} ms per text (tokenizer + model in the page; the figure above is "
               f"the model alone)" if "labels_agree" in page else page.get("reason", ""))
    return f"""# {meta['run']}: web bundle

A text classifier that runs entirely in the browser: [onnxruntime-web](https://www.npmjs.com/package/onnxruntime-web)
{meta['runtime']['onnxruntime-web']} (WASM) runs `{m['file']}`; a JavaScript WordPiece tokenizer
(`wordpiece.mjs`) turns text into the model's token ids. Nothing is sent to a server.

    python3 serve.py          # then open http://127.0.0.1:8000/index.html

Any static web server works for one thread; `serve.py` adds the COOP/COEP headers that more WASM threads
need (`index.html?threads=4`).

- Model: {m['name']} {m['variant']} ({m['format']}), chosen on **{m['choice']['target']}** rows: {m['choice']['rule']}.
  There: {when}.
- Labels: {', '.join(meta['labels'])}. Test accuracy {meta['accuracy']['accuracy']:.4f}: {meta['accuracy']['source']}.
- Tokenizer: ids identical to the Python tokenizer on {meta['tokenizer_check']['agreement']:.2%} of
  {meta['tokenizer_check']['texts']} test texts.
- Demo page driven in headless Chromium at build time: {checked}.

In your own page:

```js
import {{ loadClassifier }} from "./classifier.mjs";
const clf = await loadClassifier();
const {{ label, probabilities, latency_ms }} = await clf.classify("what a lovely day");
```

`metadata.json` lists every file with its sha256, the candidates the choice saw and the checks above.
"""
