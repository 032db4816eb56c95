#!/bin/sh
# Runs inside a guest (busybox): tests/bench/scrape.sh's measurement with
# BPF: N cgroups, `record` without and with --listen, one scrape per sample,
# per-thread CPU from schedstat. Prints one table row.
set -eu
NCG=${1:-1000} SAMPLES=${2:-10} INTERVAL=${3:-2}
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
lo_up
T=$CG/scrape-t
cgroup_top "$T"
for p in 1 2 3 4 5 6 7 8 9 10; do
  mkdir "$T/p$p"
  for c in memory cpu io pids; do grep -qw $c "$T/p$p/cgroup.controllers" && echo "+$c" > "$T/p$p/cgroup.subtree_control"; done
done
i=0
while [ $i -lt $((NCG - 10)) ]; do i=$((i + 1)); mkdir "$T/p$((i % 10 + 1))/c$i"; done
cpu_ns() { awk '{ print $1 }' "/proc/$1/task/$2/schedstat"; }
run() { # run no|yes → "sample_ms scrape_ms series"
  args=""; [ "$1" = yes ] && args="--listen 127.0.0.1:9749"
  # shellcheck disable=SC2086
  /below --cgroup-backend bpf --store-dir "/tmp/s-$1" record --interval-s "$INTERVAL" $args 2> /tmp/rec.log &
  rec=$!
  sleep $((INTERVAL * 3))
  mtid=""
  if [ "$1" = yes ]; then
    for t in /proc/"$rec"/task/*; do [ "$(cat "$t/comm")" = below-metrics ] && mtid=${t##*/}; done
  fi
  t0=$(cpu_ns $rec $rec); s0=0; [ -n "$mtid" ] && s0=$(cpu_ns $rec "$mtid")
  n=0
  while [ $n -lt "$SAMPLES" ]; do
    n=$((n + 1)); sleep "$INTERVAL"
    # As Prometheus asks.
    [ -n "$mtid" ] && wget -q --header 'Accept: application/openmetrics-text; version=1.0.0' \
      -O /tmp/scrape http://127.0.0.1:9749/metrics
  done
  t1=$(cpu_ns $rec $rec); s1=0; [ -n "$mtid" ] && s1=$(cpu_ns $rec "$mtid")
  kill $rec; wait $rec 2>/dev/null || true
  series=0; [ -n "$mtid" ] && series=$(grep -vc '^#' /tmp/scrape)
  awk -v a="$t0" -v b="$t1" -v c="$s0" -v d="$s1" -v n="$SAMPLES" -v s="$series" \
    'BEGIN { printf "%.2f %.2f %d\n", (b - a) / 1e6 / n, (d - c) / 1e6 / n, s }'
}
read -r base _ _ <<EOT
$(run no)
EOT
read -r with scrape series <<EOT
$(run yes)
EOT
echo "| cgroups | backend | sample CPU ms | sample CPU ms with --listen | scrape CPU ms | series | scrape / sample |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk -v n="$NCG" -v a="$base" -v b="$with" -v s="$scrape" -v k="$series" \
  'BEGIN { printf "| %d | bpf | %s | %s | %s | %d | %.1f%% |\n", n, a, b, s, k, 100 * s / a }'
