#!/usr/bin/env bash
# Usage: tests/bench/run.sh [--smoke | --service | --bill | --ratios | --top | --upstream | --soak | --scrape | --maps]
#                           [--kernels "debian-7.3 patched"]
#                           [--out DIR] [-- cgroup-bench ARGS...]
#        tests/bench/run.sh --fleet | --fleet-smoke [--vcpus 2,16,64] [--cgroups 5000]
#                           [--procs 2000] [--rounds 3] [--window 5] [--workers 2]
#                           [--recorders none,below09,main-bpf,main-series,main-series-locked,
#                                        bpf,bpf-locked,read,stream]
#                           [--kernels debian-7.3] [--out DIR]
# Builds release cgroup-bench and below, boots each kernel under QEMU (TCG,
# tests/vm/run.sh), runs the benchmark in the guest and prints its markdown
# tables. Results: DIR/<kernel>[-bill|-soak]/bench.{md,json} (DIR defaults
# to target/bench). A kernel that cannot be had (the patched one before the
# kernel series lands, or a failed build) is skipped with the reason.
# The guest looks like a Debian host (tests/bench/host-like.sh): Debian's
# lsb_release, getconf, getopt, cut, tr and dash as /bin/sh from this
# machine's packages, and the bill's trees hold ~1,000 processes besides
# (--procs: daemons' command lines, some with threads).
#   --smoke   a tiny run of every section (10 cgroups, 20 processes, 2-3
#             samples, K=1,2, 1 s overhead, 3 s per bill recorder, a 4 s
#             soak): checks that everything runs in a guest, not the
#             numbers, and that the guest looks like a host (below 0.9
#             starts lsb_release and getconf each sample, ours nothing).
#   --service the service bill (docs/benchmark.md's headline): below 0.9,
#             below main BPF, ours BPF (and ours before, with
#             $OURS_BEFORE_BIN) and the floor at 1,000 cgroups and 1,000
#             processes, 3 rounds (median by service CPU), every recorder
#             on CPU 1 (~35 min; ~45 with ours before).
#   --bill    the user's bill: real `below record -i 1` processes (below 0.9
#             from crates.io, below main files / enable_cgroup_bpf / with the
#             series (patches/below), ours per
#             backend and with --cgroup-top 200, the floor; each with and
#             without --compress) at 200 / 1,000 / 5,000 / 10,000 cgroups in
#             one guest run (debian-7.3 unless --kernels; ~1 h under TCG).
#             below main is tests/upstream/binaries.sh's stock build and
#             "below main + this series" its patched one (skipped without the
#             pinned tarball) unless $BELOW_MAIN_BIN / $BELOW_MAIN_SERIES_BIN
#             name them.
#   --ratios  the bill's targets at 1,000 cgroups, in 3 rounds (median run
#             per row): below 0.9, below main BPF (when built), ours BPF and
#             the floor (and ours before, with $OURS_BEFORE_BIN), each with
#             and without --compress, every recorder confined to CPU 1
#             (~25 min).
#   --top     top-N's bound: ours with --cgroup-top 200 at 200 and 10,000
#             cgroups, with and without --compress, in 3 rounds, on CPU 1
#             (~15 min).
#   --upstream  the bill's rows for patches/below at 1,000 and 5,000 cgroups,
#             without --compress: below 0.9, below main files /
#             enable_cgroup_bpf / + the series, ours BPF, the floor (~10 min;
#             needs the pinned below main tarball).
#   --soak    RSS of `below record` over 10 min at 5,000 cgroups with churn.
#   --scrape  one /metrics scrape against one sample of `below record
#             --listen` at 1,000 cgroups, BPF (tests/bench/scrape-guest.sh).
#   --maps    kernel memory of the BPF maps each BPF recorder keeps (below
#             main's enable_cgroup_bpf hash map, + the series, ours) at
#             1,000 and 5,000 cgroups (tests/bench/maps-guest.sh; ~10 min).
#             $MAPS_BEFORE_SERIES_BIN adds a row for another build of below
#             main + the series; $OURS_BEFORE_BIN one for ours before.
#   --fleet   a fleet host's view (tests/bench/fleet-guest.sh): per vCPU
#             count (--numa from 16) one guest with --cgroups cgroups
#             shaped by systemd, --procs sleeping processes and container
#             churn; per recorder (none, below 0.9, below main
#             enable_cgroup_bpf, below main + the reader series
#             (patches/below/reader) enable_cgroup_bpf, the same series
#             with the walk under cgroup_mutex, ours BPF, ours BPF with
#             the walk under cgroup_mutex (BSTATS_BPF_WALK=locked), ours
#             plain read, ours stream (with --kernels patched);
#             `record -i 1`, exitstats off) and round: a prober's mkdir/attach/detach/
#             rmdir latency every 10 ms for --window s, then --workers
#             throughput workers for --window s, the recorder's CPU per
#             sample from its cgroup, ours' BPF pass from --phase-times,
#             and who held the mutexes the host's tasks waited for over
#             the prober's window (cgroup-lock-wait).
#             Prints tables with the command that reproduces them
#             (DIR/fleet.md). A BELOW_BIN from the environment is measured
#             as ours and nothing is built. Defaults: 46 min on a shared
#             2-core host (1000 s at 2 vCPUs, 877 at 16, 858 at 64), most
#             of it the recorders' first and slow samples (see the top of
#             fleet-guest.sh): hence 5 s windows, not 20. Recorder
#             bpf-before is $OURS_BEFORE_BIN. Recorder main-bpf is
#             tests/upstream/binaries.sh's stock build (or
#             $BELOW_MAIN_BIN), main-series its patched one, below main +
#             the whole series, whose pass walks under RCU (or
#             $BELOW_MAIN_SERIES_BIN); main-series-locked is
#             $BELOW_MAIN_SERIES_LOCKED_BIN only (tests/upstream/binaries.sh
#             locked: the series with the walk under RCU turned off), whose
#             pass holds cgroup_mutex for the whole walk: asked for without
#             it, the run fails. Both with enable_cgroup_bpf.
#   --fleet-native  the same script on this machine, natively: the tree in
#             a cgroup2 subtree of its own (bstats-fleet, removed after, its
#             processes killed) on the real CPUs, where a busy CPU does not
#             take the others' time as under single-threaded TCG. Only
#             --cgroups, --procs, --rounds, --window, --workers and
#             --recorders apply. Recorder `spin` (a loop keeping one CPU
#             busy) shows, here and in guests, what CPU competition alone
#             costs the prober.
#   --fleet-smoke  the same at 16 vCPUs, 500 cgroups, 200 processes, 1
#             round, 5 s windows (~3 min): checks that it runs.
#   -- ARGS   cgroup-bench arguments replacing the default set below (the
#             binaries are in the guest as /bin/below, /bin/below09).
# $OURS_BEFORE_BIN: another build of ours to compare against in the same
# guest (e.g. one built before a change), as /bin/below-before: recorder
# bpf-before (ours' BPF row's command line with it) in --service, --ratios
# (with its -z twin), --bill (every size), --fleet and --fleet-native
# (when --recorders names it), and row ours-before in --maps. The
# reproducing commands printed name it.
# Commas are cgroup-bench's list syntax; backticks in printf are markdown.
# shellcheck disable=SC2054,SC2016
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"

