"""Kotlin (ONNX Runtime Android) and Swift samples and the bundle README, for both tasks, generated from the
bundle's metadata.json: every file name, input / output name, size, label and token id in them is read from
it, so a sample can never disagree with the model it ships with. Neither sample is compiled here (no Android
SDK or Xcode on the build machine); tests check that what they name matches the metadata, and verify-bundle
generates them again from the bundle's metadata.json and compares byte for byte. The READMEs
of both bundles are here, the samples per platform:

    android.py   the classifier (string in, in-graph tokenizer) and the generator (KV-cache greedy loop)
    ios.py       the classifier (Core ML, Swift WordPiece) and the generator (ONNX Runtime Objective-C API)
"""
from __future__ import annotations

import json
from pathlib import Path

from export.app_samples import android, ios
from export.app_samples.common import from_nothing


def _write(out: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        if text:  # none: no sample for that platform (no iOS sample without a Core ML package)
            (out / rel).parent.mkdir(exist_ok=True)
            # bytes, not write_text: no locale encoding or newline translation, so verify-bundle can regenerate
            # them from metadata.json and compare byte for byte
            (out / rel).write_bytes(text.encode("utf-8"))


def classification_samples(meta: dict) -> dict[str, str]:
    """android/PocketformerClassifier.kt, its ios/ .swift twin and, where the bundle ships the HTP context
    binaries (metadata "qnn"), android/PocketformerNpuClassifier.kt: path -> text, "" where the metadata
    makes none. The build writes them; verify-bundle regenerates them to compare."""
    return {"android/PocketformerClassifier.kt": android.classifier(meta),
            "ios/PocketformerClassifier.swift": ios.classifier(meta),
            "android/PocketformerNpuClassifier.kt": android.npu_classifier(meta)}


def generation_samples(meta: dict) -> dict[str, str]:
    """android/PocketformerGenerator.kt and its ios/ .swift twin: path -> text."""
    return {"android/PocketformerGenerator.kt": android.generator(meta),
            "ios/PocketformerGenerator.swift": ios.generator(meta)}


def write_classification_samples(out: Path, meta: dict) -> None:
    _write(out, classification_samples(meta))


def write_generation_samples(out: Path, meta: dict) -> None:
    _write(out, generation_samples(meta))


def _how_scored(acc: dict) -> str:
    """How the bundle scored its file, and the report's figure for it where that differs (a quantized file's
    logits move with how the texts are batched)."""
    if acc.get("batch") != 1:
        return ""
    rep = acc.get("report") or {}
    differs = rep.get("accuracy") is not None and round(rep["accuracy"], 4) != round(acc.get("accuracy", -1), 4)
    return ", one text per call as an app runs it" + (
        f" (the report's {rep['accuracy']:.4f} ran `{rep['file']}` over the same texts in padded batches of "
        f"{rep['batch']}: a quantized file's scores move with the batch)" if differs else "")


def classification_readme(meta: dict) -> str:
    m, models = meta["model"], meta["models"]
    acc = meta.get("accuracy") or {}
    # a target measured on a stand-in (mobile-cpu on the build machine) says so, as the report does
    lat = "; ".join(f"{t} {v['p50_ms']:.2f} ms" + (" (host proxy, not a phone)" if v.get("proxy") else "")
                    for t, v in meta.get("latency", {}).items() if "p50_ms" in v)
    cm = models.get("coreml")
    check, text = meta["string_model_check"], models.get("string_onnx")
    files = "\n".join(f"- `{k}`: {v['bytes']:,} bytes" for k, v in meta["files"].items()
                      if k.startswith("model/") and "/" not in k[len("model/"):])
    packages = sorted({k.split("/")[1] for k in meta["files"] if k.startswith("model/") and ".mlpackage/" in k})
    files += "".join(f"\n- `model/{p}` (Core ML package folder)" for p in packages)
    ios = (f"""## iOS / macOS (Xcode, Core ML)

1. Drag `{cm['file']}` and `tokenizer/vocab.txt` into the Xcode project navigator; tick your app target.
2. Add `ios/PocketformerClassifier.swift` to the target.
3. Call `try PocketformerClassifier.demo()` (for example from your view's `onAppear`): it prints the label.
   `PocketformerClassifier(computeUnits: .cpuAndNeuralEngine)` picks the compute units.
4. Inputs `{cm['inputs'][0]['name']}`, `{cm['inputs'][1]['name']}` (token ids and mask, [1, n]); output
   `{cm['outputs'][0]['name']}` ({cm['outputs'][0]['type']}). The Swift WordPiece tokenizer follows
   `text_normalisation` in metadata.json; compare a few texts with the string-in ONNX model (`python -m pipeline
   verify-bundle` shows its labels).
{_deployment(cm, 5)}""" if cm and meta.get("bert_wordpiece", True) else f"""## iOS / macOS (Xcode, Core ML)

`{cm['file']}` takes token ids (inputs `{cm['inputs'][0]['name']}`, `{cm['inputs'][1]['name']}`, [1, n]); there is
no Swift sample: its tokenizer ({meta['text_normalisation']['tokenizer_class']}) is not BERT's WordPiece, which is
the only one the sample implements. Tokenize with `tokenizer/tokenizer.json` (any Hugging Face tokenizers
port) and compare the ids with `samples.json`.
{_deployment(cm)}""" if cm else "## iOS\n\nNo Core ML package for this model (the export stage makes them for the student and "
           "LSTM models).\n")
    return f"""# pocketformer bundle: {m['name']} {m['variant']} (run {meta['run']})

Labels: {', '.join(meta['labels'])}. Test accuracy {acc.get('accuracy', float('nan')):.4f}, macro-F1
{acc.get('macro_f1', float('nan')):.4f} on {acc.get('texts', '?')} test texts{_how_scored(acc)}. Latency at {meta.get('headline_length')}
tokens from the report: {lat or 'not measured'}.
Why this model: {m['choice']['rule']}.

Files (sha256 of each in metadata.json):

{files}

{_string_model(text, check)}

## Check the bundle on any machine

    pip install onnxruntime onnxruntime-extensions   # in a checkout of pocketformer
    python -m pipeline verify-bundle {meta.get('dist_path', 'dist/' + meta['run'])}

It checks every file's sha256, runs each model file on the texts of `samples.json` in a fresh process (one
text per call) and compares its logits with that file's own reference logits stored there, and the labels.

## Android (Android Studio, ONNX Runtime)

{_android(models, text)}
{_npu(meta)}{ios}"""


# Core ML's deployment targets and the OS releases that run them (coremltools' target.iOS15.. names)
_MACOS_FOR_IOS = {"iOS15": "macOS 12", "iOS16": "macOS 13", "iOS17": "macOS 14", "iOS18": "macOS 15"}


def _deployment(cm: dict, step: int | None = None) -> str:
    """The OS an app needs to load the package: Xcode refuses an older deployment target for it."""
    target = cm.get("deployment_target")
    if not target:
        return ""
    mac = _MACOS_FOR_IOS.get(target)
    return (f"{f'{step}. ' if step else ''}The package targets Core ML's {target}: set the app's minimum "
            f"deployment to {target[:3]} {target[3:]}{f' / {mac}' if mac else ''} or later.\n")


def _npu(meta: dict) -> str:
    """The README section on the HTP context binaries (npu/qnn/), where the bundle ships them."""
    qnn = meta.get("qnn") or {}
    if not qnn.get("shipped"):
        return ""
    chips = ", ".join(f"{e['name']} (`{e.get('android_soc_model', '?')}`)" for e in qnn["chips"].values())
    fallback = qnn["fallback"]
    return f"""## Android NPU (Qualcomm Hexagon, ONNX Runtime QNN)

`npu/qnn/<chip>/` holds the model compiled ahead by Qualcomm's HTP compiler for {chips}: an EP-context
`_ctx.onnx` per sequence length with its `_ctx_qnn.bin`, each checked on the HTP emulator when the bundle was
built. `android/PocketformerNpuClassifier.kt` picks the chip by `Build.SOC_MODEL` and runs `{fallback}` on the
CPU on any other phone:
1. Depend on `com.microsoft.onnxruntime:onnxruntime-android-qnn` (in place of `onnxruntime-android`).
2. Copy the bundle's `npu/` folder into `app/src/main/assets/` as it is, and `{fallback}` to
   `assets/{fallback.split('/')[-1]}`.
3. Tokenize with `tokenizer/tokenizer.json` (it cuts at {meta['max_length']} tokens) and call `classify(ids)`; a
   text longer than the chip's longest compiled length runs on `{fallback}` (whole: never cut to fit).

"""


def _string_model(text: dict | None, check: dict) -> str:
    """The README paragraph on the string-in model, or on why the bundle has none."""
    if text is None:
        return (f"No string-in (`-text.onnx`) model in this bundle: {check['reason']}. Tokenize in the app "
                f"with\n`tokenizer/tokenizer.json` and feed the ids to the `.ort` / `.onnx` model; `samples.json` "
                f"holds the ids\neach sample text must give.\n")
    return f"""The `-text.onnx` model takes raw text (input `{text['inputs'][0]['name']}`, one string) and returns
`logits` and `probabilities`: the tokenizer runs inside the graph (onnxruntime-extensions), so the app cannot
tokenize differently from training. On the test split it picks the same label as tokenizer + model on
{100 * check['agreement']:.2f}% of {check['texts']} texts{_differ(check.get('token_ids_differ'))}.
"""


def _differ(n: object) -> str:
    if n == 0:
        return " (and its token ids are the training tokenizer's on every one)"
    return (f" (its token ids differ from the training tokenizer's on {n if n is not None else '?'} of them: the "
            f"extensions op lower-cases and strips accents of some non-Latin letters differently)")


def _android(models: dict, text: dict | None) -> str:
    ort = (f"`{models['ort']['file']}` (ONNX Runtime Mobile format, smaller runtime): inputs "
           f"{', '.join(i['name'] for i in models['ort']['inputs'])} (int64, [1, n]), output "
           f"{', '.join(o['name'] for o in models['ort']['outputs'])}")
    if text is None:
        return (f"1. In `app/build.gradle.kts` add `implementation(\"com.microsoft.onnxruntime:onnxruntime-android:"
                f"<version>\")`.\n2. Ship {ort}; tokenize with `tokenizer/tokenizer.json` (no Kotlin sample: it runs "
                f"the string-in model, which this bundle does not have).\n")
    return f"""1. In `app/build.gradle.kts` add `implementation("com.microsoft.onnxruntime:onnxruntime-android:<version>")` and
   `implementation("com.microsoft.onnxruntime:onnxruntime-extensions-android:<version>")` (the tokenizer op).
2. Copy `{text['file']}` into `app/src/main/assets/` (create the folder: right-click `main` >
   New > Folder > Assets Folder).
3. Copy `android/PocketformerClassifier.kt` into `app/src/main/java/com/example/pocketformer/` (change the
   package line to yours).
4. Call `PocketformerClassifier.demo(this)` from `onCreate`; the label appears in Logcat under `pocketformer`.
5. Apps that tokenize themselves can ship {ort}.
"""


def generation_readme(meta: dict) -> str:
    g, m, s = meta["graph"], meta["model"], meta["samples"][0]
    files = "\n".join(f"- `{k}`: {v['bytes']:,} bytes" for k, v in meta["files"].items())
    ppl = f"{m['perplexity']:.2f}" if isinstance(m.get("perplexity"), (int, float)) else "not measured"
    first = meta.get("prompt_start_ids") or []
    start = (f"adds the start token {first} that training put before every text" if first
             else "this tokenizer adds nothing in front; the line keeps prompts encoded as in training")
    app_start = f", and put {first} (the tokenizer's start token, as in training) first" if first else ""
    path = meta.get('dist_path', 'dist/' + meta['run'])
    trained = meta.get("trained_context_length", g["context_length"])
    past = (f"past {trained} ids it runs on positions it never trained on, and its quality drops."
            if trained < g["context_length"] else "it trained on every position it has.")
    nothing_why = ("the tokenizer's start token, as training put before every text" if meta.get("prompt_start_ids")
                   else "the eos id, which ends every training document")
    if unread := meta.get("genai_tokenizer_unread"):  # genai runs the graph over ids; the tokenizers library encodes
        tokenize = (f"    from tokenizers import Tokenizer\n    model = og.Model({json.dumps(path)})\n"
                    f"    # onnxruntime-genai's tokenizer {unread}: the tokenizers library reads it\n"
                    f"    tok = Tokenizer.from_file({json.dumps(path + '/tokenizer.json')})  # {start}\n")
        encode, decode = ".ids", "[int(t) for t in gen.get_sequence(0)]"
        check = (f"with `tokenizer.json` (onnxruntime-genai's tokenizer {unread}, so verify-bundle does not call it; "
                 f"it must give the stored ids)")
    else:
        tokenize = (f"    model = og.Model({json.dumps(path)})\n    tok = og.Tokenizer(model)\n"
                    f"    tok.update_options(add_special_tokens=\"true\")  # {start}\n")
        encode, decode = "", "gen.get_sequence(0)"
        check = "with `tokenizer.json` and with onnxruntime-genai's tokenizer as above (both must give the stored ids)"
    return f"""# pocketformer generation bundle: student {m['variant']} (run {meta['run']})

A {g['num_hidden_layers']}-layer Llama decoder ({m.get('params') or '?'} parameters, test perplexity {ppl}) with
its KV cache as graph inputs and outputs, in the Hugging Face layout: onnxruntime-genai and transformers.js
load this folder as it is. Token ids are the teacher tokenizer's (`tokenizer.json`); ids the student never
saw in training get the lowest logit, so greedy decoding never picks them.

Context: {g['context_length']} positions, prompt and new ids together (onnxruntime-genai's `max_length` below; the
phone samples refuse more). The student trained on windows of {trained} ids, and the perplexity above is over such
windows: {past}
A prompt needs at least one id; to generate from no text, start from
`{from_nothing(meta)}` ({nothing_why}).

Greedy sample (`samples.json` holds all of them): {json.dumps(s['prompt'])} ->
{json.dumps(s['continuation'])}

## Python: onnxruntime-genai

    pip install onnxruntime-genai{' tokenizers' if unread else ''}
    python - <<'EOF'
    import onnxruntime_genai as og
{tokenize}    params = og.GeneratorParams(model)
    params.set_search_options(max_length={g['context_length']}, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(tok.encode({json.dumps(s['prompt'])}){encode})
    while not gen.is_done():
        gen.generate_next_token()
    print(tok.decode({decode}))
    EOF

## JavaScript: transformers.js

    import {{ env, pipeline }} from "@huggingface/transformers";
    const generate = await pipeline("text-generation", "<this folder>", {{ dtype: "{g['transformers_js_dtype']}" }});
    // local folder: env.localModelPath = "<parent folder>"; env.allowRemoteModels = false
    const out = await generate({json.dumps(s['prompt'])}, {{ max_new_tokens: {s['max_new_tokens']}, do_sample: false }});

## Check the bundle

    python -m pipeline verify-bundle {path}

checks every file's sha256, then, in a fresh process, encodes each prompt of `samples.json` {check},
replays each prompt through `{g['file']}` with plain ONNX Runtime (and with onnxruntime-genai when it is installed) and requires the
stored greedy tokens back.

## Android (ONNX Runtime) and iOS (ONNX Runtime Objective-C API)

`android/PocketformerGenerator.kt` and `ios/PocketformerGenerator.swift` run the same greedy loop with the KV
cache (inputs {', '.join(f"`{i['name']}`" for i in g['inputs'][:3])} and `past_key_values.N.key/value`;
outputs `logits` and `present.N.key/value`); their `demo()` replays the first sample and reports whether the
stored tokens came back. They take token ids: tokenize with `tokenizer.json`{app_start}.

## Files (sha256 of each in metadata.json)

{files}
"""
