#!/usr/bin/env bash
# Usage: tests/upstream/verifier.sh [--kernels "debian-6.1 debian-6.12 debian-7.2 debian-7.3"]
#                                   [--no-host] [--loads N] [--out DIR]
# What the BPF verifier does with our programs, per kernel (issue #28):
# below main's cgroup_bpf.bpf.o (as patches/below carries it) and the
# fork's bstats.bpf.o, each as the cgroup iterator and as the walk under
# RCU, loaded as the collector loads them (`bstats-check verifier`): the
# instructions the verifier processed, the program's size after it, and
# the wall time of the open+load (median of N, min-max), the verifier's own
# time and peak states (BPF_LOG_STATS loads). One markdown table
# per kernel, each under the command that reproduces it: each --kernels
# kernel booted with tests/vm/run.sh (QEMU TCG: emulated, so its load times
# are inflated; instructions processed are exact), then this machine
# (needs root) unless --no-host. The tables are also kept in DIR (default
# target/verifier). Exits non-zero when a kernel gave no table.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"
cd "$REPO_ROOT"

kernels="debian-6.1 debian-6.12 debian-7.2 debian-7.3" host=true loads=5 out=target/verifier
while [ $# -gt 0 ]; do
  case "$1" in
    --kernels) kernels=$2; shift 2 ;;
    --no-host) host=false; shift ;;
    --loads) loads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) die "unknown argument '$1' (see the usage at the top of $0)" ;;
  esac
done
case "$loads" in '' | *[!0-9]* | 0) die "--loads: a count of at least 1, not '$loads'" ;; esac
[ "$(id -u)" = 0 ] || die "run as root: the loads need CAP_BPF and the guests' packages root"

if [ -z "${BSTATS_RELEASE_BUILT:-}" ]; then
  log "building release bstats-check"
  cargo build --release --locked -q -p bstats-testkit --bin bstats-check
fi
mkdir -p "$out"
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- below || commit="$commit (with uncommitted changes under below/)"
check_rel=${CHECK_BIN#"$REPO_ROOT"/}

echo "# BPF verifier stats per kernel"
echo
echo "bstats-check built at commit $commit; $loads loads per program form."
cat <<'TEXT'
Each form is loaded as the collector loads it (its rodata, maps sized for 256 cgroups,
kfunc gating): N loads, each timed and attached, then N more with the verifier's statistics
in its log (BPF_LOG_STATS), untimed.
- insns processed: the kernel's bpf_prog_info.verified_insns (the log's "processed N insns");
  xlated insns, jited bytes: bpf_prog_info's sizes after the verifier and the JIT;
- peak states: the log's peak_states; verifier ms: its "verification time", the verifier's own;
- load wall ms: the open and load (libbpf: ELF, CO-RE against the kernel's BTF, maps, the
  verifier), not the attach.
TEXT

failed=()
# table TITLE REPRODUCE NOTE FILE: one kernel's section.
table() {
  echo
  echo "## $1"
  echo
  echo "Reproduce: \`$2\`"
  echo
  echo "$3"
  echo
  cat "$4"
}

for k in $kernels; do
  log "$k: booting (console: $out/$k.console.log)"
  load_before=$(cat /proc/loadavg)
  rm -rf "${out:?}/$k"
  # shellcheck disable=SC2016 # the guest's sh expands it
  if tests/vm/run.sh --kernel "$k" --timeout 1800 --out "$out/$k" --add "$CHECK_BIN:/bstats-check" \
    -- sh -c '/bstats-check verifier --loads "$1" >/out/verifier.md' sh "$loads" \
    >"$out/$k.console.log" 2>&1 && [ -s "$out/$k/verifier.md" ]; then
    cp "$out/$k/verifier.md" "$out/$k.md"
    table "$k (QEMU TCG guest, 2 vCPUs)" \
      "tests/upstream/verifier.sh --no-host --loads $loads --kernels $k" \
      "In the guest: \`tests/vm/run.sh --kernel $k --add $check_rel:/bstats-check -- /bstats-check verifier --loads $loads\`. Emulated (TCG): load ms are inflated, instructions processed are exact. Host /proc/loadavg before: $load_before; after: $(cat /proc/loadavg)." \
      "$out/$k.md"
  else
    failed+=("$k")
    log "$k: no table; the console's end:"
    tail -n 30 "$out/$k.console.log" >&2
  fi
done

if $host; then
  log "this machine: $(uname -r)"
  load_before=$(cat /proc/loadavg)
  if "$CHECK_BIN" verifier --loads "$loads" >"$out/host.md"; then
    table "this machine, $(uname -r) (native)" \
      "$check_rel verifier --loads $loads   # as root; or tests/upstream/verifier.sh --kernels '' --loads $loads" \
      "Native, shared with other work: /proc/loadavg before: $load_before; after: $(cat /proc/loadavg)." \
      "$out/host.md"
  else
    failed+=(host)
  fi
fi

[ ${#failed[@]} -eq 0 ] || die "no table from: ${failed[*]}"
log "done in ${SECONDS} s; tables in $out"
