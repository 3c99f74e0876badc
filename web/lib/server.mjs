// A static file server on 127.0.0.1 with the cross-origin isolation headers (COOP/COEP) that
// SharedArrayBuffer, and so onnxruntime-web's WASM threads, need. Only the mounted folders and files
// are served; a path that leaves its folder is a 404.
import { createServer } from "node:http";
import { readFile, stat } from "node:fs/promises";
import path from "node:path";

const TYPES = {
  ".html": "text/html; charset=utf-8", ".mjs": "text/javascript", ".js": "text/javascript",
  ".json": "application/json", ".wasm": "application/wasm", ".txt": "text/plain; charset=utf-8",
  ".css": "text/css", ".onnx": "application/octet-stream", ".ort": "application/octet-stream",
};

// mounts: { "/prefix/": "/abs/folder", "/exact/path": "/abs/file" }
export async function startServer(mounts) {
  const server = createServer(async (req, res) => {
    const url = decodeURIComponent(new URL(req.url, "http://127.0.0.1").pathname);
    let file = null;
    for (const [prefix, target] of Object.entries(mounts)) {
      if (prefix.endsWith("/") && url.startsWith(prefix)) {
        const root = path.resolve(target);
        const candidate = path.resolve(root, "." + url.slice(prefix.length - 1));
        if (candidate.startsWith(root + path.sep)) file = candidate;
        break;
      }
      if (url === prefix) { file = target; break; }
    }
    try {
      if (!file || !(await stat(file)).isFile()) throw new Error("not found");
      const body = await readFile(file);
      res.writeHead(200, {
        "Content-Type": TYPES[path.extname(file)] || "application/octet-stream",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Embedder-Policy": "require-corp",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "no-store",
      });
      res.end(body);
    } catch {
      res.writeHead(404, { "Content-Type": "text/plain" });
      res.end("not found");
    }
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = server.address();
  return { server, origin: `http://127.0.0.1:${port}` };
}