smoke=0 mode=all native=0 kernels='' out=target/bench
fleet_vcpus=2,16,64 fleet_cgroups=5000 fleet_procs=2000 fleet_rounds=3 fleet_window=5 fleet_workers=2
fleet_recorders=none,below09,main-bpf,bpf,bpf-locked,read
fleet_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1; shift ;;
    --fleet) mode=fleet; shift ;;
    --fleet-native) mode=fleet native=1; shift ;;
    --fleet-smoke) mode=fleet
      fleet_vcpus=16 fleet_cgroups=500 fleet_procs=200 fleet_rounds=1 fleet_window=5; shift ;;
    --vcpus) fleet_vcpus=$2; fleet_opts+=("$1"); shift 2 ;;
    --cgroups) fleet_cgroups=$2; fleet_opts+=("$1"); shift 2 ;;
    --procs) fleet_procs=$2; fleet_opts+=("$1"); shift 2 ;;
    --rounds) fleet_rounds=$2; fleet_opts+=("$1"); shift 2 ;;
    --window) fleet_window=$2; fleet_opts+=("$1"); shift 2 ;;
    --workers) fleet_workers=$2; fleet_opts+=("$1"); shift 2 ;;
    --recorders) fleet_recorders=$2; fleet_opts+=("$1"); shift 2 ;;
    --bill) mode=bill; shift ;;
    --service) mode=service; shift ;;
    --upstream) mode=upstream; shift ;;
    --ratios) mode=ratios; shift ;;
    --top) mode=top; shift ;;
    --soak) mode=soak; shift ;;
    --scrape) mode=scrape; shift ;;
    --maps) mode=maps; shift ;;
    --kernels) kernels=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see the usage at the top of $0)" ;;
  esac
done

