# shellcheck shell=bash
# shellcheck disable=SC2034 # variables for the scripts that source it
# The shell library of x and of every suite under tests/. Source it; do not
# run it. Gives: REPO_ROOT; log/die tagged with the suite's directory name;
# a pass/fail tally (check, tally_summary); one package installer
# (install_pkgs and the package sets); the release binaries built once per
# `./x test` (build_release, BELOW_BIN, CHECK_BIN, BENCH_BIN).

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The tag of the script that was run ([bpf], [vm], …); x sets its own.
LOG_TAG=$(basename "$(dirname "${BASH_SOURCE[-1]}")")

log() { printf '[%s] %s\n' "$LOG_TAG" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- pass/fail tally ----------------------------------------------------------
PASSED=0 FAILED=0 FAILURES=()

# check NAME CMD [ARGS...]: runs CMD, logs and counts whether it passed.
check() {
  local name=$1 t0=$SECONDS; shift
  log "=== $name"
  if "$@"; then
    PASSED=$((PASSED + 1)); log "=== $name: ok ($((SECONDS - t0)) s)"
  else
    FAILED=$((FAILED + 1)); FAILURES+=("$name")
    log "=== $name: FAILED ($((SECONDS - t0)) s; $(df -h --output=avail "$REPO_ROOT" | tail -n 1 | tr -d ' ') free on the repo's disk)"
  fi
}

# A TCP port free on 127.0.0.1 now (for a server a test starts).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_for SECONDS CMD...: polls CMD (output dropped) every 0.25 s until
# it succeeds, or fails after SECONDS.
wait_for() {
  local n=$1; shift
  for _ in $(seq "$((n * 4))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  return 1
}

# Prints the tally (`summary: N passed, N failed`); fails when a check failed.
tally_summary() {
  [ "$FAILED" -eq 0 ] || log "failed: ${FAILURES[*]}"
  echo "summary: $PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
}

# ---- packages -----------------------------------------------------------------
# What building and testing needs, by purpose.
PKGS_BUILD=(clang-19 llvm-19 libclang1-19 libelf-dev zlib1g-dev pkg-config make)
PKGS_TEST=(tmux util-linux python3 shellcheck dpkg-dev binutils strace lsb-release jq openssl)
# The metrics suite: a real Prometheus (and promtool), remote-write target,
# certificates and bcrypt hashes for the web config.
PKGS_METRICS=(prometheus victoria-metrics curl openssl apache2-utils)
PKGS_VM=(qemu-system-x86 busybox-static cpio xz-utils zstd bpftool debian-archive-keyring
         e2fsprogs xfsprogs)
# Building our own kernel (tests/vm/kernel.sh patched).
PKGS_KERNEL=(build-essential patch flex bison bc libelf-dev libssl-dev dwarves python3)
# Building below main (tests/upstream): bindgen's runtime libclang.
PKGS_UPSTREAM=(libclang-19-dev clang-19 libelf-dev zlib1g-dev pkg-config git jq)

# install_pkgs PKG...: apt-get installs those not installed; apt-get update
# runs only when something is missing.
install_pkgs() {
  local p missing=()
  for p in "$@"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" = installed ] || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing ${missing[*]}"
  [ "$(id -u)" = 0 ] || die "installing packages needs root"
  # tests/prebuild.sh may install at the same time: wait for dpkg's lock.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends "${missing[@]}" >&2
}

# ---- release binaries -----------------------------------------------------------
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
# A BELOW_BIN from the environment is used instead of ours (another
# worktree's build, say); build_release still builds ours.
BELOW_BIN_FROM_ENV=${BELOW_BIN:+1}
BELOW_BIN=${BELOW_BIN:-$TARGET_DIR/release/below}
CHECK_BIN=$TARGET_DIR/release/bstats-check
BENCH_BIN=$TARGET_DIR/release/cgroup-bench
LOCKWAIT_BIN=$TARGET_DIR/release/cgroup-lock-wait

# Builds every release binary the suites take into guests, in one cargo run
# (one feature resolution, so no suite rebuilds another's). Once per `./x test`:
# x exports BSTATS_RELEASE_BUILT after building, and suites skip it.
build_release() {
  [ -z "${BSTATS_RELEASE_BUILT:-}" ] || return 0
  log "building release binaries (below, bstats-check, cgroup-bench, cgroup-lock-wait, store-fuzz)"
  (cd "$REPO_ROOT" && cargo build --release --locked -q -p bstats-below -p bstats-testkit -p bstats-bench -p bstats-store) || return 1
  export BSTATS_RELEASE_BUILT=1
}

# The collector's unit-test binary (release), for the tests that need a
# guest kernel (the facts, the walk, hostile names); prints its path.
collector_test_binary() {
  local bin
  bin=$(cd "$REPO_ROOT" && cargo test --release --locked -p bstats-collector --lib --no-run 2>&1 |
    sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))$/\1/p') || return 1
  [ -n "$bin" ] || return 1
  case "$bin" in /*) ;; *) bin=$REPO_ROOT/$bin ;; esac
  printf '%s\n' "$bin"
}

# ---- unit tests as a normal user ------------------------------------------------
# Every test binary of `cargo test --workspace`, run as nobody the way cargo
# runs it (in its package's directory, CARGO_MANIFEST_DIR set): nothing may
# fail, and each root-only test says so in one "skipped: " line. The
# binaries are root's build: nobody would need its own target directory and
# toolchain to build them, and the question is how the tests behave.
cargo_test_unprivileged() {
  local list exe dir home rc=0 n=0 skipped=0
  list=$(cd "$REPO_ROOT" && cargo test --workspace --locked --no-run --message-format=json |
    jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
      | "\(.executable)\t\(.manifest_path | rtrimstr("/Cargo.toml"))"') || return 1
  home=$(mktemp -d)
  chown nobody "$home"
  while IFS=$'\t' read -r exe dir; do
    n=$((n + 1))
    if ! (cd "$dir" && setpriv --reuid=nobody --regid=nogroup --clear-groups \
        env -i HOME="$home" PATH=/usr/bin:/bin CARGO_MANIFEST_DIR="$dir" "$exe" --show-output) \
        >"$home/out" 2>&1; then
      log "as nobody: $exe failed:"
      grep -E '^(---- |test .*FAILED|thread .* panicked)' "$home/out" | head -n 20 >&2
      rc=1
    fi
    skipped=$((skipped + $(grep -c '^skipped: ' "$home/out")))
    # A skip is one line: the test's captured output holds nothing else.
    if awk '/^---- .* stdout ----$/ { t = $2; n[t] = 0; next } t && /^$/ { t = ""; next }
        t { n[t]++; if (/^skipped: /) s[t] = 1 } END { for (t in s) if (n[t] != 1) { print t; bad = 1 } exit !bad }' \
        "$home/out" >&2; then
      log "as nobody: $exe: a skipped test printed more than its skip line"
      rc=1
    fi
  done <<<"$list"
  rm -rf "$home"
  log "as nobody: $n test binaries, $skipped tests skipped (root only)"
  return "$rc"
}

# ---- shellcheck ----------------------------------------------------------------
# Every shell script of ours: x and the scripts under tests/ (host and guest).
shellcheck_all() {
  (cd "$REPO_ROOT" && { printf 'x\0'; find tests -name '*.sh' -print0; } | xargs -0 shellcheck -x)
}

# The collector's BPF C in below main's style (its .clang-format): the
# files the series carries are formatted the way below main's are.
clang_format_bpf() {
  install_pkgs clang-format-19
  (cd "$REPO_ROOT/below/collector/src/bpf" && clang-format-19 --dry-run --Werror ./*.c ./*.h)
}
