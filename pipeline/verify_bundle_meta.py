"""Reading a bundle's metadata.json and samples.json without trusting them: every path must stay inside the
bundle, the file list must not be empty, and a malformed entry is one PipelineError naming it (never a
traceback). A bundle is often copied from elsewhere; verify-bundle must not read /etc/passwd because
metadata.json says so."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Callable

from pipeline.errors import PipelineError

METADATA = "metadata.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REBUILD = "rebuild the bundle with `make bundle` (a web bundle: `make web-bundle`)"


def resolve(bundle: Path, rel: object, where: str) -> Path:
    """bundle / rel, refusing absolute paths, '..', and links that lead outside the bundle."""
    bad = None
    if not isinstance(rel, str) or not rel.strip():
        bad = "is not a file path"
    elif PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or PureWindowsPath(rel).drive:
        bad = "is absolute"
    elif ".." in PurePosixPath(rel.replace("\\", "/")).parts:
        bad = "climbs out with '..'"
    elif "\0" in rel:  # the OS refuses it with a ValueError, not an OSError
        bad = "holds a NUL byte"
    elif any(len(part.encode("utf-8", "surrogatepass")) > 255 for part in PurePosixPath(rel).parts):
        bad = "has a name longer than 255 bytes, which no file system here holds"
    else:
        try:
            inside = (bundle / rel).resolve().is_relative_to(bundle.resolve())
        except (RuntimeError, OSError):  # a link that leads back to itself (Python < 3.13 raises RuntimeError)
            raise PipelineError(f"{bundle}: {rel} is a broken link (a loop: it leads back to itself); restore it "
                                f"from the build's runs/<run>/ folder or {_REBUILD}") from None
        if not inside:
            bad = "leads outside the bundle (a link)"
    if bad:
        raise PipelineError(f"{bundle}/{METADATA}: {where} names {rel!r}, which {bad}; a bundle may only name "
                            f"files inside its own folder: {_REBUILD}")
    return bundle / rel


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: object) -> bool:
    """A finite int or float (a NaN reference logit would compare as never off, so every check of it passes)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def int_list(v: object) -> bool:
    """A non-empty list of integers (token ids)."""
    return isinstance(v, list) and len(v) > 0 and all(map(is_int, v))


def need(ok: bool, bundle: Path, what: str) -> None:
    if not ok:
        raise PipelineError(f"{bundle}/{METADATA}: {what}; {_REBUILD}")


