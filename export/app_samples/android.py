"""Kotlin samples over ONNX Runtime's Android API. Generator: the KV-cache greedy loop verify-bundle runs
(prompt once with an empty past, then one token a step with present.N.* fed back as past_key_values.N.*,
argmax of the last position, stop at eos); its demo replays the first stored sample."""
from __future__ import annotations

from export.app_samples.common import generation_facts, header, kt_in_string, kt_string, ort_version


def _package(*imports: str) -> str:
    """The package line and the sorted imports: ONNX Runtime's, Context and Log in every sample, then imports."""
    common = ("ai.onnxruntime.OnnxTensor", "ai.onnxruntime.OrtEnvironment", "ai.onnxruntime.OrtSession",
              "android.content.Context", "android.util.Log")
    return "package com.example.pocketformer\n\n" + "\n".join(f"import {i}" for i in sorted({*common, *imports}))


def classifier(meta: dict) -> str:
    """The string-in sample; empty when the bundle has no string-in model (metadata string_model_check says
    why): the README then points at the .ort file and tokenizer.json."""
    text_model = meta["models"].get("string_onnx")
    if text_model is None:
        return ""
    (text_in,) = [i["name"] for i in text_model["inputs"]]
    probs = next(o["name"] for o in text_model["outputs"] if o["name"] == "probabilities")
    labels = ", ".join(kt_string(label) for label in meta["labels"])
    sample = kt_string(meta["samples"][0]["text"]) if meta.get("samples") else '"what a great day"'
    asset = text_model["file"].split("/")[-1]
    return f"""{header(meta)}
// Model: {meta['model']['name']} {meta['model']['variant']}, raw text in ({text_in}), {probs} out.
// Gradle (app/build.gradle.kts):
//   implementation("com.microsoft.onnxruntime:onnxruntime-android:{ort_version(meta)}")
//   implementation("com.microsoft.onnxruntime:onnxruntime-extensions-android:<latest>")  // the tokenizer op
// Copy {text_model['file']} into app/src/main/assets/.
{_package("ai.onnxruntime.extensions.OrtxPackage")}

class PocketformerClassifier(context: Context) : AutoCloseable {{
    private val env = OrtEnvironment.getEnvironment()
    // the session keeps what it needs of the options: both they and the asset stream are closed once it loads
    private val session: OrtSession = OrtSession.SessionOptions().use {{ options ->
        // the tokenizer inside the graph is an onnxruntime-extensions op: register it before loading
        options.registerCustomOpLibrary(OrtxPackage.getLibraryPath())
        env.createSession(context.assets.open("{asset}").use {{ it.readBytes() }}, options)
    }}

    /** (label, probability) for one text; the graph tokenizes it exactly as in training. */
    fun classify(text: String): Pair<String, Float> {{
        OnnxTensor.createTensor(env, arrayOf(text), longArrayOf(1)).use {{ input ->
            session.run(mapOf("{text_in}" to input)).use {{ result ->
                @Suppress("UNCHECKED_CAST")
                val scores = (result.get("{probs}").get().value as Array<FloatArray>)[0]
                val best = scores.indices.maxByOrNull {{ scores[it] }}!!
                return LABELS[best] to scores[best]
            }}
        }}
    }}

    override fun close() {{
        session.close()
    }}

    companion object {{
        val LABELS = listOf({labels})

        /** Call from an Activity: prints the label of one text to logcat. */
        fun demo(context: Context) {{
            PocketformerClassifier(context).use {{ c ->
                val (label, p) = c.classify({sample})
                Log.i("pocketformer", "label=$label p=$p")
            }}
        }}
    }}
}}
"""


