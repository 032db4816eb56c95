#!/usr/bin/env bash
# The stream series' kselftest in the patched guest (lockdep, atomic-sleep
# and hung-task checking on), then our stream backend end to end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
kernel=$(tests/vm/kernel.sh patched | tail -n1)
selftest=$(dirname "$kernel")/test_stat_stream
[ -x "$selftest" ] || { echo "[stream] no kselftest next to $kernel (series without 0006?)" >&2; exit 1; }
echo "[stream] kselftest on $kernel" >&2
tests/vm/run.sh --kernel "$kernel" --timeout 600 \
  --add "$selftest:/test_stat_stream" --add tests/stream/guest-test.sh:/guest-test.sh \
  -- /guest-test.sh /test_stat_stream
tests/e2e/stream.sh "$kernel"
