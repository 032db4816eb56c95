#!/usr/bin/env bash
# `below record --listen` with the BPF backend in the Debian 7.3 guest serves
# the test cgroups (tests/e2e/metrics-guest.sh); the Prometheus test itself
# runs on the host (tests/metrics/prometheus.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
echo "[e2e/metrics] building below (release)" >&2
cargo build --release --locked -q -p bstats-below
tests/vm/run.sh --kernel debian-7.3 --timeout 300 --add target/release/below:/below \
  --add tests/e2e/metrics-guest.sh:/metrics-guest.sh -- sh /metrics-guest.sh
