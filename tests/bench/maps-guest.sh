#!/bin/sh
# Runs inside a guest (busybox): the kernel memory of the BPF maps each
# recorder keeps while sampling a tree of N cgroups (tests/bench/run.sh
# --maps). Usage: maps-guest.sh "1000 5000" ROW...; ROW = key:kind:binary,
# kind `main` (below main, enable_cgroup_bpf) or `ours` (BPF backend). Each
# records with `-i 1`, exitstats off (so every map it holds is the cgroup
# program's) until its maps stop changing; bpftool's memlock per map is the
# kernel's own count (map_mem_usage: an array's whole capacity, a hash
# map's buckets and the entries it holds). Prints one markdown row per
# recorder and size.
set -eu
SIZES=$1
shift
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
T=$CG/maps-t
cgroup_top "$T"
for p in 1 2 3 4 5 6 7 8 9 10; do
  mkdir "$T/p$p"
  for c in memory cpu io pids; do grep -qw $c "$T/p$p/cgroup.controllers" && echo "+$c" > "$T/p$p/cgroup.subtree_control"; done
done

# maps PID: "name:bytes ..." of the maps PID holds, and their total last.
maps() {
  bpftool map show | awk -v pid="$1" '
    /^[0-9]+:/ { name = "?"; for (i = 1; i < NF; i++) if ($i == "name") name = $(i + 1) }
    { for (i = 1; i < NF; i++) if ($i == "memlock") { b = $(i + 1); sub(/B$/, "", b) } }
    /pids / && index($0, "(" pid ")") { out = out name ":" b " "; total += b }
    END { printf "%s%.0f\n", out, total }'
}

# measure KEY KIND BIN: the row of one recorder over the tree as it is.
measure() {
  dir=/tmp/maps-$1
  rm -rf "$dir"
  mkdir -p "$dir"
  {
    echo "store_dir = \"$dir/store\""
    echo "log_dir = \"$dir/log\""
    [ "$2" = ours ] || echo "enable_cgroup_bpf = true"
  } > "$dir/config"
  case $2 in
    ours) "$3" --cgroup-backend bpf --config "$dir/config" record -i 1 --disable-exitstats 2> "$dir/stderr" & ;;
    *) "$3" --config "$dir/config" record -i 1 --disable-exitstats 2> "$dir/stderr" & ;;
  esac
  rec=$!
  # Settled: the same maps three polls (6 s) in a row, none before 6 s.
  last="" same=0 t=0 now=""
  while [ $t -lt 300 ] && [ $same -lt 3 ]; do
    sleep 2
    t=$((t + 2))
    now=$(maps $rec)
    if [ "$now" = "$last" ] && [ "${now##* }" != 0 ]; then same=$((same + 1)); else same=0; fi
    last=$now
  done
  kill $rec
  wait $rec || true
  total=${now##* }
  if [ $same -lt 3 ] || [ "$total" = 0 ]; then
    echo "| $1 | $n | n/a: maps did not settle in 300 s ($(tail -n 1 "$dir/stderr")) | |"
    return
  fi
  # "records:123 numa:456" in KiB.
  list=$(echo "${now% *}" | awk '{ for (i = 1; i <= NF; i++) { split($i, a, ":"); printf "%s`%s` %.0f", (i > 1 ? ", " : ""), a[1], a[2] / 1024 } }')
  echo "| $1 | $n | $list | $(awk -v b="$total" 'BEGIN { printf "%.0f", b / 1024 }') |"
}

echo "| recorder | cgroups | maps (KiB each) | total KiB |"
echo "|---|---:|---|---:|"
made=0
for size in $SIZES; do
  # The tree: what the guest has plus new cgroups, `size` in all.
  have=$(find $CG -type d | wc -l)
  while [ "$have" -lt "$size" ]; do
    made=$((made + 1))
    have=$((have + 1))
    mkdir "$T/p$((made % 10 + 1))/c$made"
  done
  n=$(find $CG -type d | wc -l)
  for row in "$@"; do
    key=${row%%:*} rest=${row#*:}
    measure "$key" "${rest%%:*}" "${rest#*:}"
  done
done
