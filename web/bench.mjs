// Times ONNX / .ort files in onnxruntime-web (WASM) inside headless Chromium.
//   node web/bench.mjs JOB.json OUT.json
// JOB: { chromium, js_flags, threads: [1, 2], warmup, iterations, max_seconds, file_warmup_seconds,
//        files: [{ key, path, inputs: { "<n>": { input_ids: [...], attention_mask: [...] } } }],
//        rounds?: { threads, keys: [...], length: "<n>", rounds, runs, warmup, file_runs?: { key: runs } } }
// OUT: { versions, js_flags, runs: { "<threads>": { isolated,
//        files: { key: { "<n>": [ms, ...], load_s, warmup_s } | { error } },
//        rounds?: { seconds, files: { key: { rounds: [median ms of each round], mins: [...] } | { error } } } | { error } } } }
// One page per thread count: onnxruntime-web fixes its thread pool when the WASM module first loads.
// JOB.rounds: after its sweep, the page of that thread count times those files again at one length in
// interleaved rounds (each round: `runs` runs of every file in turn), so the ratio of two files is a median of
// same-round ratios (eval/browser_cross.py chromium_rounds) - in the page, V8 flags and WASM module the sweep used.
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { launch, isolatedPage } from "./lib/browser.mjs";
import { roundsInPage } from "./lib/rounds.mjs";
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

// Runs inside the page: load each file, warm it, time each length, release the session.
// V8 runs WASM from a baseline tier (Liftoff) and compiles hot functions with its optimizing tier in the
// background, function by function, as each becomes hot. Timed that way (measured on a 2-core EPYC,
// Chromium 150, onnxruntime-web 1.30, the demo run's files):
// - the page's first file read up to 3x slow (the teacher's fp32 .onnx at 16 tokens: 45.6 ms; 21.5 ms
//   with --no-liftoff), and with 2 threads its first three lengths were slow: the compile took a core;
// - later files whose kernels had not run before read 2-3x slow with 2 threads, in steps of one 4 ms
//   scheduler tick (the student's optimized .onnx after the teacher's files: 6.8 / 8.1 / 10.0 / 20.9 ms at
//   16-128 tokens, 1.5 / 2.5 / 4.4 / 8.1 ms with --no-liftoff), which no warm-up of the first file covers.
// So the pages run with --js-flags=--no-liftoff (JOB.js_flags): the whole module is compiled optimized when
// it loads, about 15 s per page here, before anything is timed, and every file is timed at steady state.
// Each file also runs untimed for fileWarmup seconds (its lengths in turn) and `warmup` calls per length.
async function timeFiles({ files, threads, warmup, iterations, maxSeconds, fileWarmup }) {
  const ort = await import("/ort/ort.wasm.min.mjs");
  ort.env.wasm.wasmPaths = "/ort/";
  ort.env.wasm.numThreads = threads;
  ort.env.wasm.proxy = false;
  const out = {};
  for (const f of files) {
    let session;
    try {
      const l0 = performance.now();
      const bytes = new Uint8Array(await (await fetch(f.url)).arrayBuffer());
      session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
      const loadSeconds = (performance.now() - l0) / 1000;
      // (page code: web/lib/feeds.mjs cannot be imported here)
      const feedsByLength = Object.entries(f.inputs).map(([n, inp]) => {
        const known = { input_ids: inp.input_ids, attention_mask: inp.attention_mask, token_type_ids: inp.input_ids.map(() => 0) };
        const feeds = {};
        for (const name of session.inputNames) {
          if (!(name in known)) throw new Error(`model input ${name} is not input_ids / attention_mask / token_type_ids`);
          feeds[name] = new ort.Tensor("int64", BigInt64Array.from(known[name].map(BigInt)), [1, inp.input_ids.length]);
        }
        return [n, feeds];
      });
      const w0 = performance.now();
      const until = w0 + fileWarmup * 1000;
      for (let i = 0; performance.now() < until; i++) await session.run(feedsByLength[i % feedsByLength.length][1]);
      const warmupSeconds = (performance.now() - w0) / 1000;
      const res = { load_s: loadSeconds, warmup_s: warmupSeconds };
      for (const [n, feeds] of feedsByLength) {
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
const browser = await launch(job.chromium, job.js_flags);
const result = { versions: { "onnxruntime-web": ortVersion, chromium: browser.version() }, js_flags: job.js_flags ?? "", runs: {} };
try {
  for (const threads of job.threads) {
    const { page, errors, isolated } = await isolatedPage(browser, origin);
    if (threads > 1 && !isolated) throw new Error("the page is not cross-origin isolated: WASM threads are unavailable");
    const files = job.files.map((f, i) => ({ key: f.key, url: `/model/${i}${path.extname(f.path)}`, inputs: f.inputs }));
    const timed = await page.evaluate(timeFiles, {
      files, threads, warmup: job.warmup, iterations: job.iterations, maxSeconds: job.max_seconds,
      fileWarmup: job.file_warmup_seconds,
    });
    result.runs[String(threads)] = { isolated, page_errors: errors, files: timed };
    const r = job.rounds;
    if (r && r.threads === threads) {
      const picked = files.filter((f) => r.keys.includes(f.key)).map((f) => ({
        key: f.key, url: f.url, input: f.inputs[r.length], runs: r.file_runs?.[f.key],
      }));
      try {  // a second measurement: its failure is recorded, the sweep's timings stand
        result.runs[String(threads)].rounds = await page.evaluate(roundsInPage, {
          files: picked, threads, warmup: r.warmup, runs: r.runs, rounds: r.rounds,
        });
      } catch (e) {
        result.runs[String(threads)].rounds = { error: String(e && e.message ? e.message : e).slice(0, 400) };
      }
    }
    await page.close();
  }
} finally {
  await browser.close();
  server.close();
}
await writeFile(outPath, JSON.stringify(result));
