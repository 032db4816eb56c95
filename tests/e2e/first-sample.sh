#!/bin/sh
# Usage: tests/e2e/first-sample.sh BELOW [RUNS] [RECORD ARGS...]
# Time to first sample: seconds from starting `BELOW record` to its first
# sample in the store (the index file no longer empty: with our default
# store_sync, the sample is durable by then), once per run, then the median.
# POSIX sh with busybox's tools: it runs natively and in the guests (as
# root, like record). Clock: /proc/uptime (10 ms).
set -eu
below=$1 runs=${2:-5}
shift $(($# < 2 ? $# : 2))
now() { cut -d' ' -f1 /proc/uptime; }
# An index file with an entry (a glob that matches nothing stays literal).
ready() {
  for f in "$1"/index_*; do [ -s "$f" ] && return 0; done
  return 1
}
times=
i=0
while [ "$i" -lt "$runs" ]; do
  d=$(mktemp -d)
  t0=$(now)
  "$below" --store-dir "$d/s" record --interval-s 1 "$@" >"$d/log" 2>&1 &
  pid=$!
  until ready "$d/s"; do
    if ! kill -0 "$pid" 2>/dev/null; then cat "$d/log" >&2; exit 1; fi
    sleep 0.01
  done
  t1=$(now)
  kill "$pid"
  wait "$pid" || true
  rm -rf "$d"
  t=$(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }')
  echo "run $((i + 1)): first sample after $t s"
  times="$times $t"
  i=$((i + 1))
done
# shellcheck disable=SC2086 # one time a line
printf '%s\n' $times | sort -n | awk '{ v[NR] = $1 } END { printf "median %.2f s (min %.2f, max %.2f) of %d runs\n", v[int((NR + 1) / 2)], v[1], v[NR], NR }'
