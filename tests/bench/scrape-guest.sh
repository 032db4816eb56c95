#!/bin/sh
# Runs inside a guest (busybox): tests/bench/scrape.sh's measurement with
# BPF: N cgroups, `record` without and with --listen, one scrape per sample
# as Prometheus asks (OpenMetrics; one before the window, see below), CPU
# per thread from schedstat. Prints
# one table row: the sampling thread's CPU per sample, the whole process's
# but the exporter thread's (what a sample costs the user), the exporter
# thread's per scrape (rendering + HTTP), and a scrape's wall time.
set -eu
NCG=${1:-1000} SAMPLES=${2:-10} INTERVAL=${3:-2}
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
lo_up
T=$CG/scrape-t
cgroup_parents "$T" 10
i=0
while [ $i -lt $((NCG - 10)) ]; do i=$((i + 1)); mkdir "$T/p$((i % 10 + 1))/c$i"; done
cpu_ns() { awk '{ print $1 }' "/proc/$1/task/$2/schedstat"; }
all_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
# Microseconds since boot (10 ms steps): busybox date has no %N.
# Busybox awk's %d is 32-bit: %.0f for large numbers.
now_us() { awk '{ printf "%.0f\n", $1 * 1e6 }' /proc/uptime; }
# As Prometheus asks.
scrape() {
  wget -q --header 'Accept: application/openmetrics-text; version=1.0.0' \
    -O /tmp/scrape http://127.0.0.1:9749/metrics
}
run() { # run no|yes → "sample_ms process_ms scrape_ms wall_ms series bytes"
  args=""; [ "$1" = yes ] && args="--listen 127.0.0.1:9749"
  # shellcheck disable=SC2086
  /below --cgroup-backend bpf --store-dir "/tmp/s-$1" record --interval-s "$INTERVAL" $args 2> /tmp/rec.log &
  rec=$!
  sleep $((INTERVAL * 3))
  mtid=""
  if [ "$1" = yes ]; then
    for t in /proc/"$rec"/task/*; do [ "$(cat "$t/comm")" = below-metrics ] && mtid=${t##*/}; done
    # Off the books like the first samples: the first render faults in
    # its buffer, which later ones reuse.
    scrape
  fi
  t0=$(cpu_ns $rec $rec); a0=$(all_ns $rec); s0=0; [ -n "$mtid" ] && s0=$(cpu_ns $rec "$mtid")
  n=0 wall=0
  while [ $n -lt "$SAMPLES" ]; do
    n=$((n + 1)); sleep "$INTERVAL"
    if [ -n "$mtid" ]; then
      w0=$(now_us)
      scrape
      wall=$((wall + $(now_us) - w0))
    fi
  done
  t1=$(cpu_ns $rec $rec); a1=$(all_ns $rec); s1=0; [ -n "$mtid" ] && s1=$(cpu_ns $rec "$mtid")
  kill $rec; wait $rec 2>/dev/null || true
  series=0 bytes=0
  [ -n "$mtid" ] && series=$(grep -vc '^#' /tmp/scrape) && bytes=$(wc -c < /tmp/scrape)
  awk -v a="$t0" -v b="$t1" -v p="$a0" -v q="$a1" -v c="$s0" -v d="$s1" -v n="$SAMPLES" \
    -v w="$wall" -v s="$series" -v y="$bytes" 'BEGIN {
      printf "%.2f %.2f %.2f %.1f %d %d\n", (b - a) / 1e6 / n, ((q - p) - (d - c)) / 1e6 / n,
        (d - c) / 1e6 / n, w / 1e3 / n, s, y }'
}
read -r base pbase _ _ _ _ <<EOT
$(run no)
EOT
read -r with pwith scrape wall series bytes <<EOT
$(run yes)
EOT
echo "| cgroups | backend | sample CPU ms (sampling thread) | with --listen | process CPU ms per sample | with --listen | scrape CPU ms | scrape wall ms | series | bytes | scrape / sample (thread) | scrape / sample (process) |"
echo "| --: | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |"
awk -v n="$NCG" -v a="$base" -v b="$with" -v p="$pbase" -v q="$pwith" -v s="$scrape" -v w="$wall" \
  -v k="$series" -v y="$bytes" 'BEGIN {
    printf "| %d | bpf | %s | %s | %s | %s | %s | %s | %d | %d | %.1f%% | %.1f%% |\n",
      n, a, b, p, q, s, w, k, y, 100 * s / a, 100 * s / p }'