def read_json(path: Path, where: object = None, rebuild: str = _REBUILD) -> object:
    """path's JSON, or one PipelineError naming the file (where, else path) and how to fix it."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nested 100k deep
        raise PipelineError(f"{where or path} is not valid JSON ({str(e)[:200] or type(e).__name__}); {rebuild}") from None
    except OSError as e:  # unreadable (permissions), a folder, ...
        raise PipelineError(f"{where or path} cannot be read ({e.strerror or e}); check its permissions, or "
                            f"{rebuild}") from None


def fresh_process(bundle: Path, module: str, args: list[str], plan: str | None, what: str, fix: str,
                  timeout_s: float = 300) -> dict:
    """The JSON last line `python -m module args` prints (plan on stdin), run in a fresh process with no training
    code loaded; a crash or a process past timeout_s (naming what ran and the fix) or the {"error"} it reports is
    one PipelineError."""
    try:
        proc = subprocess.run([sys.executable, "-m", module, *args], input=plan, capture_output=True, text=True,
                              timeout=timeout_s, cwd=Path(__file__).resolve().parents[1])
    except subprocess.TimeoutExpired:
        raise PipelineError(f"{bundle}: the {what} in a fresh process gave no answer in {timeout_s:g} s; "
                            f"{fix}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:400]
        # fix names the packages; any other failure is a runtime refusing a file that the hashes let through
        # (edited and re-hashed) or a runtime version that reads it otherwise
        if not any(e in last for e in ("ModuleNotFoundError", "ImportError", "No module named")):
            fix = (f"a runtime refused a bundle file: restore the bundle from the build's runs/<run>/ folder or "
                   f"{_REBUILD}; if it came from a build with other runtime versions, install those (metadata.json "
                   f"'versions')")
        raise PipelineError(f"{bundle}: running the {what} in a fresh process failed ({last}); {fix}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "error" in result:
        raise PipelineError(f"{bundle}: {result['error']}")
    return result


def load_metadata(bundle: Path) -> dict:
    """metadata.json, checked for what every bundle has: a JSON object listing its files with their hashes."""
    path = bundle / METADATA
    if not bundle.exists():
        raise PipelineError(f"{bundle} does not exist; pass a bundle folder (e.g. dist/<run>), or build one with "
                            f"`make bundle`")
    if bundle.is_file():
        folder = bundle.parent if (bundle.parent / METADATA).is_file() else f"the one holding {METADATA}"
        raise PipelineError(f"{bundle} is a file, not a bundle; pass the bundle folder ({folder})")
    if not path.is_file():
        # the folder above the bundles (dist/, a run folder) is the usual slip: name the bundles it holds
        inside = sorted(str(p.parent) for p in bundle.glob(f"*/{METADATA}") if p.is_file())
        if inside:
            which = ", ".join(inside[:3]) + (", ..." if len(inside) > 3 else "")
            held = "one" if len(inside) == 1 else "some"
            raise PipelineError(f"{bundle} is not a bundle (no {METADATA}), it holds {held}: pass the bundle folder "
                                f"itself ({which})")
        raise PipelineError(f"{bundle} is not a bundle (no {METADATA}); build one with `make bundle` "
                            f"(python -m pipeline bundle --config ...)")
    meta = read_json(path)
    need(isinstance(meta, dict), bundle, "the top level is not an object")
    files = meta.get("files")
    need(isinstance(files, dict), bundle, "'files' is missing" if files is None else
         f"'files' must be an object of path -> {{bytes, sha256}}, not {json.dumps(files)[:60]}")
    need(len(files) > 0, bundle, "'files' lists no files (an empty bundle checks nothing)")
    for rel, info in files.items():
        resolve(bundle, rel, "files")
        need(isinstance(info, dict) and is_int(info.get("bytes")) and info["bytes"] >= 0
              and isinstance(info.get("sha256"), str) and _SHA256.fullmatch(info["sha256"]) is not None,
              bundle, f"files[{rel!r}] needs 'bytes' (an integer) and 'sha256' (64 hex digits)")
    return meta


def check_metadata(bundle: Path, meta: dict) -> dict:
    """A classification bundle's labels, models and samples file, checked for the shape verify relies on."""
    files = meta["files"]
    need_labels(bundle, meta)
    models = meta.get("models")
    need(isinstance(models, dict) and len(models) > 0, bundle, "'models' names no model")
    for key, spec in models.items():
        need(isinstance(spec, dict) and isinstance(spec.get("format"), str), bundle, f"models.{key} has no 'format'")
        need_io(bundle, spec, f"models.{key}")
        _listed(bundle, files, spec.get("file"), f"models.{key}.file")
    _listed(bundle, files, meta.get("samples_file"), "samples_file")
    return meta


def need_labels(bundle: Path, meta: dict) -> None:
    labels = meta.get("labels")
    need(isinstance(labels, list) and len(labels) >= 2 and all(isinstance(x, str) for x in labels), bundle,
         "'labels' must list the class names")


def need_io(bundle: Path, spec: dict, where: str) -> None:
    """A model entry's inputs and outputs: non-empty lists of named tensors."""
    for io in ("inputs", "outputs"):
        need(isinstance(spec.get(io), list) and len(spec[io]) > 0
             and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in spec[io]),
             bundle, f"{where}.{io} must list named tensors")


def _listed(bundle: Path, files: dict, rel: object, where: str) -> None:
    """rel is a listed file, or a folder (a Core ML package) with listed files under it: so it is hashed."""
    resolve(bundle, rel, where)
    need(rel in files or any(f.startswith(f"{rel}/") for f in files), bundle,
          f"{where} = {rel!r} is not in 'files', so its sha256 is unchecked")


