"""`python -m tools.app_samples_jvm dist/demo --jars ~/.cache/pocketformer-jvm`: do a bundle's Kotlin samples
compile, and do they give the bundle's own answers when an app calls them?

Compiles the bundle's android/*.kt with the Kotlin compiler against ONNX Runtime's Java API (package
ai.onnxruntime: the same classes as the Android AAR) and small stubs of the few Android classes the samples use
(Context and its assets, Log, Build, PackageManager; onnxruntime-extensions' OrtxPackage answers with the custom-op
library of the Python onnxruntime-extensions package), then runs them on the JVM through their public API only:
- PocketformerClassifier.classify(text) on every text of samples.json: the label must be expected_label and the
  probability softmax(reference_logits of the -text.onnx file) at that label, within verify-bundle's logit
  tolerance (halved: a probability moves at most half as far as the logits); then EXTRA_TEXTS (empty, emoji,
  non-Latin, past max_length) against Python's onnxruntime on the same file;
- PocketformerNpuClassifier.classify(token_ids) on every sample, once as on a phone of no compiled chip (the
  CPU .ort path) and once as on the first compiled chip (no QNN provider on this machine: the sample must fall
  back to the CPU and say why); the label must be expected_label (a near tie in the .ort file's reference
  logits may resolve either way); with --run (the run folder the bundle was built from), also its HTP path
  on the CPU: the sample without its two QNN lines, the compiled graphs' QDQ sources as its context models
  (check_npu_htp_path);
- PocketformerGenerator.generate(prompt_ids, max_new_tokens) on every prompt: the token ids must be
  continuation_ids exactly; then the README's start ids for no text over the whole context against Python's
  onnxruntime (the pipeline's greedy loop), and the two refusals the sample promises (IllegalArgumentException);
and each companion demo(context), whose log line must report the first sample's answer.
Prints expected vs got per case and a summary line per check; exit 1 if any check fails, a sample crashes or
does not compile. Nothing runs on a phone: Android's own classes (and the Android build of ONNX Runtime, its
QNN provider) are not exercised, only the samples' Kotlin and their use of ONNX Runtime's API.

The jars are fetched once into --jars: the Kotlin compiler (`kotlin-compiler-embeddable` and its dependencies
with mvn from Maven Central; where Maven Central cannot be reached, the kotlinc distribution of the npm package
`kotlin-compiler`) and ONNX Runtime's Java jar (`com.microsoft.onnxruntime:onnxruntime` with mvn, at the
bundle's onnxruntime version unless --ort-version). Where no Maven repository is reachable, --ort-jar takes
a jar built elsewhere, or --ort-source DIR builds one from a checkout of ONNX Runtime's source (its java/ and
include/ folders: javac and a C compiler) against the Python onnxruntime package's libonnxruntime.so.
The Python onnxruntime-extensions library is a Python extension module: the JVM that loads it gets this
Python's libpython preloaded (LD_PRELOAD; Linux, a Python built with --enable-shared, as pyenv's are).
Needs java and javac (17+). One JVM at a time; --work keeps the generated sources, stubs and classes.
"""
from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from pipeline.errors import PipelineError
# verify-bundle's bound on a file's logits against its own stored reference
from pipeline.tasks.classification.logits_check import LOGIT_ATOL, LOGIT_RTOL
from tools.cli import ToolParser

KOTLIN = "2.4.20"
PACKAGE = "com.example.pocketformer"  # the generated samples' package line
SAMPLES = ("PocketformerClassifier", "PocketformerNpuClassifier", "PocketformerGenerator")
JVM = ["-XX:ActiveProcessorCount=1", "-Xss4m"]
# texts beyond samples.json for the classifier, scored against Python's onnxruntime on the same string-in file
EXTRA_TEXTS = ["", "thanks for the great flight \U0001F600\U0001F44D",
               "na\u00efve caf\u00e9 \u201cquoted\u201d \u4e2d\u6587 \u0645\u0631\u062d\u0628\u0627",
               " ".join(["a long text past max_length, cut by the in-graph tokenizer"] * 60)]

