#!/bin/sh
# Runs inside a guest (busybox): the kernel memory of the BPF maps each
# recorder keeps while sampling a tree of N cgroups (tests/bench/run.sh
# --maps). Usage: maps-guest.sh "1000 5000" ROW...; ROW = key:kind:binary,
# kind `main` (below main, enable_cgroup_bpf) or `ours` (BPF backend). Each
# records with `-i 1`, exitstats off (so every map it holds is the cgroup
# program's) until its maps stop changing; each map's memlock in fdinfo
# is the kernel's own count (map_mem_usage: an array's whole capacity, a
# hash map's buckets and the entries it holds). Prints one markdown row per
# recorder and size.
set -eu
SIZES=$1
shift
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
T=$CG/maps-t
cgroup_parents "$T" 10

# maps PID: a line "id type name value_bytes memlock_bytes max_entries
# flags" per map PID holds (its fds' fdinfo; bpftool for the name).
maps() {
  for fd in /proc/"$1"/fd/*; do
    [ "$(readlink "$fd")" = anon_inode:bpf-map ] || continue
    awk '{ f[$1] = $2 } END {
      t = f["map_type:"] == 1 ? "hash" : "other"
      print f["map_id:"], t, f["value_size:"], f["memlock:"], f["max_entries:"], f["map_flags:"] }' \
      "/proc/$1/fdinfo/${fd##*/}"
  done | sort -un | while read -r id type vbytes mem max flags; do
    name=$(bpftool map show id "$id" | awk 'NR == 1 { for (i = 1; i < NF; i++) if ($i == "name") print $(i + 1) }')
    echo "$id $type ${name:-?} $vbytes $mem $max $flags"
  done
}

# total: the memlock bytes of `maps` lines on stdin.
total() { awk '{ s += $5 } END { printf "%.0f\n", s }'; }

# kib BYTES
kib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1024 }'; }

# filled VALUE_BYTES MAX_ENTRIES FLAGS: "EMPTY FULL", the memlock of a new
# hash map like below main's (u64 keys) empty, as user space leaves it after
# draining it, and holding `n` entries, one per cgroup, as its pass leaves
# it. (Polls of the live map land anywhere in that cycle.)
filled() {
  pin=/sys/fs/bpf/maps-filled
  bpftool map create $pin type hash key 8 value "$1" entries "$2" name filled flags "$(($3))"
  empty=$(memlock_of $pin)
  awk -v n="$n" -v vb="$1" -v pin=$pin 'BEGIN {
    v = ""; for (j = 0; j < vb; j++) v = v " 0"
    for (i = 1; i <= n; i++) {
      k = ""; x = i; for (j = 0; j < 8; j++) { k = k " " (x % 256); x = int(x / 256) }
      print "map update pinned " pin " key" k " value" v
    } }' > /tmp/maps-batch
  bpftool batch file /tmp/maps-batch > /dev/null
  echo "$empty $(memlock_of $pin)"
  rm $pin /tmp/maps-batch
}
memlock_of() {
  bpftool map show pinned "$1" | awk '{ for (i = 1; i < NF; i++) if ($i == "memlock") { b = $(i + 1); sub(/B$/, "", b); print b } }'
}

# measure KEY KIND BIN: the row of one recorder over the tree as it is.
measure() {
  key=$1
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
  # Settled: the same maps three polls (6 s) in a row, none before 6 s
  # (a hash map's memory moves with each pass: see filled).
  last="" same=0 t=0 now=""
  while [ $t -lt 300 ] && [ $same -lt 3 ]; do
    sleep 2
    t=$((t + 2))
    now=$(maps $rec)
    shape=$(echo "$now" | awk '$2 == "hash" { $5 = "-" } { print }')
    if [ -n "$now" ] && [ "$shape" = "$last" ]; then same=$((same + 1)); else same=0; fi
    last=$shape
  done
  if [ $same -lt 3 ]; then
    kill $rec
    wait $rec || true
    echo "| $1 | $n | n/a: maps did not settle in 300 s ($(tail -n 1 "$dir/stderr")) | | |"
    return
  fi
  held=$(echo "$now" | total)
  kill $rec
  wait $rec || true
  # A hash map (below main's) is drained after each pass: between passes
  # it holds its buckets, at a pass's end one entry per cgroup as well.
  peak=$held
  list=""
  while read -r _id type name vbytes mem max flags; do
    if [ "$type" = hash ]; then
      ef=$(filled "$vbytes" "$max" "$flags" < /dev/null)
      held=$((held - mem + ${ef% *}))
      peak=$((peak - mem + ${ef#* }))
      list="$list${list:+, }\`$name\` $(kib "${ef% *}") (full: $(kib "${ef#* }"))"
    else
      list="$list${list:+, }\`$name\` $(kib "$mem")"
    fi
  done <<EOF
$now
EOF
  echo "| $key | $n | $list | $(kib "$held") | $(kib "$peak") |"
}

# A line of its own: the console's escapes precede the first.
echo
echo "| recorder | cgroups | maps (KiB each) | held KiB | at a pass's end KiB |"
echo "|---|---:|---|---:|---:|"
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
