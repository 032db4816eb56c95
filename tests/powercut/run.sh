#!/usr/bin/env bash
# Usage: tests/powercut/run.sh [--cuts N] [--fs "ext4 xfs"] [--cgroups N] [--full]
#        tests/powercut/run.sh --cost [--cgroups N]
# Power cuts while `below record` writes: the Debian 7.3 guest records to a
# store on a virtio disk (ext4, then xfs) and the host kills QEMU (kill -9)
# at a random moment after the recorders' first sample (0-16 s after, 5-16 s
# in the short run); the next boot, on the
# same disk, reads every store and records again. Per cut:
#   - every store reads without error, with our reader and below 0.9's;
#   - every sample our recorder had said was durable ("Store durable through
#     T", --debug) before the cut is there, for every reader (the promise);
#     with BELOW_MAIN_BIN set (a below main binary), below main reads too;
#   - the boot after appends again (its samples are there at the next cut,
#     and the last boot appends 3 samples cleanly);
#   - below 0.9's own store (recorded beside ours, through the same cuts):
#     how many of its samples survived, shown beside ours.
# Each recording crosses a UTC midnight (a shard rollover) 4 s after it is
# armed; `ours-limit` records at --store-size-limit 1, so every sample runs
# the size limit and the rollover removes the day before. QEMU's disk cache
# is the host's page cache: what the guest wrote to the disk survives the
# kill, what sat in the guest's page cache does not.
# Default (./x test): 1 cut on ext4, 200 cgroups (two boots, ~2.5 min).
# --full: 10 cuts on ext4 and 10 on xfs, 1,000 cgroups.
# --cost: no cut; what each store_sync policy sends to an ext4 disk for 60
# samples (COST lines: bytes in the store, bytes written to the disk).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"

cuts=1 fss=ext4 ncg=200 min_delay=5 cost=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cuts) cuts=$2; shift 2 ;;
    --fs) fss=$2; shift 2 ;;
    --cgroups) ncg=$2; shift 2 ;;
    --full) cuts=10 fss="ext4 xfs" ncg=1000 min_delay=0; shift ;;
    --cost) cost=1; shift ;;
    *) die "unknown argument '$1' (see the usage at the top of $0)" ;;
  esac
done

install_pkgs "${PKGS_VM[@]}" python3
build_release || die "build failed"
below09=$("$REPO_ROOT/tests/reference/below09.sh" | tail -n1)
kernel=$("$VM_DIR/kernel.sh" debian-7.3 | tail -n1)

# xfs is a module in Debian's cloud kernel (ext4 is built in); it has no
# dependencies. Taken from the modules .deb kernel.sh fetched.
xfs_ko() {
  local kdir deb out
  kdir=$(dirname "$kernel")
  out=$kdir/xfs.ko
  if [ ! -f "$out" ]; then
    deb=$(find "$CACHE/debs" -name "linux-modules-*_$(basename "$kdir").deb" | head -n1)
    [ -n "$deb" ] || die "no linux-modules .deb for $(basename "$kdir") in $CACHE/debs"
    dpkg-deb --fsys-tarfile "$deb" | tar -xO --wildcards '*/kernel/fs/xfs/xfs.ko.xz' | xz -dc >"$out.tmp"
    mv "$out.tmp" "$out"
  fi
  printf '%s\n' "$out"
}
xfs=$(xfs_ko)

work=$(mktemp -d "${TMPDIR:-/tmp}/powercut.XXXXXX")
keep=$CACHE/logs/powercut-$(date +%Y%m%d-%H%M%S)
mkdir -p "$keep"
trap 'rm -rf "$work"' EXIT

# A guest kernel that panicked before /init ran (under a loaded TCG host
# the 7.3 kernel's boot-time IO-APIC timer check fails now and then): the
# disk was not touched, so that boot is tried again.
panicked_early() {
  tr -d '\r' <"$1" | grep -q 'Kernel panic' && ! tr -d '\r' <"$1" | grep -qE '^(HAVE|FILE|POWERCUT|TICK)'
}

# boot FS N EPOCH MODE: one boot (a boot that panics early, again, twice
# at most); with MODE=record the power is cut.
boot() {
  local try
  for try in 1 2 3; do
    if boot_once "$@"; then return 0; fi
    panicked_early "$keep/$1-$2.log" || return 1
    log "$1 boot $2: the guest kernel panicked while booting (attempt $try); booting again"
  done
  return 1
}

boot_once() {
  local fs=$1 n=$2 epoch=$3 mode=$4 log=$keep/$1-$2.log pid rc=0 waited=0 delay
  local main=()
  [ -z "${BELOW_MAIN_BIN:-}" ] || main=(--add "$BELOW_MAIN_BIN:/below-main")
  rm -f "$work/qemu.pid"
  "$VM_DIR/run.sh" --kernel "$kernel" --timeout 900 --disk-image "$work/$fs.img" --pidfile "$work/qemu.pid" \
    --add "$BELOW_BIN:/below" --add "$below09:/below09" --add "$xfs:/xfs.ko" "${main[@]}" \
    --add "$REPO_ROOT/tests/powercut/guest.sh:/guest.sh" \
    -- sh /guest.sh "$fs" "$epoch" "$ncg" "$mode" >"$log" 2>"$log.err" &
  pid=$!
  if [ "$mode" = final ]; then
    wait "$pid" || rc=$?
    [ "$rc" = 0 ] || { log "$fs boot $n (final): run.sh exited $rc (see $log.err)"; return 1; }
    return 0
  fi
  until grep -q 'POWERCUT armed' "$log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then log "$fs boot $n ended before recording (see $log)"; return 1; fi
    [ "$waited" -lt 600 ] || { log "$fs boot $n: no recording after 600 s"; kill -9 "$(cat "$work/qemu.pid")"; return 1; }
    sleep 1; waited=$((waited + 1))
  done
  delay=$((min_delay + RANDOM % (17 - min_delay)))
  sleep "$delay"
  kill -9 "$(cat "$work/qemu.pid")"
  wait "$pid" || true
  log "$fs boot $n: power cut ${delay} s after the first sample"
}