# Stubs of the Android classes the samples touch, with the signatures Android has (members the samples do not
# use are left out). Context takes the assets folder and filesDir, which an app's context knows by itself.
STUBS = {
    "android/content/Context.java": """package android.content;

import android.content.pm.PackageManager;
import android.content.res.AssetManager;
import java.io.File;

public class Context {
    private final File assets;
    private final File files;

    public Context(File assets, File files) { this.assets = assets; this.files = files; }
    public AssetManager getAssets() { return new AssetManager(assets); }
    public File getFilesDir() { files.mkdirs(); return files; }
    public String getPackageName() { return "com.example.pocketformer"; }
    public PackageManager getPackageManager() { return new PackageManager(); }
}
""",
    "android/content/res/AssetManager.java": """package android.content.res;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;

public final class AssetManager {
    private final File root;

    public AssetManager(File root) { this.root = root; }
    /** Android's: a path relative to assets/, "/"-separated; FileNotFoundException where there is none. */
    public InputStream open(String fileName) throws IOException {
        if (fileName.startsWith("/")) throw new java.io.FileNotFoundException(fileName);
        return new FileInputStream(new File(root, fileName));
    }
}
""",
    "android/content/pm/PackageManager.java": """package android.content.pm;

public class PackageManager {
    public static class NameNotFoundException extends Exception {
        public NameNotFoundException(String name) { super(name); }
    }

    public PackageInfo getPackageInfo(String packageName, int flags) throws NameNotFoundException {
        if (!"com.example.pocketformer".equals(packageName)) throw new NameNotFoundException(packageName);
        PackageInfo info = new PackageInfo();
        info.packageName = packageName;
        info.lastUpdateTime = Long.getLong("stub.lastUpdateTime", 1700000000000L);
        return info;
    }
}
""",
    "android/content/pm/PackageInfo.java": """package android.content.pm;

public class PackageInfo {
    public String packageName;
    public long firstInstallTime;
    public long lastUpdateTime;
}
""",
    "android/util/Log.java": """package android.util;

/** Android's Log: each call is one line "LOG<TAB>level<TAB>tag<TAB>message" on stdout for the probe. */
public final class Log {
    private static int out(String level, String tag, String msg) {
        System.out.println("LOG\\t" + level + "\\t" + tag + "\\t" + String.valueOf(msg).replace('\\n', ' '));
        return 0;
    }
    public static int v(String tag, String msg) { return out("V", tag, msg); }
    public static int d(String tag, String msg) { return out("D", tag, msg); }
    public static int i(String tag, String msg) { return out("I", tag, msg); }
    public static int w(String tag, String msg) { return out("W", tag, msg); }
    public static int e(String tag, String msg) { return out("E", tag, msg); }
    public static int e(String tag, String msg, Throwable tr) { return out("E", tag, msg + ": " + tr); }
}
""",
    "android/os/Build.java": """package android.os;

/** Build.SOC_MODEL (API 31+) and VERSION.SDK_INT from -Dstub.soc / -Dstub.sdk: not compile-time constants, as
 *  on Android, so the samples read them at run time. */
public class Build {
    public static final String SOC_MODEL = System.getProperty("stub.soc", "unknown");
    public static final String MODEL = "JVM";

    public static class VERSION {
        public static final int SDK_INT = Integer.getInteger("stub.sdk", 34);
    }
}
""",
    "ai/onnxruntime/extensions/OrtxPackage.java": """package ai.onnxruntime.extensions;

/** onnxruntime-extensions-android's entry point: the path of its custom-op library, here the Python package's.
 *  Like the real class (OrtxLibrary's static init), it loads the library into the JVM first, so closing the
 *  SessionOptions that registered it (which dlcloses ORT's handle) leaves it loaded. */
public final class OrtxPackage {
    static { System.load(System.getProperty("stub.ortx")); }

    private OrtxPackage() {}
    public static String getLibraryPath() { return System.getProperty("stub.ortx"); }
}
""",
}

# The harness: the sample classes through their public API, one line per case ("RESULT<TAB>i<TAB>answer" or
# "ERROR<TAB>i<TAB>exception"), then the companion demo (its Log line). Only the present samples' branches.
MAIN_HEAD = f"""package {PACKAGE}

import android.content.Context
import java.io.File
import java.util.Base64

private fun report(i: String, body: () -> String) {{
    try {{
        println("RESULT\\t$i\\t" + body())
    }} catch (e: Throwable) {{
        println("ERROR\\t$i\\t" + e.toString().replace('\\n', ' '))
        e.printStackTrace()
    }}
}}

fun main(args: Array<String>) {{
    val context = Context(File(args[1]), File(args[2]))
    val cases = File(args[3]).readLines()  // one line a case, none left out (an empty text is one)
    when (args[0]) {{
"""
BRANCHES = {
    "PocketformerClassifier": """        "classify" -> {
            report("open") { PocketformerClassifier(context).use { c ->
                cases.forEachIndexed { i, line ->
                    report("$i") {
                        val (label, p) = c.classify(String(Base64.getDecoder().decode(line), Charsets.UTF_8))
                        "$label\\t$p"
                    }
                }
            }; "closed" }
            report("demo") { PocketformerClassifier.demo(context); "ran" }
        }
""",
    "PocketformerNpuClassifier": """        "npu" -> {
            report("open") { PocketformerNpuClassifier(context).use { c ->
                cases.forEachIndexed { i, line ->
                    report("$i") {
                        val k = c.classify(line.split(",").map { it.trim().toInt() }.toIntArray())
                        "$k\\t${PocketformerNpuClassifier.LABELS[k]}"
                    }
                }
            }; "closed" }
            report("demo") { PocketformerNpuClassifier.demo(context); "ran" }
        }
""",
    "PocketformerGenerator": """        "generate" -> {
            report("open") { PocketformerGenerator(context).use { g ->
                cases.forEachIndexed { i, line ->
                    report("$i") {
                        val (n, ids) = line.split("\\t")
                        val prompt = ids.split(",").filter { it.isNotBlank() }.map { it.trim().toLong() }
                        g.generate(prompt.toLongArray(), n.toInt()).joinToString(",")
                    }
                }
            }; "closed" }
            report("demo") { PocketformerGenerator.demo(context); "ran" }
        }
""",
}
MAIN_TAIL = """        else -> error("unknown mode ${args[0]}")
    }
}
"""


