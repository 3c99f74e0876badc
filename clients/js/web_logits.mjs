// Run an ONNX classifier with onnxruntime-web's wasm backend (the runtime transformers.js uses in a browser)
// under Node, to show a bundle's ONNX files run there too. Used by tests/test_hf_layout.py:
//   node clients/js/web_logits.mjs <model.onnx> <ids.json: [[token ids], ...]>
// Prints one JSON line: {"runtime": "onnxruntime-web <version> wasm", "logits": [[...], ...]} (one text per call).
import { readFileSync } from 'node:fs';
import * as ort from 'onnxruntime-web';

const [modelPath, idsFile] = process.argv.slice(2);
if (!idsFile) {
  console.error('usage: node web_logits.mjs <model.onnx> <ids.json>');
  process.exit(2);
}
ort.env.wasm.numThreads = 1; // no worker threads: the result must not depend on the machine's cores
const session = await ort.InferenceSession.create(modelPath, { executionProviders: ['wasm'] });
const logits = [];
for (const ids of JSON.parse(readFileSync(idsFile, 'utf8'))) {
  const shape = [1, ids.length];
  const feeds = {
    input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), shape),
    attention_mask: new ort.Tensor('int64', new BigInt64Array(ids.length).fill(1n), shape),
  };
  const out = await session.run(Object.fromEntries(session.inputNames.map((n) => [n, feeds[n]])));
  logits.push(Array.from(out[session.outputNames[0]].data));
}
console.log(JSON.stringify({ runtime: `onnxruntime-web ${ort.env.versions.web} wasm`, logits }));
