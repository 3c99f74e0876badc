// Interleaved rounds inside a Chromium page (page.evaluate(roundsInPage, args): Playwright sends the function's
// source, so it must not use anything from this module's scope). Shared by web/bench.mjs (the browser goals'
// rounds, after the 1-thread sweep, in the same page) and web/profile.mjs (mode "compare", a page of its own).
// files: [{ key, url, input: { input_ids, attention_mask }, runs? }]. Every session is created and warmed
// (`warmup` runs) before any is timed; then `rounds` rounds time `runs` runs of each file in turn (a file's own
// `runs` where it has one: a teacher call takes as long as ten of a student's), keeping each round's median and
// fastest run. Returns { seconds, files: { key: { rounds: [ms], mins: [ms] } | { error } } }.
// (web/profile.mjs's interleave() is the Node side's loop: a page function can share no helper with it.)
export async function roundsInPage({ files, threads, warmup, runs, rounds }) {
  const t00 = performance.now();
  const ort = await import("/ort/ort.wasm.min.mjs");  // already loaded in a sweep page: the same module
  ort.env.wasm.wasmPaths = "/ort/";
  ort.env.wasm.numThreads = threads;  // the page's own count: the pool is fixed when the module first runs
  ort.env.wasm.proxy = false;
  const res = {};
  const ready = [];
  for (const f of files) {
    try {
      const bytes = new Uint8Array(await (await fetch(f.url)).arrayBuffer());
      const session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
      const shape = [1, f.input.input_ids.length];
      const known = { input_ids: f.input.input_ids, attention_mask: f.input.attention_mask, token_type_ids: f.input.input_ids.map(() => 0) };
      const feeds = {};
      for (const name of session.inputNames) feeds[name] = new ort.Tensor("int64", BigInt64Array.from(known[name].map(BigInt)), shape);
      for (let i = 0; i < warmup; i++) await session.run(feeds);
      ready.push({ f, session, feeds, rounds: [], mins: [] });
    } catch (e) {
      res[f.key] = { error: String(e?.message ?? e).slice(0, 400) };
    }
  }
  for (let r = 0; r < rounds; r++) {
    for (const x of ready) {
      const t = [];
      for (let i = 0; i < (x.f.runs ?? runs); i++) {
        const t0 = performance.now();
        await x.session.run(x.feeds);
        t.push(performance.now() - t0);
      }
      t.sort((a, b) => a - b);
      x.rounds.push(t[Math.floor(t.length / 2)]);
      x.mins.push(t[0]);
    }
  }
  for (const x of ready) { res[x.f.key] = { rounds: x.rounds, mins: x.mins }; await x.session.release(); }
  return { seconds: (performance.now() - t00) / 1000, files: res };
}
