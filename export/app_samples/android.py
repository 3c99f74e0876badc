"""Kotlin samples over ONNX Runtime's Android API. Generator: the KV-cache greedy loop verify-bundle runs
(prompt once with an empty past, then one token a step with present.N.* fed back as past_key_values.N.*,
argmax of the last position, stop at eos); its demo replays the first stored sample."""
from __future__ import annotations

from export.app_samples.common import generation_facts, header, kt_string, ort_version


def classifier(meta: dict) -> str:
    text_model = meta["models"]["string_onnx"]
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
package com.example.pocketformer

import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import ai.onnxruntime.extensions.OrtxPackage
import android.content.Context
import android.util.Log

class PocketformerClassifier(context: Context) : AutoCloseable {{
    private val env = OrtEnvironment.getEnvironment()
    private val session: OrtSession

    init {{
        val options = OrtSession.SessionOptions()
        // the tokenizer inside the graph is an onnxruntime-extensions op: register it before loading
        options.registerCustomOpLibrary(OrtxPackage.getLibraryPath())
        session = env.createSession(context.assets.open("{asset}").readBytes(), options)
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
package com.example.pocketformer

import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import android.content.Context
import android.util.Log
import java.nio.FloatBuffer
import java.nio.LongBuffer

class PocketformerGenerator(context: Context) : AutoCloseable {{
    private val env = OrtEnvironment.getEnvironment()
    private val session: OrtSession =
        env.createSession(context.assets.open("{f['file']}").readBytes(), OrtSession.SessionOptions())

    private fun longs(values: LongArray) =
        OnnxTensor.createTensor(env, LongBuffer.wrap(values), longArrayOf(1, values.size.toLong()))

    /** Greedy continuation (token ids) of prompt ids, at most maxNewTokens, ending at eos if it comes. */
    fun generate(prompt: LongArray, maxNewTokens: Int): LongArray {{
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
                val result = session.run(feed)
                step.forEach {{ it.close() }}
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
