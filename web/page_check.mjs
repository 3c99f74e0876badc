// Drives a web bundle's demo page in headless Chromium as a user would: types each text, presses
// Classify and reads label, probabilities, token ids and latency back from the page.
//   node web/page_check.mjs CHROMIUM BUNDLE_DIR TEXTS.json OUT.json
// OUT: { versions, isolated, page_errors, results: [{ text, label, probabilities, ids, latency_ms }] }
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { launch } from "./lib/browser.mjs";
import { startServer } from "./lib/server.mjs";

const [chromiumPath, bundleDir, textsPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node web/page_check.mjs CHROMIUM BUNDLE_DIR TEXTS.json OUT.json");
  process.exit(2);
}
const texts = JSON.parse(await readFile(textsPath, "utf8"));
const { server, origin } = await startServer({ "/": path.resolve(bundleDir) });
const browser = await launch(chromiumPath);
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${origin}/index.html`);
  await page.waitForFunction(() => document.getElementById("status").dataset.ready !== "0", null, { timeout: 60000 });
  const status = await page.locator("#status").textContent();
  if (await page.evaluate(() => document.getElementById("status").dataset.ready) !== "1") {
    throw new Error(`the page did not load the model: ${status} ${errors.join(" | ")}`);
  }
  const results = [];
  for (const text of texts) {
    const before = Number(await page.locator("#result").getAttribute("data-count"));
    await page.locator("#text").fill(text);
    await page.locator("#classify").click();
    await page.waitForFunction((n) => Number(document.getElementById("result").dataset.count) > n, before);
    const d = await page.evaluate(() => ({ ...document.getElementById("result").dataset }));
    results.push({ text, label: await page.locator("#label").textContent(), data_label: d.label,
      probabilities: JSON.parse(d.probabilities), ids: JSON.parse(d.ids), latency_ms: Number(d.latencyMs) });
  }
  const isolated = await page.evaluate(() => self.crossOriginIsolated);
  await writeFile(outPath, JSON.stringify({ versions: { chromium: browser.version() }, isolated, page_errors: errors, results }));
} finally {
  await browser.close();
  server.close();
}
