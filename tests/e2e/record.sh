#!/usr/bin/env bash
# `below record` with the BPF backend and with plain read in the Debian 7.3
# guest, over the same frozen cgroups: `below dump cgroup` must agree. Then
# top-N: `record --cgroup-top 200` at 10,000 cgroups stores the 200 busiest
# (BPF, then plain read).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
echo "[e2e/record] building below (release)" >&2
cargo build --release --locked -q -p bstats-below
tests/vm/run.sh --kernel debian-7.3 --timeout 1200 --add target/release/below:/below \
  --add tests/e2e/record-guest.sh:/record-guest.sh --add tests/e2e/top-guest.sh:/top-guest.sh \
  -- sh -c 'sh /record-guest.sh && sh /top-guest.sh bpf && sh /top-guest.sh read'
