#!/usr/bin/env bash
# Usage: tests/upstream/run.sh
# below main (the pinned tarball in ../shared/upstream) with patches/below:
# git am the series onto the pristine tree, build it (harness-only steps
# outside the series: bindgen `runtime`, `clang` -> clang-19; see README.md),
# run upstream's tests the way its CI runs them, then in the Debian 7.3 guest
# record frozen cgroups with stock below main reading files and with patched
# below main with enable_cgroup_bpf: its iterator must run and
# `below dump cgroup` must agree. Skips (exit 0) when the tarball is absent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source tests/upstream/lib.sh
if ! upstream_available; then
  ulog "SKIP: no below main tarball (../shared/upstream/below-${UPSTREAM_COMMIT:0:8}.tar.gz next to the repo; set BELOW_UPSTREAM_TARBALL)"
  exit 0
fi
tests/vm/deps.sh --quiet # bpftool for the guest
stock=$(upstream_binary stock | tail -n1)
patched=$(upstream_binary patched | tail -n1)
upstream_tests patched
tests/vm/run.sh --kernel debian-7.3 --timeout 600 \
  --add "$stock:/below-stock" --add "$patched:/below-patched" \
  --add tests/upstream/guest.sh:/guest.sh --add tests/e2e/cgroup-tree.sh:/cgroup-tree.sh \
  --add "$(command -v bpftool):/usr/local/bin/bpftool" \
  -- sh /guest.sh check /below-stock /below-patched
