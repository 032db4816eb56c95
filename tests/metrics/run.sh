#!/usr/bin/env bash
# The OpenMetrics endpoint: on the host a real Prometheus scrapes
# `below record --listen` (prometheus.sh), and over TLS with basic auth and
# client certificates from a web config file (webconfig.sh); in the Debian
# 7.3 guest, with the BPF backend, it serves every test cgroup (guest.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

guest() {
  "$REPO_ROOT/tests/vm/run.sh" --kernel debian-7.3 --timeout 300 --add "$BELOW_BIN:/below" \
    --add "$REPO_ROOT/tests/metrics/guest.sh:/metrics-guest.sh" \
    --add "$REPO_ROOT/tests/vm/guest-lib.sh:/guest-lib.sh" --add "$(command -v jq):/usr/bin/jq" -- sh /metrics-guest.sh
}

check "build" build_release
check "prometheus scrapes record --listen (host, plain read)" "$REPO_ROOT/tests/metrics/prometheus.sh"
check "web config: TLS, basic auth, client certificates, idle clients (host, real Prometheus)" \
  "$REPO_ROOT/tests/metrics/webconfig.sh"
check "record --listen serves the test cgroups (debian-7.3, bpf)" guest
tally_summary