def _run(cmd: list, what: str, timeout: int = 1800, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    except FileNotFoundError:
        raise PipelineError(f"{cmd[0]} is not installed: {what} needs it") from None
    except subprocess.TimeoutExpired:
        raise PipelineError(f"{what} took more than {timeout} s") from None


def _mvn_copy(coords: list[str], dest: Path, scratch: Path) -> bool:
    """mvn copies these artifacts and their runtime dependencies into dest; False where it cannot (no Maven
    repository reachable, an unknown version)."""
    if shutil.which("mvn") is None:
        return False
    deps = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
                   for g, a, v in (c.split(":") for c in coords))
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion><groupId>probe</groupId>'
        f'<artifactId>app-samples-jvm</artifactId><version>1</version><dependencies>{deps}</dependencies></project>\n')
    r = _run(["mvn", "-q", "-B", "-Dstyle.color=never", "dependency:copy-dependencies", "-DincludeScope=runtime",
              f"-DoutputDirectory={dest}"], f"mvn ({', '.join(coords)})", cwd=scratch)
    if r.returncode:
        out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)  # mvn colours some lines whatever it is told
        why = next((line for line in out.splitlines() if "ERROR" in line), "no error line")
        print(f"mvn could not fetch {', '.join(coords)}: {why[:300]}", file=sys.stderr)
    return r.returncode == 0


def _npm_kotlin(version: str, dest: Path, scratch: Path) -> bool:
    """The kotlinc distribution of the npm package kotlin-compiler: the compiler and the jars it runs with."""
    if shutil.which("npm") is None:
        return False
    scratch.mkdir(parents=True, exist_ok=True)
    r = _run(["npm", "pack", f"kotlin-compiler@{version}", "--pack-destination", scratch], "npm pack kotlin-compiler")
    tgz = next(scratch.glob("kotlin-compiler-*.tgz"), None)
    if r.returncode or tgz is None:
        print(f"npm could not fetch kotlin-compiler@{version}: {r.stderr.strip()[:200]}", file=sys.stderr)
        return False
    want = {"kotlin-compiler.jar", "kotlin-stdlib.jar", "kotlin-reflect.jar", "kotlin-script-runtime.jar",
            "annotations-13.0.jar", "kotlinx-coroutines-core-jvm.jar"}
    with tarfile.open(tgz) as t:
        for m in t.getmembers():
            name = m.name.rsplit("/", 1)[-1]
            if m.isfile() and m.name.startswith("package/lib/") and name in want:
                (dest / name).write_bytes(t.extractfile(m).read())
    return all((dest / n).is_file() for n in want)


def kotlin_jars(jars: Path, version: str) -> list[Path]:
    """The compiler's classpath, fetched once into jars/kotlin-VERSION/ (mvn, else npm)."""
    dest = jars / f"kotlin-{version}"
    if not (dest / ".complete").is_file():
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        ok = _mvn_copy([f"org.jetbrains.kotlin:kotlin-compiler-embeddable:{version}"], dest, jars / ".mvn-kotlin")
        source = "mvn: org.jetbrains.kotlin:kotlin-compiler-embeddable"
        if not ok:  # what mvn copied before it failed is not mixed with npm's jars
            shutil.rmtree(dest)
            dest.mkdir()
            ok = _npm_kotlin(version, dest, jars / ".npm-kotlin")
            source = "npm: kotlin-compiler"
        if not ok:
            shutil.rmtree(dest, ignore_errors=True)
            raise PipelineError(f"could not fetch the Kotlin compiler {version}: neither mvn "
                                f"(org.jetbrains.kotlin:kotlin-compiler-embeddable) nor npm (kotlin-compiler) reached "
                                f"a registry that has it; try --kotlin with another version")
        (dest / ".complete").write_text(f"{version} ({source})\n")
    return sorted(dest.glob("*.jar"))


def _python_ort() -> tuple[str, Path]:
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    lib = next(iter(sorted(capi.glob("libonnxruntime.so*"))), None)
    if lib is None:
        raise PipelineError(f"the Python onnxruntime package has no libonnxruntime.so in {capi} (a Linux wheel has "
                            f"one): --ort-source builds the Java binding against it")
    return onnxruntime.__version__, lib