[ $smoke = 0 ] || [ $mode = all ] || die "--smoke runs every section: no --$mode"
[ ${#fleet_opts[@]} = 0 ] || [ $mode = fleet ] || die "${fleet_opts[0]} is an option of --fleet"
if [ $mode = fleet ] && [[ ,$fleet_recorders, = *,main-series-locked,* ]]; then
  # No build of it here: the series before its last patches is built by hand.
  [ -n "${BELOW_MAIN_SERIES_LOCKED_BIN:-}" ] ||
    die "recorder main-series-locked needs \$BELOW_MAIN_SERIES_LOCKED_BIN: tests/upstream/binaries.sh locked (the series with the walk under RCU turned off)"
  [ -x "$BELOW_MAIN_SERIES_LOCKED_BIN" ] ||
    die "BELOW_MAIN_SERIES_LOCKED_BIN=$BELOW_MAIN_SERIES_LOCKED_BIN is not an executable"
  BELOW_MAIN_SERIES_LOCKED_BIN=$(realpath "$BELOW_MAIN_SERIES_LOCKED_BIN")
fi
[ -n "$kernels" ] || kernels=$([ $mode = all ] && echo "debian-7.3 patched" || echo debian-7.3)

log "building below 0.9.0 from crates.io (cached after the first time)"
below09=$(tests/reference/below09.sh | tail -n1)
# A host-like guest: Debian's programs that below 0.9 runs each sample
# (lsb_release is a dash script running getopt, cut and tr), from this
# machine's packages; host-like.sh puts them on PATH.
install_pkgs lsb-release dash coreutils util-linux libc-bin
host_adds=()
for b in lsb_release dash getopt cut tr getconf; do
  host_adds+=(--add "$(command -v $b):/opt/debian/bin/$b")
done
host_adds+=(--add /usr/lib/os-release:/usr/lib/os-release --add tests/bench/host-like.sh:/host-like.sh
       --add tests/vm/guest-lib.sh:/guest-lib.sh)
adds=(--add "$BENCH_BIN:/bin/cgroup-bench" --add "$BELOW_BIN:/bin/below"
      --add "$below09:/bin/below09" "${host_adds[@]}")
recorder_args=(--below /bin/below --below09 /bin/below09)
main_skip='' series_skip=''
if [[ $mode = bill || $mode = upstream || $mode = ratios || $mode = service || $mode = maps ||
      ($mode = fleet && ,$fleet_recorders, = *,main-bpf,*) ]] && [ -z "${BELOW_MAIN_BIN:-}" ]; then
  # below main's rows when its pinned tarball is here (built once, cached).
  mkdir -p "$out"
  BELOW_MAIN_BIN=$(tests/upstream/binaries.sh stock 2>"$out/below-main.log" | tail -n1) || {
    BELOW_MAIN_BIN=
    main_skip="tests/upstream/binaries.sh stock failed: $(grep -v '^\s*$' "$out/below-main.log" | tail -n1)"
    log "below main: $main_skip"
  }
fi
if [[ $mode = bill || $mode = upstream || $mode = maps ]] && [ -n "${BELOW_MAIN_BIN:-}" ] && [ -z "${BELOW_MAIN_SERIES_BIN:-}" ]; then
  BELOW_MAIN_SERIES_BIN=$(tests/upstream/binaries.sh patched | tail -n1) || BELOW_MAIN_SERIES_BIN=
fi
if [ $mode = fleet ] && [[ ,$fleet_recorders, = *,main-series,* ]] && [ -z "${BELOW_MAIN_SERIES_BIN:-}" ]; then
  # below main + the reader series, as main-bpf's stock build.
  mkdir -p "$out"
  BELOW_MAIN_SERIES_BIN=$(tests/upstream/binaries.sh patched 2>"$out/below-main-series.log" | tail -n1) || {
    BELOW_MAIN_SERIES_BIN=
    series_skip="tests/upstream/binaries.sh patched failed: $(grep -v '^\s*$' "$out/below-main-series.log" | tail -n1)"
    log "below main + series: $series_skip"
  }
fi
if [ -n "${BELOW_MAIN_BIN:-}" ]; then
  adds+=(--add "$BELOW_MAIN_BIN:/bin/below-main")
  recorder_args+=(--below-main /bin/below-main)
fi
if [ -n "${BELOW_MAIN_SERIES_BIN:-}" ]; then
  adds+=(--add "$BELOW_MAIN_SERIES_BIN:/bin/below-main-series")
  recorder_args+=(--below-main-series /bin/below-main-series)
fi
if [ -n "${OURS_BEFORE_BIN:-}" ]; then
  [ -x "$OURS_BEFORE_BIN" ] || die "OURS_BEFORE_BIN=$OURS_BEFORE_BIN is not an executable"
  # --maps and --fleet add it themselves.
  if [[ $mode = bill || $mode = service || $mode = ratios ]]; then
    adds+=(--add "$OURS_BEFORE_BIN:/bin/below-before")
    recorder_args+=(--below-before /bin/below-before)
  fi
fi
mem=2G suffix=
if [ $smoke = 1 ]; then
  args=(--sections collect,parallel,overhead,bill,soak
        --sizes 10 --min-samples 2 --max-samples 3 --budget-s 0 --readers 1,2
        --cgroups 10 --holders 2 --overhead-secs 1 --overhead-rounds 1
        --bill-sizes 10 --procs 20 --bill-secs 3 --bill-rounds 2 --recorders below09,bpf,read-z,floor "${recorder_args[@]}"
        --soak-cgroups 10 --soak-secs 4 --soak-every-s 2 --soak-churn 5 --soak-churn-ms 500)
  vm_timeout=400
elif [ $mode = bill ]; then
  # One recorder at a time; a window per size sized for TCG (below 0.9 at
  # 10,000 cgroups takes several seconds per sample: few samples is a result).
  # 200 cgroups: what top-N at 10,000 is held against.
  args=(--sections bill --bill-sizes 200,1000,5000,10000 --procs 1000 --bill-secs 20,30,20,30 "${recorder_args[@]}")
  vm_timeout=7200 mem=4G suffix=-bill
elif [ $mode = service ]; then
  recs=below09,bpf,floor
  [ -z "${BELOW_MAIN_BIN:-}" ] || recs=below09,main-bpf,bpf,floor
  [ -z "${OURS_BEFORE_BIN:-}" ] || recs=${recs/,bpf,/,bpf,bpf-before,}
  # On CPU 1 as --ratios (TCG hand-offs between vCPUs are its noise).
  args=(--sections bill --bill-sizes 1000 --procs 1000 --bill-secs 30 --bill-rounds 3 --bill-cpus 1
        --recorders "$recs" "${recorder_args[@]}")
  vm_timeout=4200 mem=4G suffix=-service
elif [ $mode = ratios ]; then
  recs=below09,below09-z,bpf,bpf-z,floor,floor-z
  [ -z "${BELOW_MAIN_BIN:-}" ] || recs+=,main-bpf,main-bpf-z
  [ -z "${OURS_BEFORE_BIN:-}" ] || recs+=,bpf-before,bpf-before-z
  # Every recorder on CPU 1: under TCG a hand-off between two vCPUs (below's
  # procreader pool) can spin for the other's time slice, the ratios' noise.
  args=(--sections bill --bill-sizes 1000 --procs 1000 --bill-secs 30 --bill-rounds 3 --bill-cpus 1 --recorders "$recs" "${recorder_args[@]}")
  vm_timeout=5400 mem=4G suffix=-ratios
elif [ $mode = top ]; then
  args=(--sections bill --bill-sizes 200,10000 --procs 1000 --bill-secs 30 --bill-rounds 3 --bill-cpus 1
        --recorders bpf-top200,bpf-top200-z "${recorder_args[@]}")
  vm_timeout=3600 mem=4G suffix=-top
elif [ $mode = upstream ]; then
  [ -n "${BELOW_MAIN_SERIES_BIN:-}" ] || die "--upstream needs below main (tests/upstream/binaries.sh)"
  args=(--sections bill --bill-sizes 1000,5000 --procs 1000 --bill-secs 30,20
        --recorders below09,bpf,floor,main-files,main-bpf,main-series "${recorder_args[@]}")
  vm_timeout=3600 mem=4G suffix=-upstream
elif [ $mode = scrape ]; then
  vm_timeout=900 suffix=-scrape
elif [ $mode = fleet ]; then
  : # sized per vCPU count in bench_fleet
elif [ $mode = maps ]; then
  [ -n "${BELOW_MAIN_SERIES_BIN:-}" ] || die "--maps needs below main (tests/upstream/binaries.sh)"
  vm_timeout=1800 suffix=-maps
elif [ $mode = soak ]; then
  # Compressed (as below's own unit records): 10 min of uncompressed
  # samples at 5,000 cgroups would outgrow the guest's tmpfs.
  args=(--sections soak --soak-cgroups 5000 --soak-secs 600 --soak-every-s 30 --soak-recorder bpf-z "${recorder_args[@]}")
  vm_timeout=2400 mem=4G suffix=-soak
else
  # Sized for TCG (~50x slower than the host): every cell stops after its
  # budget once it has its minimum samples; ~10 min per kernel.
  args=(--below /bin/below --sizes 10,100,1000,5000 --min-samples 2 --max-samples 200 --budget-s 5
        --readers 1,4,8 --cgroups 1000 --holders 32 --overhead-secs 10 --overhead-rounds 1)
  vm_timeout=1500
fi
[ $# -eq 0 ] || args=("$@")

if [ $mode = fleet ] && [ -n "$BELOW_BIN_FROM_ENV" ]; then
  [ -x "$BELOW_BIN" ] || die "BELOW_BIN=$BELOW_BIN is not an executable"
  log "ours: BELOW_BIN=$BELOW_BIN (not built here)"
else
  build_release || die "build failed"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
# One kernel: boot it, run the benchmark, print its tables (and with
# --smoke check they are sane). A kernel that cannot be had is skipped.
bench_kernel() {
  local k=$1 img cmd
  if ! img=$(tests/vm/kernel.sh "$k" 2>"$out/kernel-$k.log" | tail -n1) || [ ! -f "$img" ]; then
    log "SKIP $k: kernel not available: $(grep -v '^\s*$' "$out/kernel-$k.log" | tail -n1)"
    return 0
  fi
  rm -rf "${out:?}/$k$suffix"
  if [ $mode = scrape ]; then
    bench_scrape "$k" "$img"
    return
  fi
  if [ $mode = maps ]; then
    bench_maps "$k" "$img"
    return
  fi
  cmd=(sh /host-like.sh cgroup-bench --json /out/bench.json --md /out/bench.md "${args[@]}")
  log "$k: ${cmd[*]}"
  if ! tests/vm/run.sh --kernel "$img" --timeout "$vm_timeout" --mem "$mem" --out "$out/$k$suffix" \
      "${adds[@]}" -- "${cmd[@]}" >"$out/console-$k$suffix.log" 2>&1; then
    log "console: $out/console-$k$suffix.log:"
    tail -n 30 "$out/console-$k$suffix.log" | tr -d '\r' >&2
    return 1
  fi
  local flag=
  [ $smoke = 0 ] || flag=" --smoke"
  [ $mode = all ] || flag=" --$mode"
  printf '\n## Kernel %s\n\nReproduce all: `%stests/bench/run.sh%s --kernels %s`\n\n' \
    "$k" "$(env_note)" "$flag" "$k"
  cat "$out/$k$suffix/bench.md"
  [ $smoke = 1 ] || return 0
  # Sanity, not timing: the baseline and plain read produced numbers.
  python3 - "$out/$k/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {x["kind"]: x for x in r["collect"][0]["rows"]}
for k in ("baseline", "read"):
    x = rows[k]
    assert x["status"] == "ok", (k, x["status"])
    assert x["cgroups"] >= 11 and x["samples"] >= 2, x
    assert x["read"]["cpu_ms"] > 0 and x["read"]["wall_p50_ms"] > 0, x
    assert x["read_syscalls"] > 0 and x["opens"] and x["alloc_read_bytes"] > 0, x
for k in ("stream", "bpf"):
    assert rows[k]["status"] == "ok" or rows[k]["status"].startswith("n/a: "), rows[k]
assert all(p["status"] != "ok" or p["p50_ms"] > 0 for p in r["parallel"]["rows"])
assert r["overhead"]["rows"][0]["ops_per_s"] > 0
bill = {x["key"]: x for x in r["bill"][0]["rows"]}
for k in ("below09", "bpf", "read-z", "floor"):
    x = bill[k]
    if k in ("bpf", "floor") and x["status"].startswith("n/a: "):
        continue  # a kernel without BPF says why
    assert x["status"] == "ok", (k, x["status"])
    assert x["written"] >= 1 and x["cpu_ms_per_sample"] > 0, x
    # The recorder's cgroup holds the process and whatever it starts.
    assert x["service_cpu_ms_per_sample"] >= 0.8 * x["cpu_ms_per_sample"], x
    assert x["store_bytes_per_sample"] > 0 and x["peak_rss_kib"] > 0, x
    assert x["cgroups_stored"] >= 11, x
    assert x["processes_stored"] >= 20, x
# The guest looks like a host: the tree's processes are there, and below
# 0.9 runs lsb_release and getconf every sample while ours runs nothing.
sec = r["bill"][0]
assert sec["population"]["processes"] >= 20 and sec["population"]["threads"] > sec["population"]["processes"], sec["population"]
b09 = bill["below09"]
assert b09["spawned"].get("lsb_release", 0) >= b09["written"] and b09["spawned"].get("getconf", 0) >= b09["written"], b09["spawned"]
assert b09["spawned_per_sample"] >= 5, b09
for k in ("bpf", "read-z", "floor"):
    x = bill[k]
    assert x["status"] != "ok" or x["spawned_per_sample"] == 0, (k, x["spawned"])
for k in ("bpf", "read-z", "floor"):
    x = bill[k]
    assert x["status"] != "ok" or x["phases"].get("process", 0) > 0, x
# The phases come from the --phase-times records: ours' BPF pass within
# its cgroups, the floor's pass on its own.
for k, want in (("bpf", ("pass", "cgroups", "store")), ("floor", ("pass", "store"))):
    x = bill[k]
    assert x["status"] != "ok" or all(p in x["phases"] for p in want), (k, x["phases"])
s = r["soak"]["result"]
assert s["status"] == "ok" and len(s["points"]) >= 2, s
assert all(p["rss_kib"] > 0 for p in s["points"]), s
print("[bench] smoke: sane", file=sys.stderr)
PY
}

# --scrape: the guest script prints the table row.
bench_scrape() {
  local k=$1 img=$2 log="$out/console-$1-scrape.log"
  local guest=(sh /scrape-guest.sh 1000 10 3)
  if ! tests/vm/run.sh --kernel "$img" --timeout "$vm_timeout" --add "$BELOW_BIN:/below" \
      --add tests/bench/scrape-guest.sh:/scrape-guest.sh --add tests/vm/guest-lib.sh:/guest-lib.sh \
      -- "${guest[@]}" >"$log" 2>&1; then
    tail -n 30 "$log" | tr -d '\r' >&2
    return 1
  fi
  printf '\n## Kernel %s: one scrape\n\nReproduce: `tests/bench/run.sh --scrape --kernels %s` (guest: `%s`)\n\n' \
    "$k" "$k" "${guest[*]}"
  tr -d '\r' < "$log" | grep '^|'
}

# --maps: the guest script prints the table.
bench_maps() {
  local k=$1 img=$2 log="$out/console-$1-maps.log"
  local rows=(main-bpf:main:/bin/below-main main-series:main:/bin/below-main-series ours:ours:/bin/below)
  local maps_adds=(--add "$BELOW_MAIN_BIN:/bin/below-main" --add "$BELOW_MAIN_SERIES_BIN:/bin/below-main-series"
             --add "$BELOW_BIN:/bin/below" --add tests/bench/maps-guest.sh:/maps-guest.sh
             --add tests/vm/guest-lib.sh:/guest-lib.sh --add "$(command -v bpftool):/usr/local/bin/bpftool")
  if [ -n "${MAPS_BEFORE_SERIES_BIN:-}" ]; then
    maps_adds+=(--add "$MAPS_BEFORE_SERIES_BIN:/bin/below-main-series-before")
    rows+=(main-series-before:main:/bin/below-main-series-before)
  fi
  if [ -n "${OURS_BEFORE_BIN:-}" ]; then
    maps_adds+=(--add "$OURS_BEFORE_BIN:/bin/below-before")
    rows+=(ours-before:ours:/bin/below-before)
  fi
  local guest=(sh /maps-guest.sh "1000 5000" "${rows[@]}")
  if ! tests/vm/run.sh --kernel "$img" --timeout "$vm_timeout" --mem 2G "${maps_adds[@]}" \
      -- "${guest[@]}" >"$log" 2>&1; then
    tail -n 30 "$log" | tr -d '\r' >&2
    return 1
  fi
  printf '\n## Kernel %s: BPF map memory\n\nReproduce: `%stests/bench/run.sh --maps --kernels %s`\n\n' \
    "$k" "$(env_note)" "$k"
  tr -d '\r' < "$log" | grep '^|'
}

# fleet_report_args ARRAY KEY...: fleet-report.py's KEY=LABEL and --skip
# arguments for the recorders KEY, appended to ARRAY.
fleet_report_args() {
  local -n _args=$1
  local key
  shift
  for key in "$@"; do
    case $key in
      none) _args+=("none=no recorder") ;;
      spin) _args+=("spin=a loop busy on one CPU (no recorder)") ;;
      below09) _args+=("below09=below 0.9") ;;
      main-bpf) _args+=("main-bpf=below main, enable_cgroup_bpf")
        [ -n "${BELOW_MAIN_BIN:-}" ] || _args+=(--skip "main-bpf=${main_skip:-BELOW_MAIN_BIN not built}") ;;
      main-series) _args+=("main-series=below main + series, BPF")
        [ -n "${BELOW_MAIN_SERIES_BIN:-}" ] ||
          _args+=(--skip "main-series=${series_skip:-BELOW_MAIN_SERIES_BIN not built}") ;;
      main-series-locked) _args+=("main-series-locked=below main + series, BPF, walk under cgroup_mutex")
        [ -n "${BELOW_MAIN_SERIES_LOCKED_BIN:-}" ] ||
          _args+=(--skip "main-series-locked=BELOW_MAIN_SERIES_LOCKED_BIN not set") ;;
      bpf) _args+=("bpf=ours, BPF") ;;
      bpf-locked) _args+=("bpf-locked=ours, BPF, walk under cgroup_mutex") ;;
      read) _args+=("read=ours, plain read") ;;
      stream) _args+=("stream=ours, stream (patched kernel)") ;;
      bpf-before) _args+=("bpf-before=ours, BPF, before")
        [ -n "${OURS_BEFORE_BIN:-}" ] || _args+=(--skip "bpf-before=OURS_BEFORE_BIN not set") ;;
      *) _args+=("$key=$key") ;;
    esac
  done
}

