#!/usr/bin/env bash
# The stream backend end to end: in the patched guest, stream values equal
# plain read on frozen cgroups and `below record --cgroup-backend stream`
# records a store that replays (on the host, in tmux); in the stock 7.3
# guest, forcing stream fails with the reason.
# Usage: tests/e2e/stream.sh [PATCHED_BZIMAGE]   (default: tests/vm/kernel.sh patched)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
say() { printf '[e2e/stream] %s\n' "$*" >&2; }

say "building release binaries"
cargo build --release --locked -q -p bstats-below
cargo build --release --locked -q -p bpf_stats --example compare
below=target/release/below compare=target/release/examples/compare
patched=${1:-$(tests/vm/kernel.sh patched | tail -n1)}
work=$(mktemp -d)
trap 'tmux -L e2e-stream kill-server 2>/dev/null || true; rm -rf "$work"' EXIT

say "patched guest: compare + record"
tests/vm/run.sh --kernel "$patched" --timeout 300 --out "$work/out" \
  --add "$below:/below" --add "$compare:/compare" \
  --add tests/e2e/stream-guest.sh:/stream-guest.sh -- sh /stream-guest.sh

say "host: replay the guest's store"
tmux -L e2e-stream new-session -d -x 200 -y 50 \
  "$below --store-dir $work/out/store replay --time '1h ago'; sleep 30"
for _ in $(seq 40); do
  screen=$(tmux -L e2e-stream capture-pane -p)
  grep -q "stream-t" <<<"$screen" && grep -q replay <<<"$screen" && break
  sleep 0.5
done
grep -q "stream-t" <<<"$screen" || { say "FAIL: replay does not show stream-t:"; echo "$screen"; exit 1; }
tmux -L e2e-stream send-keys q

say "stock 7.3 guest: --cgroup-backend stream is unavailable"
tests/vm/run.sh --kernel debian-7.3 --timeout 120 --add "$below:/below" -- \
  sh -c '! /below --cgroup-backend stream record --count 1 2>/tmp/err; cat /tmp/err; grep -q "no stream files" /tmp/err'
say "passed"