def load_samples(bundle: Path, meta: dict, ids_key: str = "token_ids", refs: list[str] | None = None,
                 rebuild: str = _REBUILD) -> list[dict]:
    """samples.json: texts, their token ids (ids_key: the app bundle's "token_ids", the web page's
    "input_ids"), the expected label and the reference logits of each file in refs (default: the ONNX
    Runtime files of metadata's "models") and of every other file a sample names (NPU files where it fits)."""
    where = f"{bundle}/{meta['samples_file']}"
    samples = read_json(resolve(bundle, meta["samples_file"], "samples_file"), where, rebuild)
    if not isinstance(samples, list) or not samples:
        raise PipelineError(f"{where} holds no samples; {rebuild}")
    from pipeline.tasks.classification.replay import ORT_FORMATS

    n_labels = len(meta["labels"])
    if refs is None:
        refs = [spec["file"] for spec in meta["models"].values() if spec["format"] in ORT_FORMATS]
    for n, s in enumerate(samples, 1):
        ok = (isinstance(s, dict) and isinstance(s.get("text"), str) and s.get("expected_label") in meta["labels"]
              and int_list(s.get(ids_key)) and isinstance(s.get("reference_logits"), dict))
        if not ok:
            raise PipelineError(f"{where}: sample {n} needs 'text', '{ids_key}' (integers), 'expected_label' (one of "
                                f"{meta['labels']}) and 'reference_logits'; {rebuild}")
        for rel in {*refs, *s["reference_logits"]}:
            row = s["reference_logits"].get(rel)
            if not (isinstance(row, list) and len(row) == n_labels and all(map(is_number, row))):
                raise PipelineError(f"{where}: sample {n} has no reference logits ({n_labels} numbers) for {rel}; "
                                    f"{rebuild}")
    return samples


KINDS = ("app", "web")  # metadata.json "kind": the phone app bundle, or the browser bundle (dist/<run>-web)


def bundle_kind(bundle: Path, meta: dict) -> tuple[str, str]:
    """(task, kind) as metadata.json states them: verify-bundle dispatches on these, never on which keys exist."""
    task, kind = meta.get("task"), meta.get("kind")
    need(isinstance(task, str), bundle, "'task' must name the bundle's task (classification, generation)")
    need(kind in KINDS, bundle, f"'kind' must be one of {', '.join(KINDS)} (it is {kind!r})")
    return task, kind


def require_digest(bundle: Path, meta: dict) -> None:
    """metadata.json's own digest (export.bundle.metadata_digest): an app reads labels, max_length and the
    lowercasing from it, so an edit there must fail as a changed model file does."""
    from export.bundle import DIGEST_KEY, metadata_digest

    stored = meta.get(DIGEST_KEY)
    if stored != metadata_digest(meta):
        why = "has no digest" if not isinstance(stored, str) else "was edited after the build (its content no " \
              "longer matches its " + DIGEST_KEY + ")"
        raise PipelineError(f"{bundle}/{METADATA} {why}; restore it from the build's runs/<run>/ folder or "
                            f"{_REBUILD}")


SAMPLE_FOLDERS = ("android/", "ios/")  # where the build writes the app samples, and nothing else


def check_app_samples(bundle: Path, meta: dict, generate: Callable[[dict], dict[str, str]]) -> int:
    """The Kotlin / Swift samples are generated from metadata.json (export/app_samples: generate(meta) -> path ->
    text, "" for none), so the metadata must generate each shipped sample byte for byte: a sample edited and
    re-hashed in 'files' passed the sha256 check while an app copying it runs code the build never wrote.
    Returns how many samples were compared."""
    try:
        want = {rel: text for rel, text in generate(meta).items() if text}
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:  # a field the samples read is malformed
        raise PipelineError(f"{bundle}/{METADATA}: the app samples cannot be generated from it ({type(e).__name__}: "
                            f"{str(e)[:100]}): it was edited; restore it from the build's runs/<run>/ folder or "
                            f"{_REBUILD}") from None
    shipped = sorted(rel for rel in meta["files"] if rel.startswith(SAMPLE_FOLDERS))
    for rel in sorted(want.keys() | set(shipped)):
        if rel not in want:
            raise PipelineError(f"{bundle}: {rel} is not a sample this bundle's metadata generates (the build writes "
                                f"only {', '.join(sorted(want)) or 'none'}); delete it from the bundle and "
                                f"metadata.json, or {_REBUILD}")
        if rel not in shipped:
            raise PipelineError(f"{bundle}: {rel} is missing: this bundle's metadata generates it and the build "
                                f"ships it; {_REBUILD}")
        if (bundle / rel).read_bytes() != want[rel].encode("utf-8"):
            raise PipelineError(f"{bundle}: {rel} differs from the sample this bundle's metadata generates (edited "
                                f"after the build, or built by another pocketformer version); {_REBUILD}")
    return len(want)


def edited(bundle: Path, what: str) -> PipelineError:
    """metadata.json disagrees with one of the bundle's own (hashed) files: what says which field and file."""
    return PipelineError(f"{bundle}/{METADATA}: {what}: metadata.json was edited; restore it or {_REBUILD}")


