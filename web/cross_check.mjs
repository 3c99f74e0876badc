// Times the same files as web/bench.mjs outside the browser, to cross-check the Chromium numbers:
//   node web/cross_check.mjs JOB.json OUT.json
// JOB: { warmup, iterations, max_seconds, files: [{ key, path, inputs: { "<n>": { input_ids, attention_mask } } }] }
// OUT: { versions, runs: { "node-wasm": { files }, "node-native": { files } } }, files as in web/bench.mjs.
// node-wasm: onnxruntime-web's WASM build in Node (the same .wasm Chromium runs, without the browser).
// node-native: onnxruntime-node, ONNX Runtime's native CPU build, 1 intra-op thread (what an Electron or
// Node app would run). Both single-threaded, like the browser-wasm target.
import { readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { feedsFor } from "./lib/feeds.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const [jobPath, outPath] = process.argv.slice(2);
if (!jobPath || !outPath) {
  console.error("usage: node web/cross_check.mjs JOB.json OUT.json");
  process.exit(2);
}
const job = JSON.parse(await readFile(jobPath, "utf8"));
const version = async (pkg) => JSON.parse(await readFile(path.join(here, "node_modules", pkg, "package.json"), "utf8")).version;


// Every session is created and warmed before any is timed: V8 compiles WASM with a baseline tier first and
// swaps in optimized code in the background, so the first file timed would otherwise carry that cost.
async function timeAll(ort, options) {
  const files = {};
  const ready = [];
  for (const f of job.files) {
    try {
      const session = await ort.InferenceSession.create(new Uint8Array(await readFile(f.path)), options);
      const feeds = Object.fromEntries(Object.entries(f.inputs).map(([n, inp]) => [n, feedsFor(ort, session.inputNames, inp)]));
      for (const fd of Object.values(feeds)) for (let i = 0; i < job.warmup; i++) await session.run(fd);
      ready.push({ f, session, feeds });
    } catch (e) {
      files[f.key] = { error: String(e?.message ?? e).slice(0, 400) };
    }
  }
  for (const { f, session, feeds } of ready) {
    const res = {};
    for (const [n, fd] of Object.entries(feeds)) {
      await session.run(fd);
      const samples = [];
      const start = performance.now();
      for (let i = 0; i < job.iterations; i++) {
        const t0 = performance.now();
        await session.run(fd);
        samples.push(performance.now() - t0);
        if (performance.now() - start > job.max_seconds * 1000 && samples.length >= Math.min(3, job.iterations)) break;
      }
      res[n] = samples;
    }
    files[f.key] = res;
    await session.release?.();
  }
  return { files };
}

const out = { versions: { node: process.versions.node }, runs: {} };
const web = await import(path.join(here, "node_modules/onnxruntime-web/dist/ort.wasm.min.mjs"));
web.env.wasm.numThreads = 1;
out.versions["onnxruntime-web"] = await version("onnxruntime-web");
out.runs["node-wasm"] = await timeAll(web, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
try {
  const native = require("onnxruntime-node");
  out.versions["onnxruntime-node"] = await version("onnxruntime-node");
  out.runs["node-native"] = await timeAll(native, {
    executionProviders: ["cpu"], graphOptimizationLevel: "all", intraOpNumThreads: 1, interOpNumThreads: 1,
  });
} catch (e) {
  out.runs["node-native"] = { error: `onnxruntime-node could not load: ${String(e?.message ?? e).slice(0, 300)}` };
}
await writeFile(outPath, JSON.stringify(out));
