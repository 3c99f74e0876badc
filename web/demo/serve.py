"""Serve this folder on http://127.0.0.1:8000 with the cross-origin isolation headers (COOP/COEP) that
onnxruntime-web needs for more than one WASM thread (open index.html?threads=4). One thread works from
any static web server. Usage: python3 serve.py [port]"""
import functools
import http.server
import sys
from pathlib import Path


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".wasm": "application/wasm"}

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()


def port_of(argv: list[str]) -> int:
    """The port from `python3 serve.py [port]`; anything else is one line and exit status 2, not a traceback."""
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if len(argv) > 1 or (argv and not (argv[0].isdigit() and 0 < int(argv[0]) < 65536)):
        print(f"error: usage: python3 serve.py [port] (a port is a number from 1 to 65535, got "
              f"{' '.join(argv)!r})", file=sys.stderr)
        sys.exit(2)
    return int(argv[0]) if argv else 8000


if __name__ == "__main__":
    port = port_of(sys.argv[1:])
    handler = functools.partial(Handler, directory=str(Path(__file__).resolve().parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        print(f"http://127.0.0.1:{port}/index.html")
        httpd.serve_forever()
