#!/usr/bin/env bash
# Time until `memtrace serve FILE` answers its first timeline request, and its peak memory
# (benches/README.md, issue 24). Usage:
#
#     scripts/serve-first-answer.sh MEMTRACE FILE PORT [NAME=VALUE ...]
#
# The NAME=VALUE pairs are set for the server (e.g. MEMTRACE_CACHE=off). Needs curl.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,7p' "$0" >&2
  exit 2
fi
memtrace=$1 file=$2 port=$3
shift 3
log=$(mktemp)
start=$(date +%s.%N)
env "$@" "$memtrace" serve "$file" --port "$port" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
url="http://127.0.0.1:$port/api/timeline?device=0&width=1400"
until curl -s -o /dev/null "$url"; do
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.05
done
end=$(date +%s.%N)
echo "first answer after $(echo "$end - $start" | bc) s"
grep VmHWM /proc/$pid/status
