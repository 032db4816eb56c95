#!/usr/bin/env bash
# Usage: tests/upstream/record-bill.sh [--cgroups N] [--secs S] [--kernel NAME]
# What `below record -i 1` costs below main per sample, whole process (user +
# sys CPU over S seconds after a 15 s warm-up, divided by the samples stored
# in that window), in one guest boot over N cgroups (default 1000, Debian
# 7.3): "below main, files" and "below main, enable_cgroup_bpf" (stock), and
# "below main + this series" once patches/below holds more than the build
# fixes. Prints a markdown table with the command reproducing it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source tests/upstream/lib.sh
n=1000 secs=30 kernel=debian-7.3
while [ $# -gt 0 ]; do
  case "$1" in
    --cgroups) n=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    *) sed -n '2,8p' "$0" >&2; exit 2 ;;
  esac
done
upstream_available || { ulog "SKIP: no below main tarball"; exit 0; }
tests/vm/deps.sh --quiet # bpftool for the guest
stock=$(upstream_binary stock | tail -n1)
rows=("below main, files:/below-stock:files" "below main, enable_cgroup_bpf:/below-stock:bpf")
adds=(--add "$stock:/below-stock")
if [ "$(variant_key patched)" != "$(variant_key stock)" ]; then
  patched=$(upstream_binary patched | tail -n1)
  rows+=("below main + this series:/below-patched:bpf")
  adds+=(--add "$patched:/below-patched")
else
  ulog "patches/below holds only the build fixes: no \"below main + this series\" row yet"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
tests/vm/run.sh --kernel "$kernel" --timeout $((600 + ${#rows[@]} * (secs + 60))) "${adds[@]}" \
  --add tests/upstream/guest.sh:/guest.sh --add tests/e2e/cgroup-tree.sh:/cgroup-tree.sh \
  --add "$(command -v bpftool):/usr/local/bin/bpftool" \
  -- sh /guest.sh bill "$n" "$secs" "${rows[@]}" | tee "$log" >&2
# shellcheck disable=SC2016 # backticks are markdown
printf '\nReproduce: `tests/upstream/record-bill.sh --cgroups %s --secs %s --kernel %s`\n\n' "$n" "$secs" "$kernel"
echo "| recorder | cgroups | samples | CPU ms / sample (whole process) | cgroup iterator ran |"
echo "| --- | ---: | ---: | ---: | --- |"
tr -d '\r' <"$log" | sed -n 's/^bill: name="\([^"]*\)" cgroups=\([0-9]*\) seconds=[0-9]* samples=\([0-9]*\) cpu_ms=[0-9]* cpu_ms_per_sample=\([0-9]*\) bpf_iter=\(.*\)$/| \1 | \2 | \3 | \4 | \5 |/p'
