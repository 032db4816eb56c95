#!/usr/bin/env bash
# Usage: tests/fuzz/run.sh [SECONDS]   (default 60; FUZZ_SEED=N to replay a run)
# Fuzzes the store reader's decoder (index entries, frames, zstd with and
# without dictionaries, CBOR, escaping) for SECONDS with store-fuzz (see
# below/store/src/bin/store-fuzz.rs), under a 4 GiB address-space limit so
# an allocation the reader should have refused aborts the run instead of
# passing. Fails on any panic, abort or control character left in a
# decoded sample; failing inputs are kept in $FUZZ_CRASHES (default: a
# directory named in the log), and `store-fuzz --replay DIR/crash-N`
# checks one again.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
LOG_TAG=fuzz

seconds=${1:-60}
build_release
crashes=${FUZZ_CRASHES:-$(mktemp -d "${TMPDIR:-/tmp}/store-fuzz.XXXXXX")}
args=(--seconds "$seconds" --crashes "$crashes")
[ -z "${FUZZ_SEED:-}" ] || args+=(--seed "$FUZZ_SEED")
log "store-fuzz for ${seconds}s (failing inputs go to $crashes)"
if (ulimit -v $((4 << 20)); "$TARGET_DIR/release/store-fuzz" "${args[@]}"); then
  rmdir "$crashes" 2>/dev/null || true
else
  die "store-fuzz failed (inputs in $crashes)"
fi