def generator(meta: dict) -> str:
    f = generation_facts(meta)
    return f"""{header(meta)}
// Greedy generation with the KV cache over ONNX Runtime's Java API: {meta['graph']['file']}, {f['layers']} layers,
// {f['kv']} key/value heads of size {f['head']}, vocabulary {f['vocab']} (the teacher tokenizer's ids), eos {f['eos']}.
// Gradle: implementation("com.microsoft.onnxruntime:onnxruntime-android:{ort_version(meta)}")
// Copy {meta['graph']['file']} into app/src/main/assets/. Tokenize with tokenizer.json (any BPE
// implementation of it), or use onnxruntime-genai's Android package, which loads the whole bundle folder.
{_package("java.nio.FloatBuffer", "java.nio.LongBuffer")}

class PocketformerGenerator(context: Context) : AutoCloseable {{
    private val env = OrtEnvironment.getEnvironment()
    private val session: OrtSession = OrtSession.SessionOptions().use {{ options ->
        env.createSession(context.assets.open("{f['file']}").use {{ it.readBytes() }}, options)
    }}

    private fun longs(values: LongArray) =
        OnnxTensor.createTensor(env, LongBuffer.wrap(values), longArrayOf(1, values.size.toLong()))

    /** Greedy continuation (token ids) of prompt ids, at most maxNewTokens, ending at eos if it comes. */
    fun generate(prompt: LongArray, maxNewTokens: Int): LongArray {{
        require(prompt.isNotEmpty()) {{ "the prompt holds no token ids: to generate from nothing, start from {f['start']}" }}
        // the position table ends there (the model trained on windows of TRAINED_CONTEXT ids: past them, it
        // runs on positions it never trained on, and its quality drops)
        require(prompt.size + maxNewTokens <= MAX_POSITIONS) {{
            "${{prompt.size}} prompt ids + $maxNewTokens new ones exceed the model's $MAX_POSITIONS positions: " +
                "keep the prompt's last ids, or generate fewer"
        }}
        val out = ArrayList<Long>()
        val emptyPast = OnnxTensor.createTensor(env, FloatBuffer.allocate(0), longArrayOf(1, KV_HEADS, 0, HEAD_SIZE))
        var previous: OrtSession.Result? = null  // holds the present tensors fed back as the next past
        var ids = prompt
        var pastLength = 0
        try {{
            while (out.size < maxNewTokens) {{
                val n = ids.size
                val step = listOf(longs(ids), longs(LongArray(pastLength + n) {{ 1L }}),
                                  longs(LongArray(n) {{ (pastLength + it).toLong() }}))
                val feed = HashMap<String, OnnxTensor>()
                feed["input_ids"] = step[0]
                feed["attention_mask"] = step[1]
                feed["position_ids"] = step[2]
                for (i in 0 until LAYERS) {{
                    for (kind in listOf("key", "value")) {{
                        feed["past_key_values.$i.$kind"] =
                            previous?.let {{ it.get("present.$i.$kind").get() as OnnxTensor }} ?: emptyPast
                    }}
                }}
                val result = try {{ session.run(feed) }} finally {{ step.forEach {{ it.close() }} }}
                previous?.close()
                previous = result
                val logits = (result.get("logits").get() as OnnxTensor).floatBuffer  // [1, n, VOCAB]
                val base = (n - 1) * VOCAB
                var best = 0
                for (v in 1 until VOCAB) if (logits.get(base + v) > logits.get(base + best)) best = v
                out.add(best.toLong())
                if (best.toLong() == EOS) break
                pastLength += n
                ids = longArrayOf(best.toLong())
            }}
        }} finally {{
            previous?.close()
            emptyPast.close()
        }}
        return out.toLongArray()
    }}

    override fun close() = session.close()

    companion object {{
        const val LAYERS = {f['layers']}
        const val KV_HEADS = {f['kv']}L
        const val HEAD_SIZE = {f['head']}L
        const val VOCAB = {f['vocab']}
        const val EOS = {f['eos']}L
        const val MAX_POSITIONS = {f['positions']}
        const val TRAINED_CONTEXT = {f['trained']}

        /** Replays the first prompt of samples.json and logs whether the stored tokens came back. */
        fun demo(context: Context) {{
            val prompt = longArrayOf({f['prompt']})  // {f['text']}
            val expected = longArrayOf({f['want']})
            PocketformerGenerator(context).use {{ g ->
                val got = g.generate(prompt, {f['n']})
                Log.i("pocketformer", "tokens=${{got.joinToString()}} matches samples.json: ${{got.contentEquals(expected)}}")
            }}
        }}
    }}
}}
"""


