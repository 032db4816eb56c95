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
# Per round, per recorder KEY (none, below09, main-bpf, bpf, read; a key
# whose binary is absent is written as skipped): the recorder in its own
# cgroup (bench.slice/KEY-rN), `record -i 1` with exitstats off, two
# samples of warm-up, then the workload's view over two windows of
# WINDOW_S each, one after the other: the prober (a container start's
# mkdir, attach, detach, rmdir every 10 ms) and then WORKERS throughput
# workers, each in its own cgroup. Not together: under single-threaded TCG
# a busy vCPU keeps QEMU's one thread for its whole time slice (up to
# 100 ms), which would bury the prober's latency under the workers'. The
# recorder's cgroup usage_usec and its samples are read around both
# windows. The order of the recorders rotates from round to round.
#
# Results under /out/fleet: setup.txt (times and counts), and per cell
# rN-KEY/ with probe.txt, work.txt, rec.txt (key=value lines) and, from
# ours, phases.jsonl (the --phase-times records of the window).
#
# Times under TCG on a 2-core host (debian-7.3, 5,000 cgroups, 2,000
# processes): boot to this script 6 s at 2 vCPUs, 11 s at 16, 27 s at 64
# (--numa from 16); the tree 15-30 s, the processes 10-20 s (setup.txt
# has each run's).
set -eu
NCG=$1 NPROCS=$2 ROUNDS=$3 WINDOW=$4 WORKERS=$5
shift 5
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
P=/fleet-probe
OUT=/out/fleet
mkdir -p "$OUT"
uptime_s() { cut -d' ' -f1 /proc/uptime; }
boot_s=$(uptime_s)

# The controllers a systemd host enables, as far as this kernel has them.
CTL=
for c in cpu memory io pids; do
  if grep -qw $c $CG/cgroup.subtree_control; then CTL="$CTL +$c"; fi
done
CTL=${CTL# }

# ---- the tree -------------------------------------------------------------------
# One awk run plans it: "DEPTH parent|leaf PATH" per cgroup, parents before
# their children; exactly NCG lines (spare ones become system services).
plan=/tmp/fleet-plan
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
}' > $plan
[ "$(wc -l < $plan)" = "$NCG" ] || { echo "fleet: planned $(wc -l < $plan) cgroups, not $NCG"; exit 1; }
t0=$(uptime_s)
# Depth by depth: one mkdir per batch (xargs), then the parents' controllers
# before their children exist.
for d in 1 2 3 4 5; do
  awk -v d=$d -v r=$CG '$1 == d { print r "/" $3 }' $plan | xargs -r mkdir
  awk -v d=$d -v r=$CG '$1 == d && $2 == "parent" { print r "/" $3 }' $plan > /tmp/fleet-parents
  while read -r p; do echo "$CTL" > "$p/cgroup.subtree_control"; done < /tmp/fleet-parents
done
# The benchmark's own cgroups.
for s in bench.slice probe.slice work.slice; do mkdir $CG/$s; echo "$CTL" > $CG/$s/cgroup.subtree_control; done
mkdir $CG/probe.slice/home
t1=$(uptime_s)

# ---- the processes ------------------------------------------------------------------
# Process i in leaf floor(i * leaves / NPROCS): even, in the plan's order.
awk '$2 == "leaf" { print $3 }' $plan | grep -v '^machine.slice/runtime.slice/' > /tmp/fleet-leaves
awk -v n="$NPROCS" -v r=$CG '{ l[NR] = $0 } END {
  for (i = 0; i < n; i++) print r "/" l[int(i * NR / n) + 1] }' /tmp/fleet-leaves > /tmp/fleet-procs
started=$($P spawn 5 < /tmp/fleet-procs)
[ "$started" = "$NPROCS" ] || { echo "fleet: started $started processes, not $NPROCS"; exit 1; }
t2=$(uptime_s)

R=$CG/machine.slice/runtime.slice
sh -c 'echo $$ > "$1/driver/cgroup.procs"; exec "$2" churn "$1" 100 50' churn "$R" $P > /tmp/churn.out &
churn_pid=$!

