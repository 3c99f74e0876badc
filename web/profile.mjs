// Per-op profiles of ONNX / .ort files: onnxruntime-web (WASM, 1 thread) in headless Chromium and in Node,
// and onnxruntime-node (native CPU, 1 thread) as a cross-check of the op shares. tools/wasm_profile.py
// writes the job and aggregates the events.
//   node web/profile.mjs JOB.json OUT.json
// JOB: { chromium, runtimes: ["chromium", "node-wasm", "node-native"], warmup, runs, mode: "profile" | "compare",
//        rounds, files: [{ key, path, input: { input_ids: [...], attention_mask: [...] } }] }
// OUT: { versions, runtimes: { rt: { files: { key: { events: [chrome trace events] } | { error } } } } }
// mode "compare" (no profiler): every session is created and warmed, then `rounds` rounds time `runs` runs of
// each file in turn (interleaved, so a busy machine slows every file alike); each round's fastest run is kept
// too (mins: on a machine other processes load heavily, the fastest run is the one nothing preempted);
// OUT's files are { key: { mins, rounds:
// [median ms of each round] } | { error } }.
// ONNX Runtime's profiler: every session.run() is a "model_run" event, every kernel a "<node>_kernel_time"
// event; the WASM build prints the trace to stdout (Node) or the console (Chromium) at endProfiling(),
// the native build writes it to a file. Warm-up runs are profiled too: the aggregation drops them.
import { readFile, writeFile, readdir, mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { feedsFor } from "./lib/feeds.mjs";
import { roundsInPage } from "./lib/rounds.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const [jobPath, outPath] = process.argv.slice(2);
if (!jobPath || !outPath) {
  console.error("usage: node web/profile.mjs JOB.json OUT.json");
  process.exit(2);
}
const job = JSON.parse(await readFile(jobPath, "utf8"));
const version = async (pkg) => JSON.parse(await readFile(path.join(here, "node_modules", pkg, "package.json"), "utf8")).version;
const out = { versions: { node: process.versions.node, "onnxruntime-web": await version("onnxruntime-web") }, runtimes: {} };


// The trace is a JSON array printed line by line: keep the lines from "[" to "]".
function parseTrace(lines) {
  const start = lines.findIndex((l) => l.trim() === "[");
  const end = lines.findLastIndex((l) => l.trim() === "]");
  if (start < 0 || end < start) throw new Error("no profile came back (no JSON array on the console)");
  return JSON.parse(lines.slice(start, end + 1).join("\n"));
}

// Node, onnxruntime-web: the WASM module prints the trace with fs.writeSync(1, ...), caught here line by line.
async function nodeWasm() {
  const fs = require("node:fs");
  const ort = await import(path.join(here, "node_modules/onnxruntime-web/dist/ort.wasm.min.mjs"));
  ort.env.wasm.numThreads = 1;
  const files = {};
  for (const f of job.files) {
    const lines = [];
    const writeSync = fs.writeSync;
    try {
      const session = await ort.InferenceSession.create(new Uint8Array(await readFile(f.path)),
        { executionProviders: ["wasm"], graphOptimizationLevel: "all", enableProfiling: true });
      const feeds = feedsFor(ort, session.inputNames, f.input);
      for (let i = 0; i < job.warmup + job.runs; i++) await session.run(feeds);
      fs.writeSync = (fd, data, ...rest) => {
        if (fd !== 1) return writeSync(fd, data, ...rest);
        lines.push(...String(data).split("\n"));
        return Buffer.byteLength(String(data));
      };
      try { session.endProfiling(); } finally { fs.writeSync = writeSync; }
      await session.release();
      files[f.key] = { events: parseTrace(lines) };
    } catch (e) {
      fs.writeSync = writeSync;
      files[f.key] = { error: String(e?.message ?? e).slice(0, 400) };
    }
  }
  return { files };
}

// onnxruntime-node: the trace goes to <profileFilePrefix>_<date>.json.
async function nodeNative() {
  let ort;
  try {
    ort = require("onnxruntime-node");
    out.versions["onnxruntime-node"] = await version("onnxruntime-node");
  } catch (e) {
    return { error: `onnxruntime-node could not load: ${String(e?.message ?? e).slice(0, 300)}` };
  }
  const files = {};
  for (const f of job.files) {
    const dir = await mkdtemp(path.join(os.tmpdir(), "pocketformer-prof-"));
    try {
      const session = await ort.InferenceSession.create(new Uint8Array(await readFile(f.path)), {
        executionProviders: ["cpu"], graphOptimizationLevel: "all", intraOpNumThreads: 1, interOpNumThreads: 1,
        enableProfiling: true, profileFilePrefix: path.join(dir, "prof"),
      });
      const feeds = feedsFor(ort, session.inputNames, f.input);
      for (let i = 0; i < job.warmup + job.runs; i++) await session.run(feeds);
      session.endProfiling();
      await session.release?.();
      const name = (await readdir(dir)).find((n) => n.endsWith(".json"));
      if (!name) throw new Error("onnxruntime-node wrote no profile file");
      files[f.key] = { events: JSON.parse(await readFile(path.join(dir, name), "utf8")) };
    } catch (e) {
      files[f.key] = { error: String(e?.message ?? e).slice(0, 400) };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  return { files };
}

// Runs inside the page: one file per call, so that the console lines of one trace stay together.
async function profileInPage({ url, input, warmup, runs }) {
  const ort = await import("/ort/ort.wasm.min.mjs");
  ort.env.wasm.wasmPaths = "/ort/";
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
  const session = await ort.InferenceSession.create(bytes,
    { executionProviders: ["wasm"], graphOptimizationLevel: "all", enableProfiling: true });
  const shape = [1, input.input_ids.length];
  const known = { input_ids: input.input_ids, attention_mask: input.attention_mask, token_type_ids: input.input_ids.map(() => 0) };
  const feeds = {};
  for (const name of session.inputNames) feeds[name] = new ort.Tensor("int64", BigInt64Array.from(known[name].map(BigInt)), shape);
  for (let i = 0; i < warmup + runs; i++) await session.run(feeds);
  console.log("@@profile-start");
  session.endProfiling();
  console.log("@@profile-end");
  await session.release();
}

// job's files served at /model/<i><ext> beside onnxruntime-web, one headless Chromium: fn(browser, origin, isolatedPage)
async function withChromium(fn) {
  const { launch, isolatedPage } = await import("./lib/browser.mjs");
  const { startServer } = await import("./lib/server.mjs");
  const mounts = { "/ort/": path.join(here, "node_modules/onnxruntime-web/dist"), "/blank.html": path.join(here, "lib/blank.html") };
  job.files.forEach((f, i) => { mounts[`/model/${i}${path.extname(f.path)}`] = f.path; });
  const { server, origin } = await startServer(mounts);
  const browser = await launch(job.chromium);
  out.versions.chromium = browser.version();
  try {
    return await fn(browser, origin, isolatedPage);
  } finally {
    await browser.close();
    server.close();
  }
}

async function chromium() {
  return withChromium(async (browser, origin, isolatedPage) => {
    const files = {};
    for (const [i, f] of job.files.entries()) {
      const { page } = await isolatedPage(browser, origin);  // a fresh page per file: its own WASM instance
      let lines = [];
      page.on("console", (m) => lines.push(...m.text().split("\n")));
      try {
        await page.evaluate(profileInPage, { url: `/model/${i}${path.extname(f.path)}`, input: f.input, warmup: job.warmup, runs: job.runs });
        const a = lines.indexOf("@@profile-start"), b = lines.indexOf("@@profile-end");
        files[f.key] = { events: parseTrace(lines.slice(a + 1, b)) };
      } catch (e) {
        files[f.key] = { error: String(e?.message ?? e).slice(0, 400) };
      }
      await page.close();
    }
    return { files };
  });
}

// Interleaved timing without the profiler: the ratio of two files from the same rounds is what the goals read.
async function interleave(ort, make) {
  const files = {};
  const ready = [];
  for (const f of job.files) {
    try {
      const session = await make(ort, f);
      const feeds = feedsFor(ort, session.inputNames, f.input);
      for (let i = 0; i < job.warmup; i++) await session.run(feeds);
      ready.push({ f, session, feeds, rounds: [], mins: [] });
    } catch (e) {
      files[f.key] = { error: String(e?.message ?? e).slice(0, 400) };
    }
  }
  for (let r = 0; r < job.rounds; r++) {
    for (const x of ready) {
      const t = [];
      for (let i = 0; i < job.runs; i++) {
        const t0 = performance.now();
        await x.session.run(x.feeds);
        t.push(performance.now() - t0);
      }
      t.sort((a, b) => a - b);
      x.rounds.push(t[Math.floor(t.length / 2)]);
      x.mins.push(t[0]);
    }
  }
  for (const x of ready) {
    files[x.f.key] = { rounds: x.rounds, mins: x.mins };
    await x.session.release?.();
  }
  return { files };
}

const wasmOptions = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
const COMPARE = {
  "node-wasm": async () => {
    const ort = await import(path.join(here, "node_modules/onnxruntime-web/dist/ort.wasm.min.mjs"));
    ort.env.wasm.numThreads = 1;
    return interleave(ort, async (o, f) => o.InferenceSession.create(new Uint8Array(await readFile(f.path)), wasmOptions));
  },
  "node-native": async () => {
    const ort = require("onnxruntime-node");
    out.versions["onnxruntime-node"] = await version("onnxruntime-node");
    return interleave(ort, async (o, f) => o.InferenceSession.create(new Uint8Array(await readFile(f.path)), {
      executionProviders: ["cpu"], graphOptimizationLevel: "all", intraOpNumThreads: 1, interOpNumThreads: 1 }));
  },
  chromium: async () => withChromium(async (browser, origin, isolatedPage) => {
      const { page } = await isolatedPage(browser, origin);
      const files = job.files.map((f, i) => ({ key: f.key, url: `/model/${i}${path.extname(f.path)}`, input: f.input }));
      return await page.evaluate(roundsInPage, { files, threads: 1, warmup: job.warmup, runs: job.runs, rounds: job.rounds });
  }),
};

const RUNNERS = { chromium, "node-wasm": nodeWasm, "node-native": nodeNative };
for (const rt of job.runtimes) {
  if (!(rt in RUNNERS)) throw new Error(`unknown runtime ${rt}: one of ${Object.keys(RUNNERS).join(", ")}`);
  try {
    out.runtimes[rt] = await (job.mode === "compare" ? COMPARE : RUNNERS)[rt]();
  } catch (e) {
    out.runtimes[rt] = { error: String(e?.message ?? e).slice(0, 400) };
  }
}
await writeFile(outPath, JSON.stringify(out));
