#!/usr/bin/env bash
# Sets up the browser targets: `npm ci` of the pinned packages (package-lock.json) into web/node_modules,
# and Debian's chromium when no Chromium is on PATH and this runs as root with apt-get. It never fails the
# build: what cannot be installed is printed, and the bench and the tests skip the browser targets with
# that reason (eval/browser.py says the same when they run).
set -u
cd "$(dirname "$0")"
# npm.sh: npm under the pinned Node.js in .venv (pyproject installs it), else the npm on PATH
if ! ./npm.sh --version >/dev/null 2>&1; then
  echo "web-deps: no npm: the browser targets will be skipped (make install puts the pinned Node.js and its npm in .venv; or install Node.js 18+ with npm)"
elif [ ! -f node_modules/.installed-stamp ] || [ package-lock.json -nt node_modules/.installed-stamp ]; then
  # --ignore-scripts: neither package needs an install script, and playwright-core must not fetch browsers
  if ./npm.sh ci --ignore-scripts --no-audit --no-fund --loglevel=error; then
    touch node_modules/.installed-stamp
  else
    echo "web-deps: npm ci failed (no registry access?): the browser targets will be skipped"
  fi
fi
for name in chromium chromium-browser google-chrome google-chrome-stable; do
  command -v "$name" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null; } \
    || echo "web-deps: apt-get install chromium failed: the browser targets will be skipped"
else
  echo "web-deps: no Chromium on PATH and not root with apt-get: the browser targets will be skipped" \
       "(install chromium, or set bench.browser_executable)"
fi
exit 0
