#!/bin/sh
# Usage (in the guest, under host-like.sh):
#   sh /fleet-guest.sh NCG NPROCS ROUNDS WINDOW_S WORKERS KEY...
# Runs inside a guest (busybox; dash as sh): a fleet host's cgroup tree and
# the cost of a recorder to the workload on it (tests/bench/run.sh --fleet).
#
# The tree: NCG cgroups shaped as systemd makes them: system.slice with
# services, user.slice with user@.service trees, machine.slice with
# containers that have their own init.scope, system.slice (4 services) and
# user.slice; +cpu +memory +io +pids enabled wherever there are children.
# NPROCS sleeping processes are spread evenly over the leaves (every 5th
# has two extra threads, as daemons do). A churn loop (fleet-probe churn)
# starts and removes a container's cgroup and process every 100 ms,
# 50 live at a time, for the whole run, as a container runtime does.
# The benchmark's own cgroups (bench.slice, probe.slice, work.slice) are
# outside the NCG.
#
# Per recorder KEY in turn (none, spin, below09, main-bpf, main-series,
# main-series-locked, bpf, bpf-locked, read, stream, bpf-before; a key whose
# binary is absent is written as skipped): the recorder in its own cgroup
# (bench.slice/KEY), `record -i 1` with exitstats off, one sample of
# warm-up, then ROUNDS rounds back to back of the workload's view: the
# prober (a container start's mkdir, attach, detach, rmdir every 10 ms) for
# WINDOW_S, then WORKERS throughput workers, each in its own cgroup, for
# WINDOW_S. Not together: under single-threaded TCG a busy vCPU keeps
# QEMU's one thread for its whole time slice (up to 100 ms), which would
# bury the prober's latency under the workers'. The recorder's cgroup
# usage_usec and its samples are read from a sample written before the
# first round to one written after the last. One recorder run for all
# rounds, not one per round: under TCG at 5,000 cgroups a recorder's
# first sample takes 50-200 s and later ones up to ~100 s, and a start
# per round would double the run.
#
# Results under /out/fleet (key=value lines): setup.txt (times and counts);
# per round rN-KEY/ with probe.txt, work.txt, tree.txt (dying cgroups) and
# stalls.txt (where operations over 150 ms waited, and who else did);
# per recorder KEY/rec.txt and, from ours, KEY/phases.jsonl (the
# --phase-times records of the window); per round rN-KEY/lockwait.txt
# (cgroup-lock-wait over the prober's window: the mutex waits of every
# task, by who held the mutex, cgroup_mutex apart where kallsyms has it).
#
# Times under TCG on a shared 2-core host (debian-7.3, 5,000 cgroups,
# 2,000 processes; setup.txt has each run's): boot to this script 5 s at
# 2 vCPUs, 10 s at 16, 28-36 s at 64 (--numa from 16); the tree 6 s,
# 17 s, 25-46 s; the processes 10 s, 26 s, 20-31 s. The first sample (the warm-up):
# below 0.9 50-75 s, below main 50-60 s, ours 110-200 s; later samples
# take up to ~100 s.
set -eu
NCG=$1 NPROCS=$2 ROUNDS=$3 WINDOW=$4 WORKERS=$5
shift 5
# shellcheck source=tests/vm/guest-lib.sh
. "${FLEET_LIB:-/guest-lib.sh}"
# On this machine natively (run.sh --fleet-native) these name the subtree
# the tree is made in, the files and the binaries; in a guest, the defaults.
CG=${FLEET_CG:-$CG}
P=${FLEET_PROBE:-/fleet-probe}
OUT=${FLEET_OUT:-/out/fleet}
BIN=${FLEET_BIN_DIR:-/bin}
T=${FLEET_TMP:-/tmp}
mkdir -p "$OUT"
uptime_s() { cut -d' ' -f1 /proc/uptime; }
boot_s=$(uptime_s)

# The controllers a systemd host enables, as far as this kernel has them.
CTL=
for c in cpu memory io pids; do
  if grep -qw $c "$CG"/cgroup.subtree_control; then CTL="$CTL +$c"; fi