# What the reproducing command needs from the environment.
env_note() {
  [ -z "$BELOW_BIN_FROM_ENV" ] || printf 'BELOW_BIN=%s ' "$BELOW_BIN"
  [ -z "${OURS_BEFORE_BIN:-}" ] || printf 'OURS_BEFORE_BIN=%s ' "$OURS_BEFORE_BIN"
  [ -z "${MAPS_BEFORE_SERIES_BIN:-}" ] || [ "$mode" != maps ] ||
    printf 'MAPS_BEFORE_SERIES_BIN=%s ' "$MAPS_BEFORE_SERIES_BIN"
  [ -z "${BELOW_MAIN_SERIES_LOCKED_BIN:-}" ] || [ "$mode" != fleet ] ||
    [[ ,$fleet_recorders, != *,main-series-locked,* ]] ||
    printf 'BELOW_MAIN_SERIES_LOCKED_BIN=%s ' "$BELOW_MAIN_SERIES_LOCKED_BIN"
}

# --fleet: one guest per vCPU count, one after the other (one QEMU at a
# time), then the report over all of them.
bench_fleet() {
  local k=$1 img n mem timeout_s keys=() cmd t0 d=$out/fleet-$1
  IFS=, read -ra keys <<<"$fleet_recorders"
  if ! img=$(tests/vm/kernel.sh "$k" 2>"$out/kernel-$k.log" | tail -n1) || [ ! -f "$img" ]; then
    log "SKIP $k: kernel not available: $(grep -v '^\s*$' "$out/kernel-$k.log" | tail -n1)"
    return 0
  fi
  rm -rf "$d"
  mkdir -p "$d"
  gcc -static -O2 -Wall -pthread -o "$d/fleet-probe" tests/bench/fleet-probe.c || return 1
  local fadds=(--add "$d/fleet-probe:/fleet-probe" --add tests/bench/fleet-guest.sh:/fleet-guest.sh
               --add "$BELOW_BIN:/bin/below" --add "$below09:/bin/below09"
               --add "$LOCKWAIT_BIN:/bin/cgroup-lock-wait" "${host_adds[@]}")
  [ -z "${BELOW_MAIN_BIN:-}" ] || fadds+=(--add "$BELOW_MAIN_BIN:/bin/below-main")
  [ -z "${BELOW_MAIN_SERIES_BIN:-}" ] || fadds+=(--add "$BELOW_MAIN_SERIES_BIN:/bin/below-main-series")
  [ -z "${BELOW_MAIN_SERIES_LOCKED_BIN:-}" ] ||
    fadds+=(--add "$BELOW_MAIN_SERIES_LOCKED_BIN:/bin/below-main-series-locked")
  [ -z "${OURS_BEFORE_BIN:-}" ] || fadds+=(--add "$OURS_BEFORE_BIN:/bin/below-before")
  for n in ${fleet_vcpus//,/ }; do
    # Kernel memory grows with CPUs (per-CPU stats of every memcg).
    mem=$((3072 + 80 * n))M
    timeout_s=$((900 + fleet_rounds * ${#keys[@]} * (2 * fleet_window + 150)))
    local numa=()
    [ "$n" -lt 16 ] || numa=(--numa)
    cmd=(sh /host-like.sh sh /fleet-guest.sh "$fleet_cgroups" "$fleet_procs" "$fleet_rounds"
         "$fleet_window" "$fleet_workers" "${keys[@]}")
    log "$k, $n vCPUs: ${cmd[*]}"
    t0=$SECONDS
    if ! tests/vm/run.sh --kernel "$img" --smp "$n" "${numa[@]}" --mem "$mem" --timeout "$timeout_s" \
        --out "$d/v$n" "${fadds[@]}" -- "${cmd[@]}" >"$d/console-v$n.log" 2>&1; then
      log "console: $d/console-v$n.log:"
      tail -n 30 "$d/console-v$n.log" | tr -d '\r' >&2
      return 1
    fi
    echo "host_s=$((SECONDS - t0))" >"$d/v$n/host.txt"
    log "$n vCPUs: $((SECONDS - t0)) s"
  done
  local repro=("tests/bench/run.sh" --fleet --vcpus "$fleet_vcpus" --cgroups "$fleet_cgroups"
               --procs "$fleet_procs" --rounds "$fleet_rounds" --window "$fleet_window"
               --workers "$fleet_workers" --recorders "$fleet_recorders" --kernels "$k")
  local report=()
  fleet_report_args report "${keys[@]}"
  {
    printf '\n## Kernel %s: the fleet guest (%s cgroups, %s processes, %s round(s), %s s windows, %s workers)\n\n' \
      "$k" "$fleet_cgroups" "$fleet_procs" "$fleet_rounds" "$fleet_window" "$fleet_workers"
    python3 tests/bench/fleet-report.py "$d" "$(env_note)${repro[*]}" "$fleet_vcpus" \
      "${report[@]}"
  } >"$d/fleet.md" || return 1
  cat "$d/fleet.md"
}

# --fleet-native: fleet-guest.sh here, in $root/bstats-fleet.
fleet_native_cleanup() {
  local cg=$1 tries=0
  [ -d "$cg" ] || return 0
  # Every process in the subtree, then its directories, deepest first.
  while [ -d "$cg" ] && [ $tries -lt 50 ]; do
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || sleep 0.2
    tries=$((tries + 1))
  done
  [ ! -d "$cg" ] || log "could not remove $cg"
}

bench_fleet_native() {
  local root n d=$out/fleet-native keys=() cg c
  root=$(findmnt -n -t cgroup2 -o TARGET | head -n1)
  [ -n "$root" ] || { log "no cgroup2 mount here"; return 1; }
  cg=$root/bstats-fleet n=$(nproc)
  IFS=, read -ra keys <<<"$fleet_recorders"
  rm -rf "$d"
  mkdir -p "$d/v$n/fleet" "$d/bin" "$d/tmp"
  gcc -static -O2 -Wall -pthread -o "$d/fleet-probe" tests/bench/fleet-probe.c || return 1
  ln -s "$BELOW_BIN" "$d/bin/below"
  ln -s "$below09" "$d/bin/below09"
  ln -s "$LOCKWAIT_BIN" "$d/bin/cgroup-lock-wait"
  [ -z "${BELOW_MAIN_BIN:-}" ] || ln -s "$BELOW_MAIN_BIN" "$d/bin/below-main"
  [ -z "${BELOW_MAIN_SERIES_BIN:-}" ] || ln -s "$BELOW_MAIN_SERIES_BIN" "$d/bin/below-main-series"
  [ -z "${BELOW_MAIN_SERIES_LOCKED_BIN:-}" ] ||
    ln -s "$BELOW_MAIN_SERIES_LOCKED_BIN" "$d/bin/below-main-series-locked"
  [ -z "${OURS_BEFORE_BIN:-}" ] || ln -s "$OURS_BEFORE_BIN" "$d/bin/below-before"
  fleet_native_cleanup "$cg"
  mkdir "$cg"
  for c in cpu memory io pids; do
    if grep -qw $c "$root/cgroup.subtree_control"; then echo "+$c" > "$cg/cgroup.subtree_control"; fi
  done
  # shellcheck disable=SC2064 # its path now
  trap "fleet_native_cleanup '$cg'" EXIT
  log "natively, $n CPUs, in $cg: fleet-guest.sh $fleet_cgroups $fleet_procs $fleet_rounds $fleet_window $fleet_workers ${keys[*]}"
  local t0=$SECONDS rc=0 report=()
  fleet_report_args report "${keys[@]}"
  FLEET_CG=$cg FLEET_PROBE=$d/fleet-probe FLEET_OUT=$d/v$n/fleet FLEET_BIN_DIR=$d/bin \
    FLEET_TMP=$d/tmp FLEET_LIB=tests/vm/guest-lib.sh \
    sh tests/bench/fleet-guest.sh "$fleet_cgroups" "$fleet_procs" "$fleet_rounds" "$fleet_window" \
    "$fleet_workers" "${keys[@]}" >"$d/console.log" 2>&1 || rc=$?
  fleet_native_cleanup "$cg"
  trap - EXIT
  if [ $rc != 0 ]; then
    tail -n 30 "$d/console.log" >&2
    return 1
  fi
  echo "host_s=$((SECONDS - t0))" >"$d/v$n/host.txt"
  local repro=("tests/bench/run.sh" --fleet-native --cgroups "$fleet_cgroups" --procs "$fleet_procs"
               --rounds "$fleet_rounds" --window "$fleet_window" --workers "$fleet_workers"
               --recorders "$fleet_recorders")
  {
    printf '\n## This machine natively (%s CPUs, kernel %s): the fleet tree (%s cgroups, %s processes, %s round(s), %s s windows, %s workers)\n\n' \
      "$n" "$(uname -r)" "$fleet_cgroups" "$fleet_procs" "$fleet_rounds" "$fleet_window" "$fleet_workers"
    python3 tests/bench/fleet-report.py "$d" "$(env_note)${repro[*]}" "$n" \
      "${report[@]}" --native
  } >"$d/fleet.md" || return 1
  cat "$d/fleet.md"
}

if [ $mode = fleet ] && [ $native = 1 ]; then
  check "fleet natively" bench_fleet_native
  tally_summary
  exit
fi

if [ $mode = fleet ]; then
  for k in $kernels; do
    check "fleet $k" bench_fleet "$k"
  done
  tally_summary
  exit
fi

for k in $kernels; do
  check "bench $k" bench_kernel "$k"
done
tally_summary
