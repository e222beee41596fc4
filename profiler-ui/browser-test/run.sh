#!/usr/bin/env bash
# The viewer's browser test: writes a trace with a planted leak, starts `memtrace serve` on a
# free port, drives the page in headless Chromium (test.mjs), saves a screenshot ($OUT if set,
# else a temp dir) and stops the server; then the page of several files side by side
# (compare.mjs, which writes its traces and runs its servers itself; test.mjs also serves a
# trace without timestamps itself). Builds nothing: give it
# the memtrace binary.
#
#   bash profiler-ui/browser-test/run.sh target/debug/memtrace
#
# Needs node, Debian's chromium (or CHROMIUM=/path) and `npm ci` run in this folder.
set -euo pipefail

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 PATH/TO/memtrace" >&2
  exit 2
fi
memtrace=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/playwright-core" ]; then
  echo "playwright-core is not installed: run 'npm ci' in $here" >&2
  exit 2
fi

work=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

node "$here/gen-trace.mjs" "$work/planted-leak.jsonl"
"$memtrace" serve "$work/planted-leak.jsonl" --port 0 >"$work/serve.log" 2>&1 &
server=$!

url=""
for _ in $(seq 1 300); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$work/serve.log" | head -n 1 || true)
  [ -n "$url" ] && break
  if ! kill -0 "$server" 2>/dev/null; then
    echo "memtrace serve exited:" >&2
    cat "$work/serve.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "memtrace serve printed no address in 30 s:" >&2
  cat "$work/serve.log" >&2
  exit 1
fi
echo "memtrace serve at $url"
node "$here/test.mjs" "$url" "$memtrace"
node "$here/compare.mjs" "$memtrace"