def build_ort_jar(source: Path, jars: Path) -> Path:
    """ONNX Runtime's Java binding from a source checkout: javac its classes (java/src/main/java and jvm/, with
    the JNI headers), cc its JNI C files against include/, packed with the Python package's libonnxruntime.so
    where the official jar keeps its natives (ai/onnxruntime/native/linux-x64/). Cached by both versions."""
    java, native = source / "java" / "src" / "main", source / "java" / "src" / "main" / "native"
    header = source / "include" / "onnxruntime" / "core" / "session" / "onnxruntime_c_api.h"
    if not (native.is_dir() and header.is_file()):
        raise PipelineError(f"--ort-source {source} is not a checkout of ONNX Runtime's source: it needs "
                            f"java/src/main/native/ and include/onnxruntime/core/session/onnxruntime_c_api.h")
    src_version = (source / "VERSION_NUMBER").read_text().strip() if (source / "VERSION_NUMBER").is_file() else "src"
    py_version, lib = _python_ort()
    out = jars / f"onnxruntime-java{src_version}-native{py_version}.jar"
    if out.is_file():
        return out
    with tempfile.TemporaryDirectory(dir=jars) as tmp:
        tmp = Path(tmp)
        classes, hdr, cfg, natives = tmp / "classes", tmp / "hdr", tmp / "cfg", tmp / "native"
        for d in (classes, hdr, cfg, natives):
            d.mkdir()
        sources = [str(p) for d in ("java", "jvm") for p in sorted((java / d).rglob("*.java"))]
        (tmp / "sources.txt").write_text("\n".join(sources) + "\n")
        r = _run(["javac", "-J-XX:ActiveProcessorCount=1", "--release", "8", "-nowarn", "-d", classes, "-h", hdr,
                  f"@{tmp / 'sources.txt'}"], "javac (ONNX Runtime's Java classes)")
        if r.returncode:
            raise PipelineError(f"javac failed on {java}: {r.stderr.strip()[-2000:]}")
        (cfg / "onnxruntime_config.h").write_text(f'#pragma once\n#define ORT_VERSION "{src_version}"\n')
        (natives / "libonnxruntime.so").write_bytes(lib.read_bytes())
        jdk = Path(os.path.realpath(shutil.which("javac"))).parent.parent / "include"
        inc = source / "include"
        includes = [hdr, cfg, inc, inc / "onnxruntime", inc / "onnxruntime" / "core" / "session", jdk, jdk / "linux"]
        includes += [p.parent for p in source.glob("orttraining/**/onnxruntime_training_c_api.h")]
        r = _run(["cc", "-O2", "-shared", "-fPIC", "-w", "-o", natives / "libonnxruntime4j_jni.so",
                  *[f"-I{i}" for i in includes], *sorted(native.glob("*.c")), f"-L{natives}", "-lonnxruntime"],
                 "cc (ONNX Runtime's JNI library)")
        if r.returncode:
            raise PipelineError(f"cc failed on {native}: {r.stderr.strip()[-2000:]}")
        packed = classes / "ai" / "onnxruntime" / "native" / "linux-x64"
        packed.mkdir(parents=True)
        for f in natives.glob("*.so"):
            shutil.copy(f, packed / f.name)
        for f in lib.parent.glob("libonnxruntime_providers_shared.so"):
            shutil.copy(f, packed / f.name)
        r = _run(["jar", "cf", tmp / "ort.jar", "-C", classes, "."], "jar")
        if r.returncode:
            raise PipelineError(f"jar failed: {r.stderr.strip()}")
        shutil.move(tmp / "ort.jar", out)
    return out


def ort_jar(jars: Path, version: str, given: Path | None, source: Path | None) -> Path:
    if given is not None:
        if not given.is_file():
            raise PipelineError(f"--ort-jar {given} does not exist")
        return given
    if source is not None:
        return build_ort_jar(source, jars)
    dest = jars / f"onnxruntime-{version}"
    found = sorted(dest.glob("onnxruntime-*.jar"))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        _mvn_copy([f"com.microsoft.onnxruntime:onnxruntime:{version}"], dest, jars / ".mvn-ort")
        found = sorted(dest.glob("onnxruntime-*.jar"))
    if not found:
        raise PipelineError(f"no ONNX Runtime Java jar {version}: mvn could not fetch "
                            f"com.microsoft.onnxruntime:onnxruntime:{version} (no Maven repository reachable?); "
                            f"give --ort-jar FILE, --ort-source DIR (a checkout of ONNX Runtime's source) or "
                            f"--ort-version")
    return found[0]


def _classpath(paths) -> str:
    return os.pathsep.join(str(p) for p in paths)


def compile_samples(sources: dict[str, str], kotlin: list[Path], ort: Path, work: Path) -> list[Path]:
    """Stubs (javac), then the samples (class name -> Kotlin source) and the harness (kotlinc); the runtime
    classpath, or [] where kotlinc refused them (its output printed)."""
    stubs_src, stubs, src, classes = work / "stubs-src", work / "stubs", work / "src", work / "classes"
    for d in (stubs_src, stubs, src, classes):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for rel, text in STUBS.items():
        (stubs_src / rel).parent.mkdir(parents=True, exist_ok=True)
        (stubs_src / rel).write_text(text)
    r = _run(["javac", "-J-XX:ActiveProcessorCount=1", "--release", "8", "-nowarn", "-d", stubs,
              *sorted(stubs_src.rglob("*.java"))], "javac (the Android stubs)")
    if r.returncode:
        raise PipelineError(f"javac failed on the stubs: {r.stderr.strip()[-2000:]}")
    for name, text in sources.items():
        (src / f"{name}.kt").write_text(text)
    (src / "Main.kt").write_text(MAIN_HEAD + "".join(BRANCHES[n] for n in sources) + MAIN_TAIL)
    stdlib = [j for j in kotlin if j.name.startswith("kotlin-stdlib")]
    r = _run(["java", *JVM, "-cp", _classpath(kotlin), "org.jetbrains.kotlin.cli.jvm.K2JVMCompiler",
              "-no-stdlib", "-no-reflect", "-jvm-target", "17", "-cp", _classpath([*stdlib, ort, stubs]),
              "-d", classes, *sorted(src.glob("*.kt"))], "kotlinc")
    out = (r.stdout + r.stderr).strip()
    if r.returncode:
        print(f"compile: FAILED\n{out}")
        return []
    warnings = [line for line in out.splitlines() if "warning:" in line and "Main.kt" not in line]
    print(f"compile: {', '.join(f'{n}.kt' for n in sources)} compiled"
          + (f" with {len(warnings)} warning(s):\n  " + "\n  ".join(warnings) if warnings else ", no warnings"))
    return [classes, stubs, *stdlib, ort]


