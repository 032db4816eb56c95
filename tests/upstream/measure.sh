#!/usr/bin/env bash
# Usage: measure.sh [-n CGROUPS] [-p PROCS] [-r ROUNDS] [-s SAMPLES] [-w DIR] STOCK PATCHED
#
# What `below record -i 1` with `enable_cgroup_bpf = true` costs, below main
# (STOCK) against below main with the reader series (PATCHED), over one tree
# of cgroups this script makes. Run as root on a cgroup2 machine; needs bash,
# bpftool, jq, getconf (and find, awk, sort, stat). Nothing else of the tree
# it runs from.
#
#   -n CGROUPS  cgroups to make under <cgroup2 mount>/measure, 3 levels deep,
#               PROCS sleeping processes in each leaf (default 1000)
#   -p PROCS    processes per leaf (default 1); both binaries read every
#               process from /proc alike, so they add the same cost to each
#   -r ROUNDS   rounds; each runs both binaries, the order alternating from
#               one round to the next (default 3)
#   -s SAMPLES  samples each run is measured over, after its first 2 (default 30)
#   -w DIR      work directory: configs, stores, logs (default /tmp/below-measure)
#
# Per run, over the window from its 2nd written sample to its 2+SAMPLES-th
# (start-up is not the cost of a sample):
#   CPU ms / sample  utime + stime of the recorder (/proc/PID/stat, every
#                    thread) ÷ samples written in the window, counted as the
#                    store's index entries (32 bytes each): a recorder that
#                    falls behind its 1 s interval writes fewer samples, so
#                    elapsed seconds would undercount its cost.
#   BPF ms / pass    the run time of the programs of the recorder's cgroup
#                    iterator links (kernel.bpf_stats_enabled; run_time_ns
#                    and run_cnt from `bpftool prog show -j`) ÷ passes, a
#                    pass being one run per cgroup in the hierarchy plus the
#                    iterator's final call with no cgroup (both programs
#                    return at once there); of a task iterator link over
#                    one thread (the series' walk under RCU), two runs: the
#                    thread and the final call. A cgroup iterator takes
#                    cgroup_mutex in seq_start and drops it in seq_stop
#                    (kernel/bpf/cgroup_iter.c) and runs the program on each
#                    cgroup in between; neither program writes to the
#                    seq_file, so one read(2) is the whole walk: the mutex is
#                    held at least this long per pass (mkdir, rmdir and
#                    process migrations between cgroups wait on it); the
#                    walk under RCU holds no cgroup lock.
#   map KiB          memlock of the maps those programs use (the fdinfo of
#                    the recorder's fds), lowest and highest seen, polled
#                    every 0.5 s: a hash map grows during a pass and shrinks
#                    when drained, arrays stay the same.
set -euo pipefail

ncg=1000 procs=1 rounds=3 samples=30 work=/tmp/below-measure
usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while getopts n:p:r:s:w:h opt; do
  case $opt in
    n) ncg=$OPTARG ;;
    p) procs=$OPTARG ;;
    r) rounds=$OPTARG ;;
    s) samples=$OPTARG ;;
    w) work=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
stock=$(realpath "$1") patched=$(realpath "$2")
[ "$ncg" -ge 3 ] || { echo "measure: -n needs at least 3 cgroups" >&2; exit 2; }
for t in bpftool jq getconf; do
  command -v $t >/dev/null || { echo "measure: needs $t" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "measure: run as root" >&2; exit 1; }
cgroot=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$cgroot" ] || { echo "measure: no cgroup2 mount" >&2; exit 1; }
top=$cgroot/measure
[ ! -e "$top" ] || { echo "measure: $top exists (a previous run?): remove it first" >&2; exit 1; }
hz=$(getconf CLK_TCK)
stats_file=/proc/sys/kernel/bpf_stats_enabled
stats_before=$(cat $stats_file)
sleepers=() rec=

