#!/usr/bin/env bash
# Level-of-detail answers of two memtrace builds, asked of each in turn (benches/README.md,
# issue 24): the middle of 15 of each answer, its range, and the ratio A/B. Usage:
#
#     scripts/serve-answers-paired.sh A_MEMTRACE B_MEMTRACE FILE
#
# Both serve FILE from the import cache in MEMTRACE_CACHE_DIR (default a folder under /tmp),
# on ports 8790 and 8791. Needs curl and bc.
set -euo pipefail
if [ $# -ne 3 ]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
a=$1 b=$2 file=$3
export MEMTRACE_CACHE_DIR=${MEMTRACE_CACHE_DIR:-/tmp/memtrace-paired-cache}
"$a" info "$file" >/dev/null
"$b" info "$file" >/dev/null
"$a" serve "$file" --port 8790 >/dev/null 2>&1 &
pa=$!
"$b" serve "$file" --port 8791 >/dev/null 2>&1 &
pb=$!
times=$(mktemp -d)
trap 'kill $pa $pb 2>/dev/null; rm -rf "$times"' EXIT
for port in 8790 8791; do
  until curl -s -o /dev/null "http://127.0.0.1:$port/api/meta"; do sleep 0.1; done
done
ms() { echo "$1 * 1000" | bc | cut -d. -f1; }
for q in "timeline?device=0&width=1400" "timeline?device=0&width=1400&limit=300" \
  "timeline?device=0&width=3000&limit=100000" "timeline?device=0&width=1400&q=forward" \
  "timeline?device=0&width=1400&min_size=1048576" "curves?device=0&width=1400" \
  "segments?device=0&width=1400"; do
  : >"$times/a"
  : >"$times/b"
  for port in 8790 8791; do curl -s -o /dev/null "http://127.0.0.1:$port/api/$q"; done
  for _ in $(seq 1 15); do
    curl -s -o /dev/null -w "%{time_total}\n" "http://127.0.0.1:8790/api/$q" >>"$times/a"
    curl -s -o /dev/null -w "%{time_total}\n" "http://127.0.0.1:8791/api/$q" >>"$times/b"
  done
  ma=$(sort -n "$times/a" | sed -n 8p)
  mb=$(sort -n "$times/b" | sed -n 8p)
  range() { sort -n "$1" | sed -n '1p;15p' | while read -r t; do ms "$t"; done | paste -sd-; }
  echo "$q | A $(ms "$ma") ms ($(range "$times/a")) | B $(ms "$mb") ms ($(range "$times/b")) | A/B $(echo "scale=2; $ma / $mb" | bc)"
done