def _ortx_library() -> tuple[str, dict]:
    """The custom-op library of the Python onnxruntime-extensions package, and the environment the JVM needs to
    load it: it is a Python extension module, whose Py* symbols libpython provides (preloaded; the ops that
    the samples use never call into Python)."""
    import sysconfig

    try:
        import onnxruntime_extensions
    except ImportError:
        raise PipelineError("the classifier sample registers onnxruntime-extensions' custom ops: pip install "
                            "onnxruntime-extensions (its library stands in for the Android package's)") from None
    libpython = Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("INSTSONAME") or "")
    if not libpython.is_file():
        raise PipelineError(f"this Python has no shared libpython ({libpython}), which onnxruntime-extensions' "
                            f"library needs outside Python: use a Python built with --enable-shared")
    return onnxruntime_extensions.get_library_path(), {"LD_PRELOAD": str(libpython)}


def _harness(cp: list[Path], mode: str, assets: Path, work: Path, cases: list[str], ortx: tuple[str, dict],
             soc: str = "unknown") -> tuple[dict, list[tuple[str, str]], str]:
    """Runs one mode in a fresh JVM: ({case: ("RESULT"|"ERROR", text)}, Log lines (tag, message), stderr)."""
    files = work / f"files-{mode}-{soc}"
    shutil.rmtree(files, ignore_errors=True)
    (work / "tmp").mkdir(exist_ok=True)
    case_file = work / f"cases-{mode}.txt"
    case_file.write_text("".join(c + "\n" for c in cases))
    r = _run(["java", *JVM, f"-Djava.io.tmpdir={work / 'tmp'}", f"-Dstub.soc={soc}", f"-Dstub.ortx={ortx[0]}",
              "-cp", _classpath(cp), f"{PACKAGE}.MainKt", mode, assets, files, case_file], f"the {mode} harness",
             env={**os.environ, **ortx[1]})
    results, logs = {}, []
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if parts[0] in ("RESULT", "ERROR") and len(parts) >= 3:
            results[parts[1]] = (parts[0], "\t".join(parts[2:]))
        elif parts[0] == "LOG" and len(parts) >= 4:
            logs.append((parts[2], "\t".join(parts[3:])))
    if r.returncode and not results:
        results["open"] = ("ERROR", f"the JVM exited {r.returncode}: {r.stderr.strip()[-600:]}")
    return results, logs, r.stderr


