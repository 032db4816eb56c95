#!/usr/bin/env bash
# `below record` with the BPF backend and with plain read in the Debian 7.3
# guest, over the same frozen cgroups: `below dump cgroup` must agree. Then
# top-N: `record --cgroup-top 200` at 10,000 cgroups stores the 200 busiest
# (BPF, then plain read).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

record() {
  "$REPO_ROOT/tests/vm/run.sh" --kernel debian-7.3 --timeout 400 --add "$BELOW_BIN:/below" \
    --add "$CHECK_BIN:/bstats-check" --add "$REPO_ROOT/tests/e2e/record-guest.sh:/record-guest.sh" \
    --add "$REPO_ROOT/tests/e2e/dump-rows.sh:/dump-rows.sh" \
    --add "$REPO_ROOT/tests/vm/guest-lib.sh:/guest-lib.sh" --add "$(command -v jq):/usr/bin/jq" \
    -- /bstats-check frozen-tree sh /record-guest.sh
}

top() {
  "$REPO_ROOT/tests/vm/run.sh" --kernel debian-7.3 --timeout 1200 --add "$BELOW_BIN:/below" \
    --add "$REPO_ROOT/tests/e2e/top-guest.sh:/top-guest.sh" \
    -- sh -c 'sh /top-guest.sh bpf && sh /top-guest.sh read'
}

check "build" build_release
check "record: bpf and read dumps agree (debian-7.3)" record
check "record --cgroup-top 200 at 10,000 cgroups stores the busiest (debian-7.3)" top
tally_summary
