#!/usr/bin/env bash
# Usage: tests/bench/run.sh [--smoke] [--kernels "debian-7.3 patched"] [--out DIR]
#                           [-- cgroup-bench ARGS...]
# Builds release cgroup-bench and below, boots each kernel under QEMU (TCG,
# tests/vm/run.sh), runs the whole benchmark in the guest and prints its
# markdown tables. Results: DIR/<kernel>/bench.{md,json} (DIR defaults to
# target/bench). A kernel that cannot be had (the patched one before the
# kernel series lands, or a failed build) is skipped with the reason.
#   --smoke   a tiny run (10 cgroups, 2-3 samples, K=1,2, 1 s overhead):
#             checks that everything runs in a guest, not the numbers.
#   -- ARGS   cgroup-bench arguments replacing the default set below.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"

smoke=0 kernels="debian-7.3 patched" out=target/bench
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1; shift ;;
    --kernels) kernels=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see the usage at the top of $0)" ;;
  esac
done

# shellcheck disable=SC2054 # commas separate cgroup-bench's list values
if [ $smoke = 1 ]; then
  args=(--sizes 10 --min-samples 2 --max-samples 3 --budget-s 0 --readers 1,2
        --cgroups 10 --holders 2 --overhead-secs 1 --overhead-rounds 1)
  vm_timeout=300
else
  # Sized for TCG (~50x slower than the host): every cell stops after its
  # budget once it has its minimum samples; ~10 min per kernel.
  args=(--sizes 10,100,1000,5000 --min-samples 2 --max-samples 200 --budget-s 5
        --readers 1,4,8 --cgroups 1000 --holders 32 --overhead-secs 10 --overhead-rounds 1)
  vm_timeout=1500
fi
[ $# -eq 0 ] || args=("$@")

build_release || die "build failed"

mkdir -p "$out"
out=$(cd "$out" && pwd)
# One kernel: boot it, run the benchmark, print its tables (and with
# --smoke check they are sane). A kernel that cannot be had is skipped.
bench_kernel() {
  local k=$1 img cmd
  if ! img=$(tests/vm/kernel.sh "$k" 2>"$out/kernel-$k.log" | tail -n1) || [ ! -f "$img" ]; then
    log "SKIP $k: kernel not available: $(grep -v '^\s*$' "$out/kernel-$k.log" | tail -n1)"
    return 0
  fi
  rm -rf "${out:?}/$k"
  cmd=(cgroup-bench --below /bin/below --json /out/bench.json --md /out/bench.md "${args[@]}")
  log "$k: ${cmd[*]}"
  if ! tests/vm/run.sh --kernel "$img" --timeout "$vm_timeout" --out "$out/$k" \
      --add "$BENCH_BIN:/bin/cgroup-bench" --add "$BELOW_BIN:/bin/below" \
      -- "${cmd[@]}" >"$out/console-$k.log" 2>&1; then
    log "console: $out/console-$k.log:"
    tail -n 30 "$out/console-$k.log" | tr -d '\r' >&2
    return 1
  fi
  # shellcheck disable=SC2016 # backquotes are markdown
  printf '\n## Kernel %s\n\nReproduce all: `tests/bench/run.sh%s --kernels %s`\n\n' \
    "$k" "$([ $smoke = 1 ] && echo ' --smoke')" "$k"
  cat "$out/$k/bench.md"
  [ $smoke = 1 ] || return 0
  # Sanity, not timing: the baseline and plain read produced numbers.
  python3 - "$out/$k/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {x["kind"]: x for x in r["collect"][0]["rows"]}
for k in ("baseline", "read"):
    x = rows[k]
    assert x["status"] == "ok", (k, x["status"])
    assert x["cgroups"] >= 11 and x["samples"] >= 2, x
    assert x["read"]["cpu_ms"] > 0 and x["read"]["wall_p50_ms"] > 0, x
    assert x["read_syscalls"] > 0 and x["opens"] and x["alloc_read_bytes"] > 0, x
for k in ("stream", "bpf"):
    assert rows[k]["status"] == "ok" or rows[k]["status"].startswith("n/a: "), rows[k]
assert all(p["status"] != "ok" or p["p50_ms"] > 0 for p in r["parallel"]["rows"])
assert r["overhead"]["rows"][0]["ops_per_s"] > 0
print("[bench] smoke: sane", file=sys.stderr)
PY
}

for k in $kernels; do
  check "bench $k" bench_kernel "$k"
done
tally_summary