def _assets(bundle: Path, work: Path, rels: list[str]) -> Path:
    """app/src/main/assets as the README builds it: each named file (or folder) under its own name."""
    assets = work / "assets"
    shutil.rmtree(assets, ignore_errors=True)
    assets.mkdir(parents=True)
    for rel, name in rels:
        (assets / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink((bundle / rel).resolve(), assets / name)
    return assets


def _softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


class Tally:
    def __init__(self):
        self.bad = 0
        self.lines = []

    def sample(self, what: str, i: int, text: str, want: str, got: str, ok: bool, note: str = "") -> None:
        """One case, printed; the summary line after the cases counts them."""
        print(f"{what} sample {i + 1} {text!r:.50}\n    expected {want}\n    got      {got}\n    "
              f"{'agrees' if ok else 'DISAGREES'}{f' ({note})' if note else ''}")

    def summary(self, line: str, ok: bool) -> None:
        self.bad += not ok
        self.lines.append(line)
        print(line)


def _opened(t: Tally, what: str, results: dict) -> bool:
    kind, text = results.get("open", ("ERROR", "the harness printed nothing"))
    if kind == "ERROR":
        t.summary(f"{what}: CRASHED: {text}", False)
        return False
    return True


def _demo(t: Tally, what: str, results: dict, logs: list, want: str, check) -> None:
    kind, text = results.get("demo", ("ERROR", "not run"))
    line = next((m for tag, m in reversed(logs) if tag == "pocketformer"), None)
    if kind == "ERROR":
        t.summary(f"{what}.demo: CRASHED: {text}", False)
    else:
        ok = line is not None and check(line)
        t.summary(f"{what}.demo: log {line!r}, expected {want}: {'agrees' if ok else 'DISAGREES'}", ok)


def _python_text_model(path: Path, ortx: str, text_in: str, texts: list[str]) -> list[list[float]]:
    """Logits of the string-in model for each text through Python's onnxruntime, one text per call, one thread."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.register_custom_ops_library(ortx)
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return [[float(v) for v in sess.run(["logits"], {text_in: np.array([t], dtype=object)})[0][0]] for t in texts]


def check_classifier(t: Tally, bundle: Path, meta: dict, samples: list[dict], cp: list[Path], work: Path,
                     ortx: tuple[str, dict]) -> None:
    """samples.json's texts against their stored reference logits, then EXTRA_TEXTS against Python's
    onnxruntime on the same file (texts the samples may lack: empty, past max_length, emoji, non-Latin)."""
    model = meta["models"]["string_onnx"]
    rel, text_in = model["file"], model["inputs"][0]["name"]
    assets = _assets(bundle, work, [(rel, rel.split("/")[-1])])
    extra = _python_text_model(bundle / rel, ortx[0], text_in, EXTRA_TEXTS)
    rows = [(s["text"], s["reference_logits"][rel], s["expected_label"]) for s in samples]
    rows += [(text, ref, meta["labels"][max(range(len(ref)), key=ref.__getitem__)]) for text, ref in zip(EXTRA_TEXTS, extra)]
    cases = [base64.b64encode(text.encode("utf-8")).decode("ascii") for text, _, _ in rows]
    results, logs, _ = _harness(cp, "classify", assets, work, cases, ortx)
    if not _opened(t, "PocketformerClassifier", results):
        return
    labels, worst, agree = meta["labels"], [0.0, 0.0], [0, 0]
    for i, (text, ref, want) in enumerate(rows):
        k = int(i >= len(samples))  # 0: a sample of samples.json, 1: an extra text
        what = "PocketformerClassifier.classify" + (" (extra text, reference: Python onnxruntime)" if k else "")
        probs = _softmax(ref)
        kind, answer = results.get(str(i), ("ERROR", "no answer"))
        if kind == "ERROR":
            t.sample(what, i - k * len(samples), text, want, f"crash: {answer}", False)
            continue
        label, p = answer.split("\t")
        p = float(p)
        # verify-bundle's logit bound, and the probability bound it implies (|dp| <= |dz| / 2 for a softmax)
        allowed = LOGIT_ATOL + LOGIT_RTOL * max(abs(v) for v in ref)
        best = labels.index(label) if label in labels else -1
        near_tie = best >= 0 and ref[best] >= max(ref) - 2 * allowed
        diff = abs(p - probs[best]) if best >= 0 else float("inf")
        ok = (label == want or near_tie) and diff <= allowed / 2
        worst[k] = max(worst[k], diff)
        agree[k] += ok
        t.sample(what, i - k * len(samples), text, f"{want} p={probs[labels.index(want)]:.6f}", f"{label} p={p:.6f}",
                 ok, f"|dp| {diff:.2e}, allowed {allowed / 2:.2e}" + ("; a near tie" if label != want and near_tie else ""))
    t.summary(f"PocketformerClassifier.classify: {agree[0]}/{len(samples)} samples of samples.json agree (label and "
              f"probability; max |dp| {worst[0]:.2e})", agree[0] == len(samples))
    t.summary(f"PocketformerClassifier.classify: {agree[1]}/{len(EXTRA_TEXTS)} extra texts agree with Python's "
              f"onnxruntime on {rel} (max |dp| {worst[1]:.2e})", agree[1] == len(EXTRA_TEXTS))
    first = samples[0]
    p0 = _softmax(first["reference_logits"][rel])[labels.index(first["expected_label"])]
    _demo(t, "PocketformerClassifier", results, logs, f"label={first['expected_label']} p~{p0:.4f}",
          lambda line: line.startswith(f"label={first['expected_label']} p=")
          and abs(float(line.split("p=")[1]) - p0) <= (LOGIT_ATOL + LOGIT_RTOL * 10) / 2)


def check_npu(t: Tally, bundle: Path, meta: dict, samples: list[dict], cp: list[Path], work: Path,
              ortx: tuple[str, dict]) -> None:
    ort_rel = meta["models"]["ort"]["file"]
    assets = _assets(bundle, work, [("npu", "npu"), (ort_rel, ort_rel.split("/")[-1])])
    cases = [",".join(str(i) for i in s["token_ids"]) for s in samples]
    chips = meta["qnn"]["chips"]
    socs = ["unknown"] + [e["android_soc_model"] for e in chips.values() if e.get("android_soc_model")][:1]
    labels = meta["labels"]
    for soc in socs:
        what = f"PocketformerNpuClassifier (Build.SOC_MODEL {soc})"
        results, logs, _ = _harness(cp, "npu", assets, work, cases, ortx, soc=soc)
        path = next((m for tag, m in logs if tag == "pocketformer" and m.startswith("NPU path")), None)
        t.summary(f"{what}: log {path!r}", path is not None)
        if not _opened(t, what, results):
            continue
        agree = 0
        for i, s in enumerate(samples):
            want = s["expected_label"]
            kind, text = results.get(str(i), ("ERROR", "no answer"))
            if kind == "ERROR":
                t.sample(f"{what}.classify", i, s["text"], want, f"crash: {text}", False)
                continue
            k, label = text.split("\t")
            ref = s["reference_logits"].get(ort_rel)
            allowed = LOGIT_ATOL + LOGIT_RTOL * max(abs(v) for v in ref) if ref else 0
            near_tie = ref is not None and label in labels and ref[labels.index(label)] >= max(ref) - 2 * allowed
            ok = label == want or near_tie
            agree += ok
            t.sample(f"{what}.classify", i, s["text"], want, label, ok,
                     "a near tie" if label != want and near_tie else "")
        t.summary(f"{what}.classify: {agree}/{len(samples)} labels agree", agree == len(samples))
        first = samples[0]["expected_label"]
        _demo(t, what, results, logs, f"label={first}", lambda line: line.startswith(f"label={first} "))


def check_npu_htp_path(t: Tally, bundle: Path, meta: dict, samples: list[dict], run: Path, kotlin: list[Path],
                       ort: Path, work: Path) -> None:
    """The NPU sample's HTP path (runNpu: the shortest compiled length that holds the ids, padding, the session per
    length), which needs the QNN provider, on the CPU: a copy of the sample without its two QNN lines (addQnn and
    the no-CPU-fallback entry), each npu/qnn/<chip>/<variant>-<n>_ctx.onnx asset replaced by the QDQ file it was
    compiled from (metadata "source", in the run folder; its shapes are dynamic). The label must be the one the
    file's stored reference logits give at that length (the HTP emulator's; the .ort file's for the samples the
    build did not emulate), up to twice the emulator's recorded difference from the CPU on a near tie; a text
    the chip's lengths do not hold must take the CPU .ort path."""
    chip_key, chip = next(((c, e) for c, e in meta["qnn"]["chips"].items() if e.get("android_soc_model")), (None, None))
    what = f"PocketformerNpuClassifier HTP path, simulated on the CPU ({chip_key}, Build.SOC_MODEL " \
           f"{chip and chip['android_soc_model']})"
    if chip is None:
        t.summary(f"{what}: metadata qnn names no chip with an android_soc_model", False)
        return
    kt = (bundle / "android" / "PocketformerNpuClassifier.kt").read_text()
    lines = kt.splitlines(keepends=True)
    qnn_lines = [ln for ln in lines if "options.addQnn(" in ln or '"session.disable_cpu_ep_fallback"' in ln]
    if len(qnn_lines) != 2:
        t.summary(f"{what}: the sample's QNN lines (addQnn, disable_cpu_ep_fallback) are not one each: "
                  f"{len(qnn_lines)} found, nothing to cut", False)
        return
    sim = work / "npu-sim"
    cp = compile_samples({"PocketformerNpuClassifier": "".join(ln for ln in lines if ln not in qnn_lines)},
                         kotlin, ort, sim)
    if not cp:
        t.summary(f"{what}: the copy without its QNN lines did not compile", False)
        return
    ort_rel = meta["models"]["ort"]["file"]
    rels = [(ort_rel, ort_rel.split("/")[-1])]
    for f in chip["files"].values():
        source = run / f["source"]
        if not source.is_file():
            raise PipelineError(f"{source} does not exist: --run must be the run folder this bundle was built from "
                                f"(metadata qnn names {f['source']} in it)")
        rels += [(source, f["file"]), (f["binary"], f["binary"])]
    assets = sim / "assets"
    shutil.rmtree(assets, ignore_errors=True)
    for rel, name in rels:
        (assets / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink((bundle / rel).resolve(), assets / name)
    results, logs, _ = _harness(cp, "npu", assets, sim, [",".join(map(str, s["token_ids"])) for s in samples],
                                ("", {}), soc=chip["android_soc_model"])
    path = next((m for tag, m in logs if tag == "pocketformer" and m.startswith("NPU path")), None)
    t.summary(f"{what}: log {path!r}", path is not None and path.startswith("NPU path on"))
    if not _opened(t, what, results):
        return
    labels, lengths, agree = meta["labels"], sorted(int(n) for n in chip["files"]), 0
    for i, s in enumerate(samples):
        n = next((L for L in lengths if L >= len(s["token_ids"])), None)
        spec = chip["files"][str(n)] if n else None
        # the emulator's logits where the build stored them (it runs a few samples), else the .ort file's
        source = spec["file"] if spec and spec["file"] in s["reference_logits"] else ort_rel
        ref = s["reference_logits"][source]
        slack = max((spec or {}).get("emulator", {}).get("max_abs_diff") or 0, LOGIT_ATOL)
        want = labels[max(range(len(ref)), key=ref.__getitem__)]
        kind, text = results.get(str(i), ("ERROR", "no answer"))
        label = text.split("\t")[-1] if kind == "RESULT" else None
        near_tie = ref is not None and label in labels and ref[labels.index(label)] >= max(ref) - 2 * slack
        ok = label == want or near_tie
        agree += ok
        source += f", length {n}" if n else f": no compiled length holds {len(s['token_ids'])} ids"
        t.sample(f"{what}.classify", i, s["text"], f"{want} ({source})", label if kind == "RESULT" else f"crash: {text}",
                 ok, "a near tie" if label != want and near_tie else "")
    t.summary(f"{what}.classify: {agree}/{len(samples)} labels agree with the stored references",
              agree == len(samples))


def check_generator(t: Tally, bundle: Path, meta: dict, samples: list[dict], cp: list[Path], work: Path,
                    ortx: tuple[str, dict]) -> None:
    """samples.json's prompts against their stored continuations; then the README's prompt for no text over the
    whole context against Python's onnxruntime (pipeline's own greedy loop), and the two refusals the sample
    promises (an empty prompt; more ids than the position table) as IllegalArgumentException."""
    from export.app_samples.common import from_nothing
    from pipeline.tasks.generation.replay import ort_greedy

    rel, eos, positions = meta["graph"]["file"], meta["special_ids"]["eos_token_id"], meta["graph"]["context_length"]
    assets = _assets(bundle, work, [(rel, rel.split("/")[-1])])
    start = from_nothing(meta)
    rows = [(s["prompt"], s["prompt_ids"], s["max_new_tokens"], s["continuation_ids"]) for s in samples]
    rows.append(("(no text: the README's start ids, the whole context; reference: Python onnxruntime)", start,
                 positions - len(start), ort_greedy(bundle, start, positions - len(start), eos)))
    first = samples[0]["prompt_ids"]
    refusals = [("(refusal: empty prompt)", [], 1), ("(refusal: one id more than the positions)", first,
                                                        positions - len(first) + 1)]
    cases = [f"{n}\t{','.join(str(i) for i in ids)}" for _, ids, n, *_ in rows + refusals]
    results, logs, _ = _harness(cp, "generate", assets, work, cases, ortx)
    if not _opened(t, "PocketformerGenerator", results):
        return
    oks, tokens, same = [], 0, 0
    for i, (prompt, ids, n, want) in enumerate(rows):
        kind, text = results.get(str(i), ("ERROR", "no answer"))
        if kind == "ERROR":
            oks.append(False)
            t.sample("PocketformerGenerator.generate", i, prompt, str(want), f"crash: {text}", False)
            continue
        got = [int(x) for x in text.split(",") if x]
        oks.append(got == want)
        tokens += len(want)
        same += sum(a == b for a, b in zip(got, want))
        first_diff = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        t.sample("PocketformerGenerator.generate", i, prompt, f"{len(want)} ids {_ids(want)}",
                 f"{len(got)} ids {_ids(got)}", oks[-1], "" if oks[-1] else f"first difference at new token {first_diff + 1}")
    t.summary(f"PocketformerGenerator.generate: {sum(oks[:-1])}/{len(samples)} continuations of samples.json "
              f"identical ({same}/{tokens} tokens in all at their position, the extra prompt included)",
              all(oks[:-1]))
    t.summary(f"PocketformerGenerator.generate from no text ({start}, {len(rows[-1][3])} new ids, the whole context): "
              f"{'identical to' if oks[-1] else 'DIFFERS from'} Python's onnxruntime greedy loop", oks[-1])
    for j, (what, ids, n) in enumerate(refusals, len(rows)):
        kind, text = results.get(str(j), ("ERROR", "no answer"))
        ok = kind == "ERROR" and "IllegalArgumentException" in text
        t.summary(f"PocketformerGenerator.generate {what}: {text[:200]!r}: "
                  f"{'refused as promised' if ok else 'NOT REFUSED with IllegalArgumentException'}", ok)
    _demo(t, "PocketformerGenerator", results, logs, "matches samples.json: true",
          lambda line: line.endswith("matches samples.json: true"))


def _ids(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 40 else f"[{', '.join(map(str, ids[:20]))}, ..., {', '.join(map(str, ids[-5:]))}]"


def main(argv: list[str] | None = None) -> int:
    ap = ToolParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path, help="an app bundle folder (dist/<run>) with android/*.kt")
    ap.add_argument("--jars", type=Path, required=True, help="where the fetched jars are kept between runs")
    ap.add_argument("--kotlin", default=KOTLIN, help=f"Kotlin compiler version (default {KOTLIN})")
    ap.add_argument("--ort-version", help="ONNX Runtime Java version (default: the bundle's, metadata versions)")
    ap.add_argument("--ort-jar", type=Path, help="an ONNX Runtime Java jar to use as it is (no fetch)")
    ap.add_argument("--ort-source", type=Path,
                    help="a checkout of ONNX Runtime's source: build the Java binding from it (java/, include/) "
                         "against the Python onnxruntime package's native library")
    ap.add_argument("--work", type=Path, help="keep the sources, stubs and classes here (default: a temporary folder)")
    ap.add_argument("--run", type=Path,
                    help="the run folder the bundle was built from (runs/<run>): also run the NPU sample's HTP path "
                         "on the CPU, with the QDQ files its context binaries were compiled from")
    a = ap.parse_args(argv)
    bundle = a.bundle
    if not (bundle / "metadata.json").is_file():
        raise PipelineError(f"{bundle} is not a bundle folder (no metadata.json): give dist/<run> of `make bundle`")
    present = [n for n in SAMPLES if (bundle / "android" / f"{n}.kt").is_file()]
    if not present:
        raise PipelineError(f"{bundle}/android has no Kotlin sample ({', '.join(f'{n}.kt' for n in SAMPLES)})")
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise PipelineError(f"{tool} is not installed: the probe compiles and runs the samples on a JDK (17+)")
    if a.run is not None and not a.run.is_dir():
        raise PipelineError(f"run folder {a.run} does not exist: give --run runs/<name>, the run the bundle was built from")
    meta = json.loads((bundle / "metadata.json").read_text())
    samples = json.loads((bundle / meta.get("samples_file", "samples.json")).read_text())
    a.jars.mkdir(parents=True, exist_ok=True)
    jars = a.jars.resolve()
    kotlin = kotlin_jars(jars, a.kotlin)
    ort = ort_jar(jars, a.ort_version or meta.get("versions", {}).get("onnxruntime", "1.20.0"),
                  a.ort_jar, a.ort_source and a.ort_source.resolve())
    ortx = _ortx_library() if "PocketformerClassifier" in present else ("", {})
    jdk = _run(["java", "-version"], "java -version").stderr.strip().splitlines()[:1]
    print(f"bundle {bundle} (run {meta.get('run')}, built with onnxruntime "
          f"{meta.get('versions', {}).get('onnxruntime', '?')}); Kotlin "
          f"{(jars / f'kotlin-{a.kotlin}' / '.complete').read_text().strip()}; ONNX Runtime Java {ort.name}; "
          f"{' '.join(jdk)}")
    with tempfile.TemporaryDirectory() as tmp:
        work = (a.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        cp = compile_samples({n: (bundle / "android" / f"{n}.kt").read_text() for n in present}, kotlin, ort, work)
        if not cp:
            print("verdict: the Kotlin samples do not compile")
            return 1
        t = Tally()
        if "PocketformerClassifier" in present:
            check_classifier(t, bundle, meta, samples, cp, work, ortx)
        if "PocketformerNpuClassifier" in present:
            check_npu(t, bundle, meta, samples, cp, work, ortx)
            if a.run is not None:
                check_npu_htp_path(t, bundle, meta, samples, a.run.resolve(), kotlin, ort, work)
        if "PocketformerGenerator" in present:
            check_generator(t, bundle, meta, samples, cp, work, ortx)
    print("\n".join(["", "summary:", *t.lines]))
    print(f"verdict: {'every sample agrees with the bundle' if not t.bad else f'{t.bad} of {len(t.lines)} checks above failed'}")
    return 1 if t.bad else 0


if __name__ == "__main__":
    from tools.cli import main_exit

    raise SystemExit(main_exit(main))
