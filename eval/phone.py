"""`make phone-bench`: the bundled model timed on a real phone (Android: eval/phone_android.py) or a Mac's
Core ML compute units (eval/phone_apple.py), merged into report/results.json as more targets.

Each (provider or compute unit, threads) becomes a target `android:<device model>/<provider>/<n>t`
(`apple:<Mac model>/<compute unit>`) with the phone's name and SoC in results["targets"]; the bundled row
gets the measurement at phone.seq_length, every other row a skip saying why. The phone's rows are also kept
in runs/<run>/phone/<target>.json with the sha256 of the run file their row names, so a re-built report keeps
them only while that file is the one they timed. The command itself (writing the kept rows and results.json,
re-rendering the report and refreshing its manifest) is pipeline/phone.py.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from eval.latency import token_stream
from eval.rows import find, row_key
from export.hashing import sha256_file
from pipeline.errors import PipelineError

NOT_ON_PHONE = ("phone-bench runs only the bundled model on the phone (and, for NPU providers, its fixed-shape "
                "static-QDQ twin)")
NPU_VARIANT = "int8-static"  # the quantize variant NPU providers run: QDQ with uint8 activations


def bench_ids(tokenizer, texts: list[str], length: int) -> list[int]:
    """length real token ids: [CLS] + the sample texts' word pieces (repeated as needed) + [SEP]."""
    body = token_stream(tokenizer, texts or ["a short text"], length - 2)[: length - 2]
    return [tokenizer.cls_token_id, *body.tolist(), tokenizer.sep_token_id]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def merge(results: dict, model: str, variant: str, fmt: str, runs: list[dict], device: dict, prefix: str,
          seq_len: int, runtime: str) -> list[str]:
    """Add one target per run to results (in place); returns the target names. A run may name its own
    variant / format (the NPU providers time the fixed-shape static-QDQ .onnx, not the bundled .ort): its
    measurement goes to that row, so a row only ever holds the file that was timed."""
    names = []
    for run in runs:
        key = (model, run.get("variant", variant), run.get("format", fmt))
        row = find(results["rows"], *key)
        if row is None:
            raise PipelineError(f"report/results.json has no {' '.join(key)} row; re-run the bench and report "
                                f"stages (`make report`) with that variant")
        unit = run["provider"] + (f"/{run['threads']}t" if run["threads"] else "")
        target = f"{prefix}:{device['model'] or device['name']}/{unit}"
        names.append(target)
        if "entry" in run:
            e = dict(run["entry"])
            # perf_test reports the whole process's peak working set, not what the session added, so it is
            # kept under its own key (the report's memory table pairs peak_rss_mb with session_rss_mb)
            session = {"provider": run["provider"], "threads": run["threads"],
                       "peak_working_set_mb": e.pop("peak_rss_mb", None),
                       "session_create_s": e.pop("session_create_s", None)}
            session.update({k: run[k] for k in ("model_file", "session_config") if k in run})
            entry = {str(seq_len): e, "session": session}
        else:
            entry = {"status": run["status"], "reason": run["reason"]}
        for r in results["rows"]:
            r["latency"][target] = entry if r is row else {"status": "skipped", "reason": NOT_ON_PHONE}
        results["threads"][target] = run["threads"]
        how = "measured on the device"
        if run.get("session_config"):
            how += (f", {key[1]} {key[2]} with shapes fixed to [1, {seq_len}], CPU fallback disabled (a node the "
                    f"provider cannot take fails the run)")
        results["targets"][target] = {
            "runtime": runtime, "provider": run["provider"], "threads": run["threads"],
            "precision": key[1], "formats": [key[2]], "proxy": "",
            "description": f"{device['name']} ({device.get('soc') or 'SoC unknown'}), {how}",
            "device": device}
    return names


def file_digest(path: Path | None) -> str | None:
    """sha256 of a file, or of a package folder's (Core ML .mlpackage) files by relative path; None if absent."""
    if path is None or not path.exists():
        return None
    if path.is_dir():
        files = {p.relative_to(path).as_posix(): file_digest(p) for p in sorted(path.rglob("*")) if p.is_file()}
        return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return sha256_file(path)


def row_file_digest(run_dir: Path, row: dict) -> str | None:
    """The digest of the run file a results row names (None for a row without one, e.g. `missing`)."""
    return file_digest(run_dir / row["file"]) if row.get("file") else None


