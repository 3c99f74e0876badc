// Loads a pocketformer generation bundle with transformers.js, as a web or Node app would, and checks that
// greedy decoding gives the continuations stored in its samples.json, token for token.
// Usage: node check_bundle.mjs BUNDLE_DIR   (prints one JSON line; exit 1 on a mismatch)
import fs from "node:fs";
import path from "node:path";
import { AutoModelForCausalLM, AutoTokenizer, env, pipeline } from "@huggingface/transformers";

const bundle = path.resolve(process.argv[2] ?? "");
if (!fs.existsSync(path.join(bundle, "metadata.json"))) {
  console.error(`${bundle} is not a bundle (no metadata.json); build one with make bundle`);
  process.exit(2);
}
const meta = JSON.parse(fs.readFileSync(path.join(bundle, "metadata.json"), "utf8"));
const samples = JSON.parse(fs.readFileSync(path.join(bundle, meta.samples_file), "utf8"));
const dtype = meta.graph.transformers_js_dtype;  // picks onnx/model_quantized.onnx ("q8") or onnx/model.onnx

// a local folder only: the bundle is loaded as it ships, never from a hub
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(bundle) + path.sep;
const id = path.basename(bundle);

const tokenizer = await AutoTokenizer.from_pretrained(id);
const model = await AutoModelForCausalLM.from_pretrained(id, { dtype, device: "cpu" });
const results = [];
let ok = true;
for (const s of samples) {
  // special tokens as the text-generation pipeline adds them (tokenizer_config.json's add_bos_token)
  const enc = tokenizer(s.prompt, { add_special_tokens: Boolean(tokenizer.add_bos_token || tokenizer.add_eos_token) });
  const promptIds = Array.from(enc.input_ids.data, Number);
  const out = await model.generate({ ...enc, max_new_tokens: s.max_new_tokens, do_sample: false });
  const tokens = Array.from(out.data, Number).slice(promptIds.length);
  const same = JSON.stringify(tokens) === JSON.stringify(s.continuation_ids)
    && JSON.stringify(promptIds) === JSON.stringify(s.prompt_ids);
  ok &&= same;
  results.push({ prompt: s.prompt, prompt_ids: promptIds, tokens, match: same });
}
// the text-generation pipeline loads the same folder (what an app calls)
const generate = await pipeline("text-generation", id, { dtype, device: "cpu" });
const [first] = await generate(samples[0].prompt, { max_new_tokens: samples[0].max_new_tokens, do_sample: false,
                                                    return_full_text: false });
console.log(JSON.stringify({ transformers_js: "4.3.1", dtype, samples: results, pipeline_text: first.generated_text,
                             match: ok }));
process.exit(ok ? 0 : 1);
