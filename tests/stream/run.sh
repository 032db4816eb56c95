#!/usr/bin/env bash
# Usage: tests/stream/run.sh [PATCHED_BZIMAGE]   (default: tests/vm/kernel.sh patched)
# The stream series' kselftest in the patched guest (lockdep, atomic-sleep
# and hung-task checking on), then our stream backend end to end: in the
# patched guest, stream values equal plain read on frozen cgroups and
# `below record --cgroup-backend stream` records a store that replays (on
# the host, in tmux), live parity holds for what streams serve, and cgroups
# named with bytes that are not UTF-8 stay apart; in the stock 7.3 guest,
# forcing stream fails with the reason.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
here=$REPO_ROOT/tests/stream
vm=$REPO_ROOT/tests/vm

kernel=${1:-$("$vm/kernel.sh" patched | tail -n1)}
selftest=$(dirname "$kernel")/test_stat_stream
work=$(mktemp -d)
trap 'tmux -L stream-replay kill-server 2>/dev/null || true; rm -rf "$work"' EXIT

kselftest() {
  [ -x "$selftest" ] || { log "no kselftest next to $kernel (series without 0006?)"; return 1; }
  "$vm/run.sh" --kernel "$kernel" --timeout 600 \
    --add "$selftest:/test_stat_stream" --add "$here/guest-test.sh:/guest-test.sh" \
    -- /guest-test.sh /test_stat_stream
}

compare_and_record() {
  "$vm/run.sh" --kernel "$kernel" --timeout 300 --out "$work/out" \
    --add "$BELOW_BIN:/below" --add "$CHECK_BIN:/bstats-check" \
    --add "$here/e2e-guest.sh:/e2e-guest.sh" \
    --add "$vm/guest-lib.sh:/guest-lib.sh" --add "$(command -v jq):/usr/bin/jq" -- sh /e2e-guest.sh
}

replay() {
  local screen=
  tmux -L stream-replay new-session -d -x 200 -y 50 \
    "$BELOW_BIN --store-dir $work/out/store replay --time '1h ago'; sleep 30"
  for _ in $(seq 40); do
    screen=$(tmux -L stream-replay capture-pane -p)
    grep -q "stream-t" <<<"$screen" && grep -q replay <<<"$screen" && break
    sleep 0.5
  done
  tmux -L stream-replay send-keys q
  grep -q "stream-t" <<<"$screen" || { log "replay does not show stream-t:"; echo "$screen"; return 1; }
}

# Live parity: every value the stream files serve lies between the plain
# reads just before and after each sample (pressure is not streamed: no
# freeze plant).
stream_parity() {
  "$vm/run.sh" --kernel "$kernel" --timeout 900 --disk 64M --add "$CHECK_BIN:/bstats-check" -- \
    /bstats-check parity 12 --top 5 --backend stream --plant swap --plant stale
}

# Cgroup names that are not UTF-8 (the collector's names_test) with every
# backend, stream included.
hostile_names() {
  local bin
  bin=$(collector_test_binary) || return 1
  "$vm/run.sh" --kernel "$kernel" --timeout 300 --add "$bin:/collector-test" -- \
    /collector-test --test-threads 1 --exact names_test::names_that_are_not_utf8_stay_distinct_cgroups
}

unavailable_on_stock() {
  "$vm/run.sh" --kernel debian-7.3 --timeout 120 --add "$BELOW_BIN:/below" -- \
    sh -c '! /below --cgroup-backend stream record --count 1 2>/tmp/err; cat /tmp/err; grep -q "no stream files" /tmp/err'
}

check "build" build_release
check "kselftest + dmesg ($kernel)" kselftest
check "patched guest: stream == read, record" compare_and_record
check "host: replay the guest's store" replay
check "patched guest: stream live parity" stream_parity
check "patched guest: names that are not UTF-8, every backend" hostile_names
check "stock 7.3 guest: --cgroup-backend stream is unavailable" unavailable_on_stock
tally_summary
