// Times the same files as web/bench.mjs outside the browser, to cross-check the Chromium numbers:
//   node web/cross_check.mjs JOB.json OUT.json
// JOB: { warmup, iterations, max_seconds, rounds, file_runs?: { key: runs },
//        files: [{ key, path, inputs: { "<n>": { input_ids, attention_mask } } }] }
// OUT: { versions, runs: { "node-wasm": { files }, "node-native": { files } } }, files as in web/bench.mjs plus
// round_p50s: { "<n>": [p50 of each interleaved round] }.
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
// Then the files are timed in interleaved rounds (each round times every file for a slice of the iterations,
// the order reversed every other round, as eval/paired.py does natively): timed one after the other, two files
// a few percent apart differ by the shared machine's drift between them as much as by the files. Each
// file's samples are pooled; `round_p50s` ({n: [p50 per round]}) lets the goals take same-round ratios.
async function timeAll(ort, options) {
  const files = {};
  const ready = [];
  for (const f of job.files) {
    try {
      const session = await ort.InferenceSession.create(new Uint8Array(await readFile(f.path)), options);
      const feeds = Object.fromEntries(Object.entries(f.inputs).map(([n, inp]) => [n, feedsFor(ort, session.inputNames, inp)]));
      for (const fd of Object.values(feeds)) for (let i = 0; i < job.warmup; i++) await session.run(fd);
      ready.push({ f, session, feeds, res: {}, rounds: {}, spent: 0 });
    } catch (e) {
      files[f.key] = { error: String(e?.message ?? e).slice(0, 400) };
    }
  }
  const rounds = Math.max(1, Math.min(job.rounds ?? 10, job.iterations));
  const perRound = Math.ceil(job.iterations / rounds);
  const median = (a) => { const v = [...a].sort((x, y) => x - y); const m = v.length >> 1; return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2; };
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? ready : [...ready].reverse();
    for (const t of order) {
      for (const [n, fd] of Object.entries(t.feeds)) {
        const samples = (t.res[n] ??= []);
        // a file with runs of its own (job.file_runs: the teacher's, whose call costs ten of a student's) gets
        // that many calls in every round, as in the page's rounds (web/lib/rounds.mjs), so its round p50s pair
        // with the others'; any other slow file stops once it has spent max_seconds in all (at no fewer than 3
        // samples): at 20 calls a round the teacher used to stop after its first round
        const own = job.file_runs?.[t.f.key];
        if (!own && t.spent > job.max_seconds * 1000 && samples.length >= Math.min(3, job.iterations)) continue;
        await t.session.run(fd);  // untimed: the other files' slices have just evicted this one's caches
        const mine = [];
        for (let i = 0; i < (own ?? perRound) && (own || samples.length < job.iterations); i++) {
          const t0 = performance.now();
          await t.session.run(fd);
          const dt = performance.now() - t0;
          samples.push(dt);
          mine.push(dt);
          t.spent += dt;
        }
        if (mine.length) (t.rounds[n] ??= []).push(median(mine));
      }
    }
  }
  for (const t of ready) {
    files[t.f.key] = { ...t.res, round_p50s: t.rounds };
    await t.session.release?.();
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