done
CTL=${CTL# }

# ---- the tree -------------------------------------------------------------------
# One awk run plans it: "DEPTH parent|leaf PATH" per cgroup, parents before
# their children; exactly NCG lines (spare ones become system services).
plan=$T/fleet-plan
awk -v n="$NCG" 'BEGIN {
  s = int(n / 50); if (s < 10) s = 10
  u = int(n / 1000); if (u < 1) u = 1
  c = int((n - 5 - s - 10 * u) / 8); if (c < 0) c = 0
  s = n - 5 - 10 * u - 8 * c
  print 1, "parent", "system.slice"; print 1, "parent", "user.slice"
  print 1, "parent", "machine.slice"
  for (i = 1; i <= s; i++) printf "2 leaf system.slice/svc-%d.service\n", i
  for (i = 1; i <= u; i++) {
    us = "user.slice/user-" (999 + i) ".slice"; ud = us "/user@" (999 + i) ".service"
    print 2, "parent", us; print 3, "leaf", us "/session-" i ".scope"
    print 3, "parent", ud; print 4, "leaf", ud "/init.scope"; print 4, "parent", ud "/app.slice"
    for (a = 1; a <= 5; a++) printf "5 leaf %s/app.slice/app-%d.scope\n", ud, a
  }
  # The churn loop runs in here: a runtime and its driver.
  print 2, "parent", "machine.slice/runtime.slice"; print 3, "leaf", "machine.slice/runtime.slice/driver"
  for (i = 1; i <= c; i++) {
    m = "machine.slice/ctr-" i ".scope"
    print 2, "parent", m; print 3, "leaf", m "/init.scope"; print 3, "leaf", m "/user.slice"
    print 3, "parent", m "/system.slice"
    for (a = 1; a <= 4; a++) printf "4 leaf %s/system.slice/svc-%d.service\n", m, a
  }
}' > "$plan"
[ "$(wc -l < "$plan")" = "$NCG" ] || { echo "fleet: planned $(wc -l < "$plan") cgroups, not $NCG"; exit 1; }
t0=$(uptime_s)
# Depth by depth: one mkdir per batch (xargs), then the parents' controllers
# before their children exist.
for d in 1 2 3 4 5; do
  awk -v d=$d -v r="$CG" '$1 == d { print r "/" $3 }' "$plan" | xargs -r mkdir
  awk -v d=$d -v r="$CG" '$1 == d && $2 == "parent" { print r "/" $3 }' "$plan" > "$T"/fleet-parents
  while read -r p; do echo "$CTL" > "$p/cgroup.subtree_control"; done < "$T"/fleet-parents
done
# The benchmark's own cgroups.
for s in bench.slice probe.slice work.slice; do mkdir "$CG"/$s; echo "$CTL" > "$CG"/$s/cgroup.subtree_control; done
mkdir "$CG"/probe.slice/home
t1=$(uptime_s)

# ---- the processes ------------------------------------------------------------------
# Process i in leaf floor(i * leaves / NPROCS): even, in the plan's order.
awk '$2 == "leaf" { print $3 }' "$plan" | grep -v '^machine.slice/runtime.slice/' > "$T"/fleet-leaves
awk -v n="$NPROCS" -v r="$CG" '{ l[NR] = $0 } END {
  for (i = 0; i < n; i++) print r "/" l[int(i * NR / n) + 1] }' "$T"/fleet-leaves > "$T"/fleet-procs
started=$($P spawn 5 < "$T"/fleet-procs)
[ "$started" = "$NPROCS" ] || { echo "fleet: started $started processes, not $NPROCS"; exit 1; }
t2=$(uptime_s)

R="$CG"/machine.slice/runtime.slice
sh -c 'echo $$ > "$1/driver/cgroup.procs"; exec "$2" churn "$1" 100 50' churn "$R" "$P" > "$T"/churn.out &
churn_pid=$!

