// Times ONNX / .ort files in onnxruntime-web (WASM) inside headless Chromium.
//   node web/bench.mjs JOB.json OUT.json
// JOB: { chromium, threads: [1, 2], warmup, iterations, max_seconds,
//        files: [{ key, path, inputs: { "<n>": { input_ids: [...], attention_mask: [...] } } }] }
// OUT: { versions, runs: { "<threads>": { isolated, files: { key: { "<n>": [ms, ...] } | { error } } } } }
// One page per thread count: onnxruntime-web fixes its thread pool when the WASM module first loads.
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { launch, isolatedPage } from "./lib/browser.mjs";
import { startServer } from "./lib/server.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const [jobPath, outPath] = process.argv.slice(2);
if (!jobPath || !outPath) {
  console.error("usage: node web/bench.mjs JOB.json OUT.json");
  process.exit(2);
}
const job = JSON.parse(await readFile(jobPath, "utf8"));
const mounts = { "/ort/": path.join(here, "node_modules/onnxruntime-web/dist"), "/blank.html": path.join(here, "lib/blank.html") };
job.files.forEach((f, i) => { mounts[`/model/${i}${path.extname(f.path)}`] = f.path; });
const ortVersion = JSON.parse(await readFile(path.join(here, "node_modules/onnxruntime-web/package.json"), "utf8")).version;

// Runs inside the page: load each file, time each length, release the session.
async function timeFiles({ files, threads, warmup, iterations, maxSeconds }) {
  const ort = await import("/ort/ort.wasm.min.mjs");
  ort.env.wasm.wasmPaths = "/ort/";
  ort.env.wasm.numThreads = threads;
  ort.env.wasm.proxy = false;
  const out = {};
  for (const f of files) {
    let session;
    try {
      const bytes = new Uint8Array(await (await fetch(f.url)).arrayBuffer());
      session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
      const res = {};
      for (const [n, inp] of Object.entries(f.inputs)) {
        const shape = [1, inp.input_ids.length];
        const known = {
          input_ids: inp.input_ids, attention_mask: inp.attention_mask,
          token_type_ids: inp.input_ids.map(() => 0),
        };
        const feeds = {};
        for (const name of session.inputNames) {
          if (!(name in known)) throw new Error(`model input ${name} is not input_ids / attention_mask / token_type_ids`);
          feeds[name] = new ort.Tensor("int64", BigInt64Array.from(known[name].map(BigInt)), shape);
        }
        for (let i = 0; i < warmup; i++) await session.run(feeds);
        const samples = [];
        const start = performance.now();
        for (let i = 0; i < iterations; i++) {
          const t0 = performance.now();
          await session.run(feeds);
          samples.push(performance.now() - t0);
          if (performance.now() - start > maxSeconds * 1000 && samples.length >= Math.min(3, iterations)) break;
        }
        res[n] = samples;
      }
      out[f.key] = res;
    } catch (e) {
      out[f.key] = { error: String(e && e.message ? e.message : e).slice(0, 400) };
    } finally {
      if (session) await session.release();
    }
  }
  return out;
}

const { server, origin } = await startServer(mounts);
const browser = await launch(job.chromium);
const result = { versions: { "onnxruntime-web": ortVersion, chromium: browser.version() }, runs: {} };
try {
  for (const threads of job.threads) {
    const { page, errors, isolated } = await isolatedPage(browser, origin);
    if (threads > 1 && !isolated) throw new Error("the page is not cross-origin isolated: WASM threads are unavailable");
    const files = job.files.map((f, i) => ({ key: f.key, url: `/model/${i}${path.extname(f.path)}`, inputs: f.inputs }));
    const timed = await page.evaluate(timeFiles, {
      files, threads, warmup: job.warmup, iterations: job.iterations, maxSeconds: job.max_seconds,
    });
    result.runs[String(threads)] = { isolated, page_errors: errors, files: timed };
    await page.close();
  }
} finally {
  await browser.close();
  server.close();
}
await writeFile(outPath, JSON.stringify(result));
