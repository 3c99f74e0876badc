// Headless Chromium through playwright-core (the browser itself is the system's, not a download).
import { chromium } from "playwright-core";

export async function launch(executablePath, jsFlags = "") {
  // --no-sandbox: Chromium refuses to start its sandbox as root (CI containers); the pages loaded
  // are only our own files from 127.0.0.1. --disable-dev-shm-usage: containers often give /dev/shm 64 MB.
  // jsFlags: V8 flags for every page (web/bench.mjs: --no-liftoff).
  const args = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", ...(jsFlags ? [`--js-flags=${jsFlags}`] : [])];
  return chromium.launch({ executablePath, headless: true, args });
}

// A page on the isolated origin, with page errors surfaced instead of silently hanging.
export async function isolatedPage(browser, origin) {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${origin}/blank.html`);
  const isolated = await page.evaluate(() => self.crossOriginIsolated);
  return { page, errors, isolated };
}