def npu_classifier(meta: dict) -> str:
    """The HTP context binaries of metadata "qnn" through ONNX Runtime's QNN execution provider
    (onnxruntime-android-qnn), the chip picked by Build.SOC_MODEL, CPU fallback disabled; where the chip is
    not one compiled for, or the provider does not load, the CPU .ort file, with a log line saying why.
    Empty when the bundle ships no context binary."""
    qnn = meta.get("qnn") or {}
    if not qnn.get("shipped"):
        return ""
    ort_model = meta["models"]["ort"]
    ort_asset = ort_model["file"].split("/")[-1]
    ort_long = next((i["type"] for i in ort_model["inputs"] if i["name"] == "input_ids"), None) == "tensor(int64)"
    chips = qnn["chips"]
    soc_rows = ",\n".join(
        f'        {kt_string(e["android_soc_model"])} to Chip({kt_string(c)}, listOf({", ".join(str(n) for n in e["lengths"])}), '
        f'{kt_string(e["variant"])})' for c, e in chips.items() if e.get("android_soc_model"))
    first = next(iter(chips.values()))
    ctx_type = next(i["type"] for spec in first["files"].values() for i in spec["inputs"] if i["name"] == "input_ids")
    ctx_long = ctx_type == "tensor(int64)"
    labels = ", ".join(kt_string(label) for label in meta["labels"])
    sample = meta["samples"][0] if meta.get("samples") else None
    sample_ids = ", ".join(str(i) for i in sample["token_ids"]) if sample else ""
    return f"""{header(meta)}
// The NPU path: {meta['model']['name']} compiled by Qualcomm's HTP compiler for {', '.join(e['name'] for e in chips.values())}
// (npu/qnn/<chip>/, EP-context models with their context binaries; each checked on the HTP emulator when the
// bundle was built). Token ids in (the app's tokenizer: tokenizer/tokenizer.json), label out.
// Gradle (app/build.gradle.kts):
//   implementation("com.microsoft.onnxruntime:onnxruntime-android-qnn:{ort_version(meta)}")  // QNN EP + libQnnHtp.so
// Copy the bundle's npu/ folder into app/src/main/assets/ as it is (assets/npu/qnn/<chip>/...: a _ctx.onnx names
// its _ctx_qnn.bin, which must sit beside it on disk) and {ort_model['file']} to assets/{ort_asset}. On any other
// phone this class runs {ort_asset} on the CPU.
{_package("android.os.Build", "java.io.File", "java.nio.IntBuffer", "java.nio.LongBuffer")}

class PocketformerNpuClassifier(private val context: Context) : AutoCloseable {{
    private data class Chip(val folder: String, val lengths: List<Int>, val variant: String)

    private val env = OrtEnvironment.getEnvironment()
    private val npu = HashMap<Int, OrtSession>()  // length -> HTP session; empty on the CPU path
    private var lengths: List<Int> = emptyList()
    // the CPU file: every text where the NPU path is off; else the texts longer than the longest compiled length
    // (never cut to fit: that drops [SEP] and the end of the text), loaded at the first of them
    private val cpuFile = lazy {{
        OrtSession.SessionOptions().use {{ options ->
            env.createSession(context.assets.open("{ort_asset}").use {{ it.readBytes() }}, options)
        }}
    }}
    // Assets are not files: the QNN provider opens a context binary by path, so they are copied out once per
    // install (lastUpdateTime changes with every app update, so rebuilt binaries of the same name never meet
    // the old copies, which are deleted)
    private val copies: File = run {{
        val stamp = context.packageManager.getPackageInfo(context.packageName, 0).lastUpdateTime.toString()
        val root = File(context.filesDir, "pocketformer-npu")
        root.listFiles()?.filter {{ it.name != stamp }}?.forEach {{ it.deleteRecursively() }}
        File(root, stamp)
    }}

    init {{
        val soc = if (Build.VERSION.SDK_INT >= 31) Build.SOC_MODEL else "unknown (API < 31)"
        val chip = CHIPS[soc]
        var why: String? = if (chip == null) "no context binary for SoC $soc (compiled for ${{CHIPS.keys}})" else null
        if (chip != null) {{
            try {{
                for (n in chip.lengths) {{
                    val ctxFile = copyAsset("npu/qnn/${{chip.folder}}/${{chip.variant}}-${{n}}_ctx.onnx")
                    copyAsset("npu/qnn/${{chip.folder}}/${{chip.variant}}-${{n}}_ctx_qnn.bin")
                    npu[n] = OrtSession.SessionOptions().use {{ options ->
                        options.addConfigEntry("session.disable_cpu_ep_fallback", "1")  // all on the NPU, or none
                        options.addQnn(mapOf("backend_path" to "libQnnHtp.so"))
                        env.createSession(ctxFile.path, options)
                    }}
                }}
                lengths = chip.lengths
            }} catch (e: Exception) {{
                why = "the QNN execution provider did not load the context binary: ${{e.message}}"
                npu.values.forEach {{ it.close() }}
                npu.clear()
            }}
        }}
        if (npu.isEmpty()) {{
            Log.i("pocketformer", "NPU path off, running {ort_asset} on the CPU: $why")
            cpuFile.value  // loaded now: a missing asset fails here, not at the first text
        }} else {{
            Log.i("pocketformer", "NPU path on: ${{chip!!.variant}} for $soc at lengths $lengths " +
                "(a longer text runs {ort_asset} on the CPU)")
        }}
    }}

    /** One asset as a file under this install's copies, beside its neighbours (written whole, then renamed,
     *  so a copy cut short by the app being killed is never taken for a finished one). */
    private fun copyAsset(path: String): File {{
        val dst = File(copies, path)
        if (!dst.exists()) {{
            dst.parentFile!!.mkdirs()
            val part = File(dst.path + ".part")
            context.assets.open(path).use {{ input -> part.outputStream().use {{ input.copyTo(it) }} }}
            check(part.renameTo(dst)) {{ "could not move $part to $dst" }}
        }}
        return dst
    }}

    /** Label index for one text's token ids ([CLS] ... [SEP], as tokenizer/tokenizer.json cuts them). */
    fun classify(ids: IntArray): Int {{
        val scores = if (npu.isNotEmpty() && ids.size <= lengths.last()) runNpu(ids) else runCpu(ids)
        return scores.indices.maxByOrNull {{ scores[it] }}!!
    }}

    private fun runNpu(ids: IntArray): FloatArray {{
        // the shortest compiled length that holds the text; ids and mask padded with PAD_ID / 0
        val n = lengths.first {{ it >= ids.size }}
        val x = IntArray(n) {{ if (it < ids.size) ids[it] else PAD_ID }}
        val m = IntArray(n) {{ if (it < ids.size) 1 else 0 }}
        val shape = longArrayOf(1, n.toLong())
{_kt_inputs(ctx_long, "x", "npu[n]!!")}
    }}

    private fun runCpu(ids: IntArray): FloatArray {{
        val shape = longArrayOf(1, ids.size.toLong())
        val m = IntArray(ids.size) {{ 1 }}
{_kt_inputs(ort_long, "ids", "cpuFile.value")}
    }}

    override fun close() {{
        npu.values.forEach {{ it.close() }}
        if (cpuFile.isInitialized()) cpuFile.value.close()
    }}

    companion object {{
        const val PAD_ID = {qnn.get('pad_id', 0)}
        val LABELS = listOf({labels})
        // Build.SOC_MODEL -> the chip's folder under npu/qnn/, its lengths and the variant compiled
        private val CHIPS = mapOf(
{soc_rows}
        )

        /** Replays the first text of samples.json (its stored token ids) and logs the label. */
        fun demo(context: Context) {{
            PocketformerNpuClassifier(context).use {{ c ->
                val label = LABELS[c.classify(intArrayOf({sample_ids}))]
                Log.i("pocketformer", "label=$label (samples.json expects {kt_in_string(sample['expected_label']) if sample else ''})")
            }}
        }}
    }}
}}
"""


def _kt_inputs(long: bool, x: str, session: str) -> str:
    """Kotlin that runs session on ids x and mask m (IntArrays) as int32 or int64 tensors; returns logits[0].
    m and shape are locals of both calling functions; the code sits in their body (8 spaces)."""
    pad = " " * 8
    wrap = "LongBuffer.wrap(LongArray({0}.size) {{ {0}[it].toLong() }})" if long else "IntBuffer.wrap({0})"
    make = "".join(f"{pad}val {t} = OnnxTensor.createTensor(env, {wrap.format(a)}, shape)\n"
                   for t, a in (("xt", x), ("mt", "m")))
    return (make + f"{pad}try {{\n"
            f"{pad}    {session}.run(mapOf(\"input_ids\" to xt, \"attention_mask\" to mt)).use {{ r ->\n"
            f"{pad}        @Suppress(\"UNCHECKED_CAST\")\n"
            f"{pad}        return (r.get(0).value as Array<FloatArray>)[0]\n"
            f"{pad}    }}\n"
            f"{pad}}} finally {{\n"
            f"{pad}    xt.close()\n{pad}    mt.close()\n{pad}}}")