count_dirs() { find $CG -mindepth 1 -type d | wc -l; }
# (in subshells: set -- would replace the recorder keys)
tasks=$(set -- /proc/[0-9]*/task/[0-9]*; echo $#)
procs=$(set -- /proc/[0-9]*; echo $#)
{
  echo "vcpus=$(nproc)"
  echo "boot_s=$boot_s"
  echo "tree_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
  echo "procs_s=$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')"
  echo "cgroups=$(count_dirs)"
  echo "processes=$procs"
  echo "tasks=$tasks"
  echo "mem_used_mib=$(free -m | awk '/^Mem:/ { print $3 }')"
  echo "controllers=$CTL"
} > $OUT/setup.txt
cat $OUT/setup.txt

# ---- one recorder over the windows --------------------------------------------------
usage_usec() { awk '$1 == "usage_usec" { print $2 }' "$1/cpu.stat"; }
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }

# cell ROUND KEY: writes $OUT/rROUND-KEY/.
cell() {
  r=$1 key=$2 dir=$OUT/r$1-$2 rdir=/tmp/rec-$2-r$1
  mkdir -p "$dir" "$rdir"
  bin='' args=''
  case $key in
    none) ;;
    below09) bin=/bin/below09 ;;
    main-bpf) bin=/bin/below-main; echo "enable_cgroup_bpf = true" > "$rdir/extra.conf" ;;
    bpf|read) bin=/bin/below; args="--cgroup-backend $key" ;;
    *) echo "status=unknown recorder $key" > "$dir/rec.txt"; return 0 ;;
  esac
  if [ -n "$bin" ] && [ ! -x "$bin" ]; then
    echo "status=skipped: no $bin in the guest" > "$dir/rec.txt"
    return 0
  fi
  pid='' rcg=''
  if [ -n "$bin" ]; then
    {
      echo "store_dir = \"$rdir/store\""
      echo "log_dir = \"$rdir/log\""
      echo "cgroup_root = \"$CG\""
      cat "$rdir/extra.conf" 2>/dev/null || true
    } > "$rdir/below.conf"
    phases=
    [ "$bin" != /bin/below ] || phases="--phase-times $rdir/phases.jsonl"
    rcg=$CG/bench.slice/$key-r$r
    mkdir "$rcg"
    # Its own cgroup before exec: whatever it starts is billed to it too.
    # shellcheck disable=SC2086 # args and phases are word lists
    sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' rec "$rcg" \
      $bin $args --config "$rdir/below.conf" record -i 1 $phases --disable-exitstats \
      > "$rdir/stdout" 2> "$rdir/stderr" &
    pid=$!
    # Two samples of warm-up (the first builds what later ones reuse).
    c0=$(uptime_s) w=0
    while [ "$($P samples "$rdir/store")" -lt 2 ]; do
      if ! kill -0 $pid 2>/dev/null || [ $w -ge 600 ]; then
        { echo "status=failed: no 2 samples after $((w / 5)) s"; tail -n 5 "$rdir/stderr" | sed 's/^/stderr=/'; } > "$dir/rec.txt"
        kill -KILL $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
        rmdir "$rcg" 2>/dev/null || true
        return 0
      fi
      sleep 0.2; w=$((w + 1))
    done
    u0=$(usage_usec "$rcg") s0=$($P samples "$rdir/store") l0=$(lines "$rdir/phases.jsonl")
    warmup=$(awk -v a="$c0" -v b="$(uptime_s)" 'BEGIN { print b - a }')
  fi
  a=$(uptime_s)
  sh -c 'echo $$ > "$1/home/cgroup.procs"; exec "$2" probe "$1" 10 "$3"' probe $CG/probe.slice $P "$WINDOW" > "$dir/probe.txt"
  $P work $CG/work.slice "$WORKERS" "$WINDOW" > "$dir/work.txt"
  b=$(uptime_s)
  if [ -n "$bin" ]; then
    # The window ends, as it began, with a sample just written: CPU per
    # sample over whole samples (a slow recorder's sample in progress
    # would otherwise be billed to the samples before it).
    w=0 s1=$($P samples "$rdir/store")
    while [ "$($P samples "$rdir/store")" = "$s1" ] && kill -0 $pid 2>/dev/null && [ $w -lt 600 ]; do
      sleep 0.2; w=$((w + 1))
    done
    u1=$(usage_usec "$rcg") s1=$($P samples "$rdir/store") l1=$(lines "$rdir/phases.jsonl")
    b=$(uptime_s)
    kill -0 $pid 2>/dev/null || echo "status=failed: the recorder exited during the window" > "$dir/rec.txt"
    c0=$(uptime_s)
    kill -TERM $pid 2>/dev/null || true
    w=0
    while kill -0 $pid 2>/dev/null && [ $w -lt 300 ]; do sleep 0.2; w=$((w + 1)); done
    kill -KILL $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
    [ -f "$dir/rec.txt" ] || echo "status=ok" > "$dir/rec.txt"
    {
      echo "cpu_usec=$((u1 - u0))"
      echo "samples=$((s1 - s0)) samples_before=$s0 samples_after=$s1"
      echo "warmup_s=$warmup stop_s=$(awk -v a="$c0" -v b="$(uptime_s)" 'BEGIN { print b - a }')"
      tail -n 5 "$rdir/stderr" | sed 's/^/stderr=/'
    } >> "$dir/rec.txt"
    [ ! -f "$rdir/phases.jsonl" ] || sed -n "$((l0 + 1)),${l1}p" "$rdir/phases.jsonl" > "$dir/phases.jsonl"
    # Empty once its last process is reaped.
    w=0
    while ! rmdir "$rcg" 2>/dev/null && [ $w -lt 50 ]; do sleep 0.1; w=$((w + 1)); done
  else
    echo "status=ok" > "$dir/rec.txt"
  fi
  echo "window_s=$(awk -v a="$a" -v b="$b" 'BEGIN { print b - a }')" >> "$dir/rec.txt"
  rm -rf "$rdir"
  echo "fleet: $(uptime_s) s: round $r $key: $(cat "$dir/probe.txt") $(cat "$dir/work.txt") $(grep -E '^(status|cpu_usec|samples|warmup_s|window_s)=' "$dir/rec.txt" | tr '\n' ' ')"
}

# (cell's variables are global: the loops use their own names)
nkeys=$# round=1
while [ $round -le "$ROUNDS" ]; do
  # Rotate the order by round: no recorder always runs on a fresher tree.
  ki=0
  while [ $ki -lt $nkeys ]; do
    eval "k=\${$(( (ki + round - 1) % nkeys + 1 ))}"
    # shellcheck disable=SC2154 # set by eval
    cell $round "$k"
    ki=$((ki + 1))
  done
  round=$((round + 1))
done
kill -TERM $churn_pid
wait $churn_pid || true
{
  cat /tmp/churn.out
  echo "cgroups_at_end=$(count_dirs)"
  echo "run_s=$(awk -v a="$boot_s" -v b="$(uptime_s)" 'BEGIN { print b - a }')"
} >> $OUT/setup.txt
echo "fleet: done"
