// The bundled classifier in the browser: text -> WordPiece ids -> onnxruntime-web (WASM) -> label and
// probabilities. Everything it loads lies beside it in the bundle (no network beyond the page's origin).
import * as ort from "./ort/ort.wasm.min.mjs";
import { WordPiece } from "./wordpiece.mjs";

const softmax = (logits) => {
  const m = Math.max(...logits);
  const e = logits.map((v) => Math.exp(v - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
};

export async function loadClassifier({ threads = 1 } = {}) {
  const get = async (rel) => {
    const res = await fetch(new URL(rel, import.meta.url));
    if (!res.ok) throw new Error(`${rel}: HTTP ${res.status}`);
    return res;
  };
  const meta = await (await get("./metadata.json")).json();
  const norm = meta.text_normalisation;
  const tokenizer = new WordPiece(await (await get("./tokenizer/vocab.txt")).text(), {
    lowercase: norm.lowercase, stripAccents: norm.strip_accents, tokenizeChineseChars: norm.tokenize_chinese_chars,
    maxLength: meta.max_length,
  });
  ort.env.wasm.wasmPaths = new URL("./ort/", import.meta.url).href;
  // more than one WASM thread needs a cross-origin isolated page (COOP/COEP headers, see serve.py)
  ort.env.wasm.numThreads = self.crossOriginIsolated ? threads : 1;
  const bytes = new Uint8Array(await (await get(`./${meta.model.file}`)).arrayBuffer());
  const session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  const labels = meta.labels;

  async function classify(text) {
    const t0 = performance.now();
    const ids = tokenizer.encode(text);
    const shape = [1, ids.length];
    const known = { input_ids: ids, attention_mask: ids.map(() => 1), token_type_ids: ids.map(() => 0) };
    const feeds = {};
    for (const name of session.inputNames) {
      feeds[name] = new ort.Tensor("int64", BigInt64Array.from(known[name].map(BigInt)), shape);
    }
    const out = await session.run(feeds);
    const logits = Array.from(out[meta.model.output].data);
    const probabilities = softmax(logits);
    const best = probabilities.indexOf(Math.max(...probabilities));
    return { label: labels[best], probabilities, logits, ids, latency_ms: performance.now() - t0 };
  }
  // one untimed call at load: WASM's first run allocates and prepares kernels (~100+ ms), which would
  // otherwise land on the user's first text
  await classify(meta.labels.join(" "));
  return { classify, meta, tokenizer, threads: ort.env.wasm.numThreads };
}