cleanup() {
  set +e
  if [ -n "$rec" ]; then kill "$rec"; wait "$rec"; fi
  [ ${#sleepers[@]} -eq 0 ] || kill "${sleepers[@]}" 2>/dev/null
  echo "$stats_before" > $stats_file
  # A killed process leaves its cgroup asynchronously: retry the rmdirs.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -d "$top" ] || break
    find "$top" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$top" ] && sleep 1
  done
  [ ! -d "$top" ] || echo "measure: could not remove $top" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# enable DIR: lets DIR's children have every controller DIR has.
enable() {
  local cs c
  read -r -a cs < "$1/cgroup.controllers" || true
  for c in "${cs[@]}"; do echo "+$c" > "$1/cgroup.subtree_control"; done
}

# sleeper DIR: PROCS sleeping processes in DIR.
sleeper() {
  local i
  for ((i = 0; i < procs; i++)); do
    sleep 1000000 &
    sleepers+=($!)
    echo $! > "$1/cgroup.procs"
  done
}

# The tree: f first-level cgroups, f*f second-level, the rest leaves spread
# over the second level (f: the largest whose cube is at most ncg).
f=1
while [ $(((f + 1) ** 3)) -le "$ncg" ]; do f=$((f + 1)); done
leaves=$((ncg - f - f * f))
echo "measure: making $ncg cgroups under $top ($f, $((f * f)), $leaves per level), $procs processes per leaf" >&2
mkdir "$top"
enable "$top"
for ((i = 0; i < f; i++)); do
  mkdir "$top/a$i"
  enable "$top/a$i"
  for ((j = 0; j < f; j++)); do
    mkdir "$top/a$i/b$j"
    if [ $((i * f + j)) -lt "$leaves" ]; then enable "$top/a$i/b$j"; else sleeper "$top/a$i/b$j"; fi
  done
done
for ((k = 0; k < leaves; k++)); do
  j=$((k % (f * f)))
  d=$top/a$((j / f))/b$((j % f))/c$k
  mkdir "$d"
  sleeper "$d"
done
walked=$(find "$cgroot" -type d | wc -l)
echo 1 > $stats_file

# written STORE: samples in STORE's index files.
written() {
  local n=0 s
  for s in $(stat -c %s "$1"/index_* 2>/dev/null); do n=$((n + s / 32)); done
  echo $n
}

# cpu_ticks PID: utime + stime of PID, in clock ticks.
cpu_ticks() {
  local line f
  read -r line < "/proc/$1/stat"
  read -r -a f <<< "${line##*) }"
  echo $((f[11] + f[12]))
}

# fdinfo PID KIND KEY...: for each of PID's BPF fds of KIND (bpf-map,
# bpf-prog, bpf_link), its number and the values of KEYs in its fdinfo.
fdinfo() {
  local pid=$1 kind=$2 fd
  shift 2
  for fd in /proc/"$pid"/fd/*; do
    [ "$(readlink "$fd")" = "anon_inode:$kind" ] || continue
    awk -v fd="${fd##*/}" -v keys="$*" 'BEGIN { n = split(keys, k) }
      { v[$1] = $2 } END { printf "%s", fd; for (i = 1; i <= n; i++) printf " %s", v[k[i] ":"]; print "" }' \
      "/proc/$pid/fdinfo/${fd##*/}"
  done
}

# progs PID: "run_time_ns run_cnt names map_ids targets" of the programs
# PID runs as cgroup or task iterators (its iterator links' targets).
progs() {
  local id target ns=0 cnt=0 names='' maps='' targets='' j
  while read -r _ id target; do
    [ "$target" = cgroup ] || [ "$target" = task ] || continue
    targets+="${targets:+,}$target"
    j=$(bpftool prog show id "$id" -j)
    ns=$((ns + $(jq '.run_time_ns // 0' <<< "$j")))
    cnt=$((cnt + $(jq '.run_cnt // 0' <<< "$j")))
    names+="${names:+,}$(jq -r .name <<< "$j")"
    maps+="${maps:+,}$(jq -r '.map_ids // [] | join(",")' <<< "$j")"
  done <<< "$(fdinfo "$1" bpf_link prog_id target_name | sort -u -k2,2n)"
  echo "$ns $cnt ${names:-none} ,$maps, ${targets:-none}"
}

# mapfds PID MAP_IDS: PID's fds of the maps in MAP_IDS (",id,id,").
mapfds() {
  local fd id
  while read -r fd id; do
    [[ $2 != *",$id,"* ]] || echo "$fd"
  done <<< "$(fdinfo "$1" bpf-map map_id | sort -u -k2,2n)"
}

# memlock PID FD...: bytes of memlock of PID's map fds FD...
memlock() {
  local pid=$1 k v sum=0
  shift
  for fd; do
    while read -r k v; do [ "$k" != memlock: ] || sum=$((sum + v)); done < "/proc/$pid/fdinfo/$fd"
  done
  echo $sum
}

# run KEY BIN ROUND: one recorder, one line of results in $work/runs.
run() {
  local key=$1 bin=$2 dir=$work/$1-$3 n0 n t0 c0 b0 mapfds mem lo hi c1 b1 n1
  local ns0 cnt0 names0 maps0 ns1 cnt1 names1 maps1 targets1
  mkdir -p "$dir"
  printf 'store_dir = "%s"\nlog_dir = "%s"\ncgroup_root = "%s"\nenable_cgroup_bpf = true\n' \
    "$dir/store" "$dir/log" "$cgroot" > "$dir/below.conf"
  "$bin" --config "$dir/below.conf" record -i 1 --disable-exitstats > "$dir/out" 2>&1 &
  rec=$!
  t0=$SECONDS
  n0=0
  until [ "$n0" -ge 2 ]; do
    sleep 0.5
    kill -0 $rec 2>/dev/null || { echo "measure: $key exited:" >&2; tail -n 5 "$dir/out" >&2; exit 1; }
    [ $((SECONDS - t0)) -lt 900 ] || { echo "measure: $key wrote no 2 samples in 900 s" >&2; exit 1; }
    n0=$(written "$dir/store")
  done
  c0=$(cpu_ticks $rec)
  b0=$(progs $rec)
  read -r ns0 cnt0 names0 maps0 _ <<< "$b0"
  mapfds=$(mapfds $rec "$maps0")
  # shellcheck disable=SC2086 # one fd a word
  lo=$(memlock $rec $mapfds) hi=$lo
  n=$n0
  t0=$SECONDS
  while [ "$n" -lt $((n0 + samples)) ] && [ $((SECONDS - t0)) -lt $((samples * 60)) ]; do
    sleep 0.5
    n=$(written "$dir/store")
    # shellcheck disable=SC2086
    mem=$(memlock $rec $mapfds)
    [ "$mem" -ge "$lo" ] || lo=$mem
    [ "$mem" -le "$hi" ] || hi=$mem
  done
  # The CPU at once, as at the start: the window's samples are n - n0.
  c1=$(cpu_ticks $rec)
  n1=$n
  b1=$(progs $rec)
  read -r ns1 cnt1 names1 maps1 targets1 <<< "$b1"
  [ "$(mapfds $rec "$maps1")" = "$mapfds" ] || echo "measure: $key: its maps changed in the window" >&2
  kill $rec
  wait $rec || true
  rec=
  [ "$names0" = "$names1" ] || echo "measure: $key: its programs changed in the window ($names0, then $names1)" >&2
  # key round samples cpu_ms passes bpf_ms_per_pass lo_kib hi_kib programs
  awk -v k="$key" -v r="$3" -v s=$((n1 - n0)) -v t=$((c1 - c0)) -v hz="$hz" -v runs=$((cnt1 - cnt0)) \
      -v w="$walked" -v ns=$((ns1 - ns0)) -v lo="$lo" -v hi="$hi" -v names="$names1" -v t1="$targets1" 'BEGIN {
    p = t1 == "task" ? runs / 2 : runs / (w + 1)
    printf "%s %s %d %.1f %.1f %.2f %.0f %.0f %s\n", k, r, s, s ? t * 1000 / hz / s : 0, p,
      p ? ns / p / 1e6 : 0, lo / 1024, hi / 1024, names }' >> "$work/runs"
  tail -n 1 "$work/runs" >&2
  rm -rf "$dir/store"
}

rm -rf "$work"
mkdir -p "$work"
echo "measure: $walked cgroups in the hierarchy; $rounds rounds of $samples samples" >&2
for ((r = 1; r <= rounds; r++)); do
  if [ $((r % 2)) = 1 ]; then
    run stock "$stock" $r
    run patched "$patched" $r
  else
    run patched "$patched" $r
    run stock "$stock" $r
  fi
done

# The report: every run, then per binary the median and range of the rounds.
awk -v ncg="$ncg" -v procs="$procs" -v procs_now="$(find /proc -maxdepth 1 -name '[0-9]*' | wc -l)" -v walked="$walked" -v rounds="$rounds" -v samples="$samples" \
    -v kernel="$(uname -r)" -v cpus="$(getconf _NPROCESSORS_ONLN)" \
    -v cmd="measure.sh -n $ncg -p $procs -r $rounds -s $samples STOCK PATCHED" \
    -v stock="$stock" -v patched="$patched" '
function med(a, n,   i, j, t) {
  for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function cell(k, f, fmt,   i, n, a, lo, hi) {
  n = 0
  for (i = 1; i <= runs; i++) if (key[i] == k) { a[++n] = v[i, f] }
  lo = hi = a[1]
  for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
  m[k, f] = med(a, n)
  return sprintf(fmt " (" fmt "-" fmt ")", m[k, f], lo, hi)
}
function mem(k,   i, lo, hi) {
  lo = -1
  for (i = 1; i <= runs; i++) if (key[i] == k) {
    if (lo < 0 || v[i, 7] < lo) lo = v[i, 7]
    if (v[i, 8] > hi) hi = v[i, 8]
  }
  return lo == hi ? sprintf("%d", hi) : sprintf("%d-%d", lo, hi)
}
{ runs++; key[runs] = $1; for (i = 2; i <= NF; i++) v[runs, i] = $i }
END {
  printf "below record -i 1 --disable-exitstats, enable_cgroup_bpf = true: %d cgroups made\n", ncg
  printf "(%d in the hierarchy), %d processes in each leaf, %d processes on the machine; %d rounds of %d samples each;\n", walked, procs, procs_now, rounds, samples
  printf "kernel %s, %d CPUs.\n", kernel, cpus
  printf "Reproduce: %s\n  STOCK=%s\n  PATCHED=%s\n\n", cmd, stock, patched
  printf "| run             | samples | CPU ms / sample | BPF passes | BPF ms / pass | map KiB seen | programs |\n"
  printf "| --------------- | ------: | --------------: | ---------: | ------------: | -----------: | -------- |\n"
  for (i = 1; i <= runs; i++)
    printf "| %-7s round %d | %7d | %15.1f | %10.1f | %13.2f | %12s | %s |\n", key[i], v[i, 2], v[i, 3], v[i, 4], v[i, 5], v[i, 6],
      v[i, 7] == v[i, 8] ? v[i, 8] : v[i, 7] "-" v[i, 8], v[i, 9]
  printf "\nMedian (min-max) over the rounds; a cgroup iterator holds cgroup_mutex at least the BPF time per pass, the walk under RCU (a task iterator, *_rcu) none:\n\n"
  printf "| below main      | CPU ms / sample       | BPF ms / pass                        | map KiB seen |\n"
  printf "| --------------- | --------------------: | -----------------------------------: | -----------: |\n"
  printf "| stock           | %21s | %36s | %12s |\n", cell("stock", 4, "%.0f"), cell("stock", 6, "%.2f"), mem("stock")
  printf "| + the series    | %21s | %36s | %12s |\n", cell("patched", 4, "%.0f"), cell("patched", 6, "%.2f"), mem("patched")
  printf "| stock / series  | %20.2fx | %35.2fx | %12s |\n", m["stock", 4] / m["patched", 4], m["stock", 6] / m["patched", 6], ""
}' "$work/runs"
