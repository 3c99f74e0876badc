// Label texts with transformers.js exactly as a user would: pipeline('text-classification', ...) on a
// local model folder, no network. Used by tests/test_hf_layout.py; also handy by hand:
//   node clients/js/classify.mjs <folder holding the model folder> <model folder name> <dtype> <texts.json>
// Prints one JSON line: {"backend": ..., "dtype": ..., "results": [{"label", "score"} per text]}.
import { readFileSync } from 'node:fs';
import { env, pipeline } from '@huggingface/transformers';

const [root, model, dtype, textsFile] = process.argv.slice(2);
if (!textsFile) {
  console.error('usage: node classify.mjs <models root> <model folder> <fp32|q8> <texts.json>');
  process.exit(2);
}
env.allowRemoteModels = false; // a missing file must fail here, never be fetched from the Hub
env.allowLocalModels = true;
env.localModelPath = root.endsWith('/') ? root : root + '/';
env.useBrowserCache = false;
env.useFSCache = false;

const texts = JSON.parse(readFileSync(textsFile, 'utf8'));
const classify = await pipeline('text-classification', model, { dtype, device: 'cpu' });
const results = [];
for (const text of texts) {
  const [top] = await classify(text); // one text per call, as an app calls it
  results.push({ label: top.label, score: top.score });
}
await classify.dispose();
console.log(JSON.stringify({ backend: 'onnxruntime-node', dtype, results }));