if [ "$cost" = 1 ]; then
  truncate -s 1G "$work/ext4.img"
  mkfs.ext4 -q "$work/ext4.img"
  "$VM_DIR/run.sh" --kernel "$kernel" --timeout 1800 --disk-image "$work/ext4.img" \
    --add "$BELOW_BIN:/below" --add "$REPO_ROOT/tests/powercut/guest.sh:/guest.sh" \
    -- sh /guest.sh ext4 "$(date +%s)" "$ncg" cost >"$keep/cost.log" 2>&1 || die "cost run failed (see $keep/cost.log)"
  tr -d '\r' <"$keep/cost.log" | grep '^COST '
  exit 0
fi

for fs in $fss; do
  truncate -s 0 "$work/$fs.img"
  truncate -s 1G "$work/$fs.img"
  "mkfs.$fs" -q "$work/$fs.img" >/dev/null
  # Day 0: the next UTC midnight; boot N records from 4 s before midnight N.
  day0=$(( ($(date +%s) / 86400 + 1) * 86400 ))
  for n in $(seq 0 "$cuts"); do
    mode=record; [ "$n" -lt "$cuts" ] || mode=final
    boot "$fs" "$n" $((day0 + n * 86400 - 4)) "$mode" || die "$fs boot $n failed"
  done
done

# The tally, from the console logs.
python3 - "$keep" "$cuts" "$fss" <<'PY'
import re, sys, pathlib
keep, cuts, fss = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
bad = []
def parse(p):
    text = p.read_text(errors="replace").replace("\r", "")
    have = {}
    for m in re.finditer(r"^HAVE (\S+) (\S+) rc=(\d+) n=(\d+) ?(.*)$", text, re.M):
        have[(m[1], m[2])] = (int(m[3]), [int(t) for t in m[5].split()])
    # Warnings of a reader of our store: a torn or missing frame.
    errs = re.findall(r"^HAVE-WARN ours(?:-limit)? .*$", text, re.M)
    durable = [int(t) for t in re.findall(r"DEBG Store durable through (\d+)", text, re.M)]
    written = len(re.findall(r"DEBG sample \d+ written", text, re.M))
    # below 0.9 logs no sample; under TCG each of its samples takes over
    # the 500 ms that makes it log "data collection took".
    b09_taken = len(re.findall(r"^b09: .*data collection took", text, re.M))
    ticks = [int(t) for t in re.findall(r"^TICK (\d+)$", text, re.M)]
    epoch = [int(t) for t in re.findall(r"^POWERCUT epoch (\d+)$", text, re.M)]
    return have, errs, durable, ticks, written, b09_taken, (epoch or [0])[0]
print("cut  fs    written  promised  ours found  lost  b09 taken  b09 found  read errors  appended after")
worst = {"ours": 0, "b09": 0}
promised = []
for fs in fss:
    promised = []
    for n in range(cuts):
        _, _, durable, ticks, written, b09_taken, epoch = parse(keep / f"{fs}-{n}.log")
        have, errs, *_ = parse(keep / f"{fs}-{n + 1}.log")
        promised += durable
        # This boot's clock: from an hour before its epoch (see guest.sh)
        # to half a day after (the next boot's is a day later).
        lo, hi = epoch - 3700, epoch + 43200
        def this_boot(store, reader="ours"):
            return [t for t in have.get((store, reader), (0, []))[1] if lo <= t <= hi]
        errors = [f"{s}/{r}: rc {rc}" for (s, r), (rc, _) in have.items() if rc != 0] + errs
        for reader in ("ours", "b09", "main"):
            if reader == "main" and ("ours", "main") not in have:
                continue
            got = set(have.get(("ours", reader), (1, []))[1])
            missing = [t for t in promised if t not in got]
            if missing:
                bad.append(f"{fs} cut {n}: {reader} reader misses promised samples {missing}")
        if ("ours", "ours") not in have:
            bad.append(f"{fs} cut {n}: our store was not read")
        if errors:
            bad.append(f"{fs} cut {n}: read errors: {errors}")
        ours_found, b09_found = this_boot("ours"), this_boot("b09")
        # Written before the cut (logged), not found after it.
        lost = max(0, written - len(ours_found))
        worst["ours"] = max(worst["ours"], lost)
        # Armed once our first sample of the boot was durable: each boot
        # after a cut must have appended.
        appended = "yes" if ours_found else "NO"
        if not ours_found:
            bad.append(f"{fs} cut {n}: nothing recorded after the restart")
        print(f"{n:>3}  {fs:<5} {written:>7}  {len(durable):>8}  {len(ours_found):>10}  {lost:>4}  {b09_taken:>9}  {len(b09_found):>9}  {len(errors):>11}  {appended}")
    # The last boot reads our store before and after appending 3.
    text = (keep / f"{fs}-{cuts}.log").read_text(errors="replace")
    counts = [int(n) for n in re.findall(r"^HAVE ours ours rc=0 n=(\d+)", text, re.M)]
    if len(counts) != 2 or counts[1] != counts[0] + 3:
        bad.append(f"{fs}: the last boot's 3 samples did not append (counts {counts})")
    else:
        print(f"     {fs:<5} last boot: {counts[0]} samples, {counts[1]} after appending 3")
print(f"max samples lost per cut (ours, taken but not durable at the cut): {worst['ours']}")
for b in bad:
    print("FAIL", b)
sys.exit(1 if bad else 0)
PY