def _stale(run_dir: Path, results: dict, saved: dict) -> str | None:
    """Why a kept phone row no longer describes this run's file, or None while it does."""
    key = row_key(saved)
    row = find(results["rows"], *key)
    if row is None:
        return f"the report has no {' '.join(key)} row any more"
    if "file_sha256" not in saved:
        return "measured before phone-bench recorded which file it timed"
    now, then = row_file_digest(run_dir, row), saved["file_sha256"]
    if now == then:
        return None
    if then is None:  # a skip (e.g. no int8-static file for the NPU providers) the run has outgrown
        return f"made when the run had no {' '.join(key)} file; it has one now"
    return f"it timed {saved['file']} at sha256 {then[:12]}, now " + (f"sha256 {now[:12]}" if now else "gone")


def merge_saved(run_dir: Path, results: dict) -> list[str]:
    """Re-add the phone rows kept in runs/<run>/phone/ to a freshly built results document (for the report
    stage, so re-running it keeps earlier phone measurements). A row is re-added only while its row's file
    has the sha256 it had when timed: after a retrain the new model's row must not show the old one's
    timings. Each row left out gets a one-line note in results["phone_dropped"]; returns the targets kept."""
    names = []
    for path in sorted((run_dir / "phone").glob("*.json")):
        saved = json.loads(path.read_text())
        if why := _stale(run_dir, results, saved):
            results.setdefault("phone_dropped", []).append(
                f"{saved.get('target', path.stem)}: left out ({why}); run `make phone-bench` again to time the "
                f"current file")
            continue
        key = row_key(saved)
        run = {k: saved[k] for k in ("provider", "threads", "entry", "status", "reason", "model_file",
                                     "session_config") if k in saved}
        names += merge(results, *key, [run], saved["device"], saved["prefix"], saved["seq_len"], saved["runtime"])
    return names


def _bundle(cfg) -> tuple[Path, dict]:
    """The run's bundle folder and metadata (pipeline/phone.py has refused an out-of-date bundle)."""
    run_dir = cfg.run_dir
    bundle = run_dir / "bundle"
    if not (bundle / "metadata.json").is_file():
        raise PipelineError(f"phone-bench times the bundled model, but {bundle} has none; run `make bundle` "
                            f"(python -m pipeline bundle --config {cfg.source}) first")
    if not (run_dir / "report" / "results.json").is_file():
        raise PipelineError(f"no report/results.json in {run_dir}; run `make report` first")
    return bundle, json.loads((bundle / "metadata.json").read_text())


def measure_phone(cfg, platform_name: str = "android", adb: str | None = None, perf_test: str | None = None,
                  serial: str | None = None) -> dict:
    """Time the bundled model on the phone (or Mac) and merge the rows into a copy of report/results.json,
    returned under "results" with device, targets, runs, seq_len and "keep": {file name: record} for
    runs/<run>/phone/. Writing both (after validation) and the report is the caller's (pipeline/phone.py)."""
    from transformers import AutoTokenizer

    p = cfg.phone
    run_dir = cfg.run_dir
    bundle, meta = _bundle(cfg)
    tokenizer = AutoTokenizer.from_pretrained(bundle / "tokenizer")
    seq = min(p.seq_length, meta["max_length"])
    samples = json.loads((bundle / meta["samples_file"]).read_text())
    ids = bench_ids(tokenizer, [s["text"] for s in samples], seq)
    name, variant = meta["model"]["name"], meta["model"]["variant"]
    if platform_name == "apple":
        from eval import phone_apple

        if reason := phone_apple.skip_reason():
            raise PipelineError(reason)
        if "coreml" not in meta["models"]:
            raise PipelineError(f"the bundle has no Core ML package for {name}; add it to export.coreml_models")
        cm = meta["models"]["coreml"]
        runs = phone_apple.time_coreml(bundle / cm["file"], [i["name"] for i in cm["inputs"]], ids,
                                       list(p.compute_units), 3, p.repeats)
        device = {**phone_apple.mac_info()}
        device["model"] = device["name"]
        targets_prefix, fmt, var, runtime = "apple", "coreml", cm["variant"], "coremltools MLModel.predict"
    elif platform_name == "android":
        runs, device = _android(cfg, bundle, meta, ids, adb, perf_test, serial)
        targets_prefix, fmt, var, runtime = "android", "ort", variant, "onnxruntime_perf_test"
    else:
        raise PipelineError(f"unknown platform '{platform_name}'. Known: android, apple")
    results = json.loads((run_dir / "report" / "results.json").read_text())
    names = merge(results, name, var, fmt, runs, device, targets_prefix, seq, runtime)
    saved = {"device": device, "model": name, "variant": var, "format": fmt, "seq_len": seq,
             "prefix": targets_prefix, "runtime": runtime}
    keep = {f"{_safe(target)}.json": {"target": target, **saved, **run,
                                      **_timed_file(run_dir, results, (name, var, fmt), run)}
            for target, run in zip(names, runs)}
    return {"device": device, "targets": names, "runs": runs, "seq_len": seq, "results": results, "keep": keep}