def cross_check(bundle: Path, meta: dict) -> None:
    """A classification bundle's metadata against its own files (check_files has hashed them): labels.json, the
    tokenizer's pocketformer.json and tokenizer_config.json. Names the field that disagrees."""
    files = meta["files"]
    labels, source = meta["labels"], "'labels'"
    if "labels.json" in files:
        labels, source = read_json(bundle / "labels.json"), "labels.json"
        if labels != meta["labels"]:
            raise edited(bundle, f"'labels' is {meta['labels']}, labels.json says {labels}")
    # an app may map the argmax to a name through label_map (class id -> name) instead of the list
    label_map = {str(i): name for i, name in enumerate(labels)}
    if meta.get("label_map") != label_map:
        raise edited(bundle, f"'label_map' is {meta.get('label_map')!r}, {source} says {labels}, which makes it "
                             f"{label_map}")
    max_length = meta.get("max_length")
    need(is_int(max_length) and max_length > 0, bundle, "'max_length' must be a positive integer")
    norm = meta.get("text_normalisation")
    need(isinstance(norm, dict) and isinstance(norm.get("lowercase"), bool), bundle,
         "'text_normalisation' needs 'lowercase' (true or false)")
    if norm.get("max_length", max_length) != max_length:
        raise edited(bundle, f"max_length is {max_length}, text_normalisation.max_length is {norm['max_length']}")
    own = "tokenizer/pocketformer.json"
    if own in files:
        trained = read_json(bundle / own)
        if isinstance(trained, dict) and trained.get("max_length") not in (None, max_length):
            raise edited(bundle, f"max_length is {max_length}, the model was trained at {trained['max_length']} "
                                 f"({own})")
    conf = "tokenizer/tokenizer_config.json"
    if conf in files:
        tc = read_json(bundle / conf)
        tc = tc if isinstance(tc, dict) else {}
        lower = tc.get("do_lower_case")
        if isinstance(lower, bool) and lower != norm["lowercase"]:
            raise edited(bundle, f"text_normalisation.lowercase is {norm['lowercase']}, {conf} has "
                                 f"do_lower_case = {lower}")
        limit = tc.get("model_max_length")
        if is_int(limit) and limit < max_length:
            # both files are hashed and pass: a lowered model_max_length in tokenizer_config.json is as likely an
            # edit as a raised max_length (which pocketformer.json above already names)
            raise PipelineError(f"{bundle}/{METADATA}: max_length is {max_length}, beyond the tokenizer's "
                                f"model_max_length {limit} ({conf}): one of the two was edited; restore them from "
                                f"the build's runs/<run>/ folder or {_REBUILD}")
        if limit != max_length:
            raise uncapped(bundle, conf, f"model_max_length {limit!r}", max_length)
    fast = "tokenizer/tokenizer.json"
    if fast in files:
        tj = read_json(bundle / fast)
        cut = tj.get("truncation") if isinstance(tj, dict) else None
        if not (isinstance(cut, dict) and cut.get("max_length") == max_length):
            raise uncapped(bundle, fast, f"truncation {cut!r}", max_length)


def uncapped(bundle: Path, rel: str, has: str, max_length: int) -> PipelineError:
    """A tokenizer file that does not cut texts where the model does (export/hf_layout.py cap_tokenizer): an
    app running it as it is feeds a long text past the model's positions."""
    return PipelineError(f"{bundle}: {rel} has {has}, not the bundle's max_length {max_length}, so an app "
                         f"running it would pass long texts the model cannot take (a bundle built before "
                         f"pocketformer capped its tokenizer, or an edit); {_REBUILD}")