# (the kernel's count: a find would stat every file of 5,000 cgroups)
count_dirs() { awk '$1 == "nr_descendants" { print $2 }' "$CG"/cgroup.stat; }
# (in subshells: set -- would replace the recorder keys)
tasks=$(set -- /proc/[0-9]*/task/[0-9]*; echo $#)
procs=$(set -- /proc/[0-9]*; echo $#)
{
  echo "vcpus=$(nproc)"
  # (natively, the host's uptime: not a boot of ours)
  [ -n "${FLEET_CG:-}" ] || echo "boot_s=$boot_s"
  echo "tree_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
  echo "procs_s=$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')"
  echo "cgroups=$(count_dirs)"
  echo "processes=$procs"
  echo "tasks=$tasks"
  echo "mem_used_mib=$(free -m | awk '/^Mem:/ { print $3 }')"
  echo "controllers=$CTL"
} > "$OUT"/setup.txt
cat "$OUT"/setup.txt

# ---- one recorder over the windows --------------------------------------------------
usage_usec() { awk '$1 == "usage_usec" { print $2 }' "$1/cpu.stat"; }
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }

since() { awk -v a="$1" -v b="$(uptime_s)" 'BEGIN { print b - a }'; }
nsamples() { $P samples "$1/store"; }

# waitfor_sample RDIR PID N: waits (up to 10 min) until the store holds more
# than N samples; fails when the recorder is gone or it does not come.
waitfor_sample() {
  _w=0
  while [ "$(nsamples "$1")" -le "$3" ]; do
    kill -0 "$2" 2>/dev/null && [ $_w -lt 3000 ] || return 1
    sleep 0.2; _w=$((_w + 1))
  done
}

# lockwait_start TGID / lockwait_stop DIR: cgroup-lock-wait over a window
# (DIR/lockwait.txt): who held the mutexes the host's tasks waited for,
# cgroup_mutex apart; TGID is the recorder's process (0: none). Absent
# binary: no file.
lockwait_start() {
  _lw=
  [ -x "$BIN/cgroup-lock-wait" ] || return 0
  "$BIN/cgroup-lock-wait" --tgid "$1" > "$T/lockwait.txt" 2> "$T/lockwait.err" &
  _lw=$!
  _w=0
  until grep -q '^lockwait attached' "$T/lockwait.txt"; do
    if ! kill -0 $_lw 2>/dev/null || [ $_w -ge 600 ]; then
      echo "lockwait status=failed: $(tail -n 3 "$T/lockwait.err" | tr '\n' ' ')" >> "$T/lockwait.txt"
      kill -KILL $_lw 2>/dev/null || true
      _lw=
      return 0
    fi
    sleep 0.1; _w=$((_w + 1))
  done
}
lockwait_stop() {
  if [ -n "$_lw" ]; then
    kill -INT $_lw
    wait $_lw || true
  fi
  [ ! -f "$T/lockwait.txt" ] || mv "$T/lockwait.txt" "$1/lockwait.txt"
}

# windows KEY [TGID]: the prober's window then the workers' window, ROUNDS
# times, into $OUT/rN-KEY/; the mutex waits over the prober's. TGID: the
# recorder's process (none: 0).
windows() {
  _r=1
  while [ $_r -le "$ROUNDS" ]; do
    _d=$OUT/r$_r-$1
    mkdir -p "$_d"
    echo "dying_cgroups=$(awk '$1 == "nr_dying_descendants" { print $2 }' "$CG"/cgroup.stat)" > "$_d/tree.txt"
    lockwait_start "${2:-0}"
    # stalls.txt: where a slow operation waited, and the recorder's threads.
    sh -c 'echo $$ > "$1/home/cgroup.procs"; exec "$2" probe "$1" 10 "$3" "$4" ${5:+"$5"}' probe \
      "$CG"/probe.slice "$P" "$WINDOW" "$_d/stalls.txt" "${rcg:-}" > "$_d/probe.txt"
    lockwait_stop "$_d"
    $P work "$CG"/work.slice "$WORKERS" "$WINDOW" > "$_d/work.txt"
    echo "fleet: $(uptime_s) s: $1 round $_r: $(cat "$_d/probe.txt") $(cat "$_d/work.txt")"
    _r=$((_r + 1))
  done
}

# recorder KEY: KEY's recorder (none: no recorder) through every round's
# windows; $OUT/KEY/rec.txt (and phases.jsonl) cover all of them.
recorder() {
  key=$1 dir=$OUT/$1 rdir=$T/rec-$1
  mkdir -p "$dir" "$rdir"
  bin='' args='' rcg=''
  case $key in
    none) windows none; echo "status=ok" > "$dir/rec.txt"; return 0 ;;
    # A user-space loop keeping one vCPU busy, as a recorder at -i 1 does
    # when a sample takes longer than a second: no cgroup, lock or kernel
    # work, so what it costs the prober is CPU competition alone (under
    # single-threaded TCG, every vCPU's time is taken from the others').
    spin)
      rcg="$CG"/bench.slice/spin
      mkdir "$rcg"
      sh -c 'echo $$ > "$1/cgroup.procs"; while :; do :; done' spin "$rcg" &
      pid=$!
      u0=$(usage_usec "$rcg") a=$(uptime_s)
      windows spin $pid
      echo "status=ok" > "$dir/rec.txt"
      echo "cpu_usec=$(($(usage_usec "$rcg") - u0)) window_s=$(since "$a")" >> "$dir/rec.txt"
      kill -KILL $pid; wait $pid 2>/dev/null || true
      rmdir "$rcg"
      return 0 ;;
    below09) bin=$BIN/below09 ;;
    main-bpf) bin=$BIN/below-main; echo "enable_cgroup_bpf = true" > "$rdir/extra.conf" ;;
    # below main + the reader series (patches/below/reader): its pass walks
    # under RCU where the kernel allows it.
    main-series) bin=$BIN/below-main-series; echo "enable_cgroup_bpf = true" > "$rdir/extra.conf" ;;
    # A build of it before its last patches: the pass holds cgroup_mutex for
    # its whole walk (run.sh: BELOW_MAIN_SERIES_LOCKED_BIN).
    main-series-locked) bin=$BIN/below-main-series-locked; echo "enable_cgroup_bpf = true" > "$rdir/extra.conf" ;;
    # stream: the patched kernel's *.stat.stream files (--kernels patched).
    bpf|read|stream) bin=$BIN/below; args="--cgroup-backend $key" ;;
    # The pass as a cgroup iterator under cgroup_mutex, on this same kernel.
    bpf-locked) bin=$BIN/below; args="--cgroup-backend bpf"; export BSTATS_BPF_WALK=locked ;;
    # Another build of ours to compare against (run.sh: OURS_BEFORE_BIN).
    bpf-before) bin=$BIN/below-before; args="--cgroup-backend bpf" ;;
    *) echo "status=failed: unknown recorder $key" > "$dir/rec.txt"; return 0 ;;
  esac
  if [ ! -x "$bin" ]; then
    echo "status=skipped: no $bin in the guest" > "$dir/rec.txt"
    return 0
  fi
  {
    echo "store_dir = \"$rdir/store\""
    echo "log_dir = \"$rdir/log\""
    echo "cgroup_root = \"$CG\""
    cat "$rdir/extra.conf" 2>/dev/null || true
  } > "$rdir/below.conf"
  phases=
  case $bin in "$BIN/below"|"$BIN/below-before") phases="--phase-times $rdir/phases.jsonl" ;; esac
  rcg="$CG"/bench.slice/$key
  mkdir "$rcg"
  c0=$(uptime_s)
  # Its own cgroup before exec: whatever it starts is billed to it too.
  # shellcheck disable=SC2086 # args and phases are word lists
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' rec "$rcg" \
    $bin $args --config "$rdir/below.conf" record -i 1 $phases --disable-exitstats \
    > "$rdir/stdout" 2> "$rdir/stderr" &
  pid=$!
  # One sample of warm-up: the first pays for start-up (BPF loading, the
  # first walk) and the window starts as a sample is written.
  if waitfor_sample "$rdir" $pid 0; then
    warmup=$(since "$c0")
    u0=$(usage_usec "$rcg") s0=$(nsamples "$rdir") l0=$(lines "$rdir/phases.jsonl") a=$(uptime_s)
    windows "$key" $pid
    # The window ends, as it began, as a sample is written: CPU per
    # sample over whole samples (a slow recorder's sample in progress
    # would otherwise be billed to the ones before it).
    if waitfor_sample "$rdir" $pid "$(nsamples "$rdir")"; then
      u1=$(usage_usec "$rcg") s1=$(nsamples "$rdir") l1=$(lines "$rdir/phases.jsonl")
      {
        echo "status=ok"
        echo "cpu_usec=$((u1 - u0)) window_s=$(since "$a") warmup_s=$warmup"
        echo "samples=$((s1 - s0)) samples_before=$s0 samples_after=$s1"
      } > "$dir/rec.txt"
      if [ -f "$rdir/phases.jsonl" ]; then
        sed -n "$((l0 + 1)),${l1}p" "$rdir/phases.jsonl" > "$dir/phases.jsonl"
        # The warm-up's: what the first sample costs.
        head -n "$l0" "$rdir/phases.jsonl" > "$dir/phases-warmup.jsonl"
      fi
    else
      echo "status=failed: no sample after the window (exited, or none in 10 min)" > "$dir/rec.txt"
    fi
  else
    echo "status=failed: no first sample after $(since "$c0") s" > "$dir/rec.txt"
  fi
  # Which walk the pass ran (the plan ours logs at start; below main + the
  # whole series logs it too, a build before its last patches does not).
  grep -m1 -o 'the pass [a-z_ ]*' "$rdir/stderr" | sed 's/^/walk=/' >> "$dir/rec.txt" || true
  tail -n 5 "$rdir/stderr" | sed 's/^/stderr=/' >> "$dir/rec.txt"
  # Its store goes with it: no need to let it finish a sample.
  kill -KILL $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  unset BSTATS_BPF_WALK
  _w=0
  while ! rmdir "$rcg" 2>/dev/null && [ $_w -lt 50 ]; do sleep 0.1; _w=$((_w + 1)); done
  rm -rf "$rdir"
  echo "fleet: $(uptime_s) s: $key: $(grep -E '^(status|cpu_usec|samples)=' "$dir/rec.txt" | tr '\n' ' ')"
}

for key in "$@"; do
  recorder "$key"
done
kill -TERM $churn_pid
wait $churn_pid || true
{
  cat "$T"/churn.out
  echo "cgroups_at_end=$(count_dirs)"
  echo "run_s=$(awk -v a="$boot_s" -v b="$(uptime_s)" 'BEGIN { print b - a }')"
} >> "$OUT"/setup.txt
echo "fleet: done"
