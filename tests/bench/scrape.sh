#!/usr/bin/env bash
# Cost of serving /metrics from `below record --listen`, on this host:
# N cgroups, one scrape per sample; prints a table. CPU is per thread from
# /proc/<pid>/task/<tid>/schedstat (ns): the sampling thread, and the
# exporter's "below-metrics" thread (rendering + HTTP).
#   tests/bench/scrape.sh [--cgroups 1000] [--samples 20] [--interval 2] [--backend auto]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"
NCG=1000 SAMPLES=20 INTERVAL=2 BACKEND=auto
while [ $# -gt 0 ]; do
  case $1 in
    --cgroups) NCG=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --interval) INTERVAL=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
build_release
BELOW=$BELOW_BIN
root=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
top=$root/bstats-scrape-$$
tmp=$(mktemp -d)
rec=
cleanup() {
  [ -z "$rec" ] || { kill "$rec" 2>/dev/null; wait "$rec" 2>/dev/null || true; }
  find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# Two levels: 10 parents, the rest spread under them.
for p in $(seq 10); do mkdir -p "$top/p$p"; done
for i in $(seq $((NCG - 10))); do mkdir "$top/p$((i % 10 + 1))/c$i"; done

cpu_ns() { awk '{ print $1 }' "/proc/$1/task/$2/schedstat"; }
metrics_tid() { grep -l '^below-metrics$' /proc/"$1"/task/*/comm | head -1 | cut -d/ -f5; }

# run LISTEN → "sample_ms scrape_ms wall_ms series bytes"
run() {
  local listen=$1 port args=() t0 s0=0 t1 s1=0 mtid='' wall=0 w
  printf 'log_dir = "%s/log"\nstore_dir = "%s/store-%s"\n' "$tmp" "$tmp" "$listen" > "$tmp/below.conf"
  if [ "$listen" = yes ]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    args=(--listen "127.0.0.1:$port")
  fi
  "$BELOW" --config "$tmp/below.conf" --cgroup-backend "$BACKEND" record -i "$INTERVAL" "${args[@]}" 2>"$tmp/rec.log" &
  rec=$!
  sleep $((INTERVAL * 2 + 1))   # start-up and the first samples off the books
  [ "$listen" = yes ] && mtid=$(metrics_tid "$rec")
  t0=$(cpu_ns "$rec" "$rec"); [ -n "$mtid" ] && s0=$(cpu_ns "$rec" "$mtid")
  for _ in $(seq "$SAMPLES"); do
    sleep "$INTERVAL"
    if [ -n "$mtid" ]; then
      w=$(curl -s -o "$tmp/scrape" -w '%{time_total}' "http://127.0.0.1:$port/metrics")
      wall=$(python3 -c "print($wall + $w)")
    fi
  done
  t1=$(cpu_ns "$rec" "$rec"); [ -n "$mtid" ] && s1=$(cpu_ns "$rec" "$mtid")
  kill "$rec"; wait "$rec" 2>/dev/null || true; rec=
  python3 -c "
n=$SAMPLES
series = sum(1 for l in open('$tmp/scrape') if not l.startswith('#')) if '$listen' == 'yes' else 0
import os
size = os.path.getsize('$tmp/scrape') if '$listen' == 'yes' else 0
print(f'{($t1-$t0)/1e6/n:.2f} {($s1-$s0)/1e6/n:.2f} {$wall*1e3/n:.2f} {series} {size}')"
}

read -r base _ _ _ _ < <(run no)
read -r with scrape wall series bytes < <(run yes)
echo "| cgroups | backend | sample CPU ms | sample CPU ms with --listen | scrape CPU ms | scrape wall ms | series | bytes | scrape / sample |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
python3 -c "print(f'| $NCG | $BACKEND | $base | $with | $scrape | $wall | $series | $bytes | {100*$scrape/$base:.1f}% |')"
echo
echo "command: tests/bench/scrape.sh --cgroups $NCG --samples $SAMPLES --interval $INTERVAL --backend $BACKEND (kernel $(uname -r))"