def check_workloads(bundle: Path, meta: dict) -> None:
    """metadata "workloads" (export/bundle.py bundle_workloads): per workload ("batch1", "batch<N>") the file
    that serves it with the number it won on, or a status with its reason; a file said to be in the bundle
    must be listed in 'files'."""
    work = meta.get("workloads")
    if work is None:
        return
    need(isinstance(work, dict) and len(work) > 0, bundle, "'workloads' must map workloads (batch1, batch32) to files")
    for key, w in work.items():
        where = f"workloads.{key}"
        need(isinstance(key, str) and re.fullmatch(r"batch[1-9][0-9]*", key) is not None, bundle,
             f"{where}: a workload is named batch<N> (batch1, batch32)")
        need(isinstance(w, dict), bundle, f"{where} must be an object")
        if "status" in w:
            need(isinstance(w["status"], str) and isinstance(w.get("reason"), str) and w["reason"], bundle,
                 f"{where}: an unmeasured workload needs a status and its reason")
            continue
        batch = int(key.removeprefix("batch"))
        need(w.get("batch") == batch, bundle, f"{where}.batch must be {batch}")
        need(all(isinstance(w.get(k), str) and w[k] for k in ("variant", "format", "rule", "target")), bundle,
             f"{where} needs variant, format, target and rule (strings)")
        need(is_number(w.get("accuracy")) and 0 <= w["accuracy"] <= 1, bundle,
             f"{where}.accuracy must be a number in [0, 1]")
        won = "p50_ms" if batch == 1 else "sequences_per_s"
        need(is_number(v := w.get(won)) and v == v and v > 0, bundle, f"{where}.{won} must be a positive number")
        need(isinstance(w.get("in_bundle"), bool), bundle, f"{where}.in_bundle must be true or false")
        if w["in_bundle"]:
            _listed(bundle, meta["files"], w.get("file"), f"{where}.file")
        else:
            need(isinstance(w.get("run_file"), str) and w["run_file"], bundle,
                 f"{where}: a file not in the bundle needs its run_file")


def check_qnn(bundle: Path, meta: dict) -> None:
    """The HTP context binaries (metadata "qnn", export/qnn_bundle.py): per chip, per length, the context model
    and its binary, named with their inputs and outputs, both listed in 'files' so their sha256 is checked."""
    qnn = meta.get("qnn")
    if qnn is None:
        return
    need(isinstance(qnn, dict) and isinstance(qnn.get("shipped"), bool), bundle, "'qnn' must say whether it was shipped")
    if not qnn["shipped"]:
        return
    need(isinstance(qnn.get("chips"), dict) and len(qnn["chips"]) > 0, bundle, "'qnn' is shipped but names no chip")
    need(isinstance(qnn.get("pad_id", 0), int), bundle, "qnn.pad_id must be an integer")
    files = meta["files"]
    for chip, entry in qnn["chips"].items():
        where = f"qnn.chips.{chip}"
        need(isinstance(entry, dict) and isinstance(entry.get("files"), dict) and len(entry["files"]) > 0, bundle,
             f"{where}.files names no file")
        need(all(str(n).isdigit() for n in entry["files"]), bundle, f"{where}.files must be keyed by length")
        need(all(str(entry.get(k, "")).isdigit() for k in ("soc_model", "htp_arch")), bundle,
             f"{where}.soc_model and .htp_arch must be QNN's numeric ids (the emulator is set up with them)")
        _file_specs(bundle, files, {f"{where}.files.{n}": spec for n, spec in entry["files"].items()}, "binary")


def check_npu(bundle: Path, meta: dict) -> None:
    """An npu student's static NPU files (metadata "npu", export/npu_bundle.py): each variant's per-length
    files and lookup file, named with their inputs and outputs, must be listed in 'files' so their sha256 is
    checked (they sit outside "models", which the samples run with dynamic shapes)."""
    npu = meta.get("npu")
    if npu is None:
        return
    need(isinstance(npu, dict) and len(npu) > 0, bundle, "'npu' names no NPU variant")
    files = meta["files"]
    for name, entry in npu.items():
        where = f"npu.{name}"
        need(isinstance(entry, dict) and isinstance(entry.get("files"), dict) and len(entry["files"]) > 0, bundle,
             f"{where}.files names no file")
        need(isinstance(entry.get("pad_id", 0), int), bundle, f"{where}.pad_id must be an integer")
        specs = {f"{where}.files.{n}": spec for n, spec in entry["files"].items()}
        need(all(str(n).isdigit() for n in entry["files"]), bundle, f"{where}.files must be keyed by length")
        if entry.get("lookup") is not None:
            specs[f"{where}.lookup"] = entry["lookup"]
        _file_specs(bundle, files, specs)


def _file_specs(bundle: Path, files: dict, specs: dict, *also: str) -> None:
    """Model entries outside "models" ({where: spec}): each names its inputs and outputs and a file (and the
    fields in also), listed in 'files' so their sha256 is checked."""
    for key, spec in specs.items():
        need(isinstance(spec, dict), bundle, f"{key} must name a file")
        need_io(bundle, spec, key)
        for field in ("file", *also):
            _listed(bundle, files, spec.get(field), f"{key}.{field}")
