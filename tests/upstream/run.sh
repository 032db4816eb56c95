#!/usr/bin/env bash
# Usage: tests/upstream/run.sh [--steps]
# below main (the pinned tarball in ../shared/upstream) with patches/below:
# git am the series onto the pristine tree, build it (harness-only steps
# outside the series: bindgen `runtime`, `clang` -> clang-19; see README.md),
# run upstream's tests the way its CI runs them, then in the Debian 7.3 guest
# record frozen cgroups with patched below main reading files and with
# enable_cgroup_bpf: its iterator must run, its log must say what BPF serves
# (6.1: why memory.stat is read from the file) and `below dump cgroup` must
# agree; upstream's own vmtest parity tests (cgroupfs's cgroup_bpf::tests)
# run in the 7.3, 7.2 and 6.12 guests. The series must carry
# below/collector's files unchanged (sync.sh --check).
# --steps (`./x test --full`; a cold run costs ~1 h on 2 cores, so CI
# leaves it out): instead, each pull request and patch on its own —
# stock (the build fixes alone) builds and, reading files, dumps what
# patched below main reads by BPF; each reader patch before the last builds
# and passes upstream's tests as its CI runs them.
# Skips (exit 0) when the tarball is absent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
steps=false
case "${1:-}" in
  --steps) steps=true ;;
  "") ;;
  *) die "usage: $0 [--steps]" ;;
esac
if ! upstream_available; then
  log "SKIP: no below main tarball (../shared/upstream/below-${UPSTREAM_COMMIT:0:8}.tar.gz next to the repo; set BELOW_UPSTREAM_TARBALL)"
  exit 0
fi

# The binary that reads files in the guest check: patched below main
# without enable_cgroup_bpf, or with --steps stock below main.
files=patched
$steps && files=stock
binaries() {
  # stock first: patched's target dir starts as a copy of stock's.
  files_bin=$(upstream_binary $files | tail -n1) && patched=$(upstream_binary patched | tail -n1)
}

# guest KERNEL LOG_LINE: the frozen-tree check of guest.sh in KERNEL.
guest() {
  # A failed build leaves them unset: this check fails, the others run.
  if [ -z "${files_bin:-}" ] || [ -z "${patched:-}" ]; then
    log "no below main binaries: their build failed"; return 1
  fi
  install_pkgs bpftool
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$1" --timeout 600 \
    --add "$files_bin:/below-files" --add "$patched:/below-patched" --add "$CHECK_BIN:/bstats-check" \
    --add "$REPO_ROOT/tests/upstream/guest.sh:/guest.sh" --add "$REPO_ROOT/tests/e2e/dump-rows.sh:/dump-rows.sh" \
    --add "$(command -v bpftool):/usr/local/bin/bpftool" \
    -- /bstats-check frozen-tree sh /guest.sh /below-files /below-patched "$2"
}

check "build (bstats-check)" build_release
check "build below main with the series$($steps && echo ", and stock")" binaries
if $steps; then
  check "each reader patch before the last builds and passes upstream's tests" upstream_steps
  check "7.3 guest: stock reading files and patched with enable_cgroup_bpf dump the same" \
    guest debian-7.3 "cgroup BPF: memory.stat from BPF"
  tally_summary
  exit
fi
# vmtest KERNEL: upstream's own BPF parity tests (cgroupfs's cgroup_bpf::tests,
# `#[test]` only with the vmtest feature) from the patched tree, as root in
# KERNEL's guest, while parity's live tree is stirred (they compare "every
# cgroup on the host"); they must run (not be filtered out) and pass.
vmtest() {
  local bin
  bin=$(vmtest_binary patched | tail -n1)
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$1" --timeout 600 --disk 64M --add "$bin:/cgroupfs-vmtest" \
    --add "$CHECK_BIN:/bstats-check" -- /bstats-check live-tree sh -c '/cgroupfs-vmtest --test-threads=1 cgroup_bpf::tests 2>&1 | tee /tmp/vmtest.log
              grep -q "^test result: ok\. [1-9][0-9]* passed" /tmp/vmtest.log'
}

check "the series carries below/collector's files unchanged" "$REPO_ROOT/tests/upstream/sync.sh" --check
check "upstream's tests (as its CI runs them)" upstream_tests patched
check "below's conventions on what the series adds" "$REPO_ROOT/tests/upstream/conventions.sh" patched
check "7.3 guest: files and enable_cgroup_bpf dumps agree" \
  guest debian-7.3 "cgroup BPF: memory.stat from BPF"
check "6.1 guest: no memcg kfuncs, memory.stat read from the file, dumps agree" \
  guest debian-6.1 "cgroup BPF: memory.stat from the file: kernel lacks kfunc"
check "7.3 guest: upstream's vmtest parity tests" vmtest debian-7.3
check "7.2 guest: upstream's vmtest parity tests" vmtest debian-7.2
check "6.12 guest: upstream's vmtest parity tests" vmtest debian-6.12
# 6.1 has no css iterator kfuncs: the parity tests of the locked walk.
check "6.1 guest: upstream's vmtest parity tests (the cgroup iterator)" vmtest debian-6.1
# The ~2 GB target dirs serve rebuilds after a series change; drop them in CI
# (the binaries stay cached in $UP/bin).
if [ "${CI:-}" = true ]; then rm -rf "$UP/target" "$UP"/target-*; fi
tally_summary