def _timed_file(run_dir: Path, results: dict, key: tuple[str, str, str], run: dict) -> dict:
    """The run file of the row a run's measurement sits on and its sha256 (merge_saved drops the row once the
    file differs). The bundle is up to date (_bundle), so its .ort / .mlpackage is a byte copy of that file;
    the NPU providers' file is the row's static-QDQ .onnx with its shapes fixed."""
    row = find(results["rows"], key[0], run.get("variant", key[1]), run.get("format", key[2]))  # as merge()
    return {"file": row.get("file"), "file_sha256": row_file_digest(run_dir, row)}


def _android(cfg, bundle: Path, meta: dict, ids: list[int], adb: str | None, perf_test: str | None,
             serial: str | None) -> tuple[list[dict], dict]:
    import tempfile

    from eval.phone_android import (CPU_MODEL, NPU_MODEL, NPU_PROVIDERS, Adb, device_info, devices, run_android,
                                    write_test_data)

    p = cfg.phone
    adb_exe = shutil.which(adb or p.adb)
    binary = Path(perf_test or p.perf_test) if (perf_test or p.perf_test) else None
    missing = []
    if not adb_exe:
        given = Path(adb or p.adb).expanduser()
        why = ("is not executable" if given.is_file() else "does not exist") if given.parent != Path(".") or \
            given.exists() else "is not on PATH"
        missing.append(f"adb ('{adb or p.adb}' {why}: install Android platform-tools or pass --adb PATH)")
    if binary is None or not binary.is_file():
        what = "not given" if binary is None else f"{binary} does not exist"
        missing.append(f"the onnxruntime_perf_test binary ({what}: pass --perf-test PATH or set phone.perf_test; "
                       f"docs/bundles.md 'On a real phone' says how to build it)")
    found = devices(adb_exe) if adb_exe else []
    want = serial or p.serial
    if adb_exe and not found:
        missing.append("an Android device (`adb devices` lists none ready: plug it in, enable USB debugging, "
                       "accept the prompt on the phone)")
    elif adb_exe and want and want not in found:
        missing.append(f"the device with serial {want} (`adb devices` lists {', '.join(found)})")
    if missing:
        raise PipelineError("phone-bench cannot run, missing: " + "; ".join(missing))
    if not want and len(found) > 1:
        raise PipelineError(f"several Android devices are attached ({', '.join(found)}); pass --serial or set "
                            f"phone.serial")
    a = Adb(adb_exe, want or found[0])
    device = device_info(a)
    name, variant = meta["model"]["name"], meta["model"]["variant"]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        model_dir.mkdir()
        shutil.copy2(bundle / meta["models"]["ort"]["file"], model_dir / CPU_MODEL)
        npu_missing = None
        if any(ep in NPU_PROVIDERS for ep in p.providers):
            npu_missing = _npu_model(cfg, name, len(ids), model_dir / NPU_MODEL)
        write_test_data(model_dir, [i["name"] for i in meta["models"]["ort"]["inputs"]], ids)
        runs = run_android(a, binary, model_dir, list(p.providers), list(p.threads), p.repeats, p.remote_dir,
                           p.qnn_backend, npu_missing)
    for run in runs:  # the row each run's measurement belongs to
        run["variant"], run["format"] = (NPU_VARIANT, "onnx") if run["model_file"] == NPU_MODEL else (variant, "ort")
    return runs, device


def _npu_model(cfg, name: str, seq_len: int, dest: Path) -> str | None:
    """Write the NPU providers' file: the model's static-QDQ .onnx with shapes fixed to [1, seq_len] (NNAPI and
    QNN take only fixed shapes and quantized QDQ graphs). Returns why it cannot be made, or None."""
    from eval.npu import fix_shapes

    rows = json.loads((cfg.run_dir / "quantize" / "variants.json").read_text())
    row = find(rows, name, NPU_VARIANT, "onnx")
    if row is None:
        return (f"no {NPU_VARIANT} (static QDQ) file for {name}, which NPU providers run: add {NPU_VARIANT} to "
                f"quantize.variants and run `make quantize`")
    fix_shapes(cfg.run_dir / row["file"], dest, 1, seq_len)
    return None
