# shellcheck shell=bash
# Helpers for the tests/upstream scripts: below main (the pinned tarball in
# ../shared/upstream) as a git repo with patches/below applied, built with the
# harness-only steps Debian needs. Source it; do not run it.
# shellcheck source=tests/vm/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"

UPSTREAM_COMMIT=bb8a4873389c30fc2c5371509baba3b593e641bf
# ../shared/upstream next to the repo; from a linked worktree, next to the
# main one.
upstream_tarball() {
  local name=below-${UPSTREAM_COMMIT:0:8}.tar.gz common
  if [ -n "${BELOW_UPSTREAM_TARBALL:-}" ]; then printf '%s\n' "$BELOW_UPSTREAM_TARBALL"; return; fi
  common=$(git -C "$REPO_ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
  first_existing "$REPO_ROOT/../shared/upstream/$name" ${common:+"$(dirname "$common")/../shared/upstream/$name"}
}
UPSTREAM_TARBALL=$(upstream_tarball)
# Two pull requests: the open-source build fixes (below main cannot be
# built outside Meta without them, so "stock" is the pristine tree plus
# these), and the reader series on top of them.
BUILD_SERIES=$REPO_ROOT/patches/below/build
READER_SERIES=$REPO_ROOT/patches/below/reader
UP=$CACHE/upstream
LIBCLANG_DIR=/usr/lib/llvm-19/lib
# Bump when the harness steps below change: trees are re-prepared.
HARNESS_VERSION=3

# What the series carries verbatim: "OURS THEIRS" per line, paths from
# each repo's root (the program and its header next to upstream's BPF C,
# the Rust in its cgroup_bpf module, the BPF layer as its module `layer`).
shared_files() {
  local f
  for f in cgroup_bpf.bpf.c cgroup_bpf_record.h .clang-format; do
    echo "below/collector/src/bpf/$f below/cgroupfs/src/bpf/$f"
  done
  for f in contract.rs contract/tests.rs decode.rs decode/tests.rs kernel.rs kernel/tests.rs load.rs load/tests.rs; do
    echo "below/collector/src/bpf/$f below/cgroupfs/src/cgroup_bpf/$f"
  done
  # What those use of bstats-bpf (the collector's `layer` and `cputime`):
  # modules of the same names there.
  for f in layer.rs cputime.rs cputime/tests.rs; do
    echo "below/bpf/src/$f below/cgroupfs/src/cgroup_bpf/$f"
  done
}

# The fork's own lines of a shared file, left out of the series (the
# fork builds on the same code: a BTF file for tests, its bigger program
# loaded with the same steps):
#   a line ending in `// fork-only` or `/* fork-only */` (before a
#     macro's `\`);
#   the lines from `// fork-only {` to `// } fork-only` (or in /* */);
#   `// series: TEXT` (or /* series: TEXT */): TEXT in the series, in
#     place of the line that follows it.
strip_fork_only() {
  awk '
    function marker(re) { return $0 ~ ("^[[:space:]]*(//|/\\*) " re "( \\*/)?[[:space:]]*\\\\?$") }
    marker("fork-only [{]") { if (skip) { print "nested fork-only block at line " NR > "/dev/stderr"; exit 1 }; skip = NR; next }
    marker("[}] fork-only") { if (!skip) { print "unopened fork-only block at line " NR > "/dev/stderr"; exit 1 }; skip = 0; next }
    skip { next }
    /(\/\/ fork-only|\/\* fork-only \*\/)[[:space:]]*\\?$/ { next }
    /^[[:space:]]*(\/\/|\/\*) series: / {
      match($0, /^[[:space:]]*/); indent = substr($0, 1, RLENGTH)
      text = $0; sub(/^[[:space:]]*(\/\/|\/\*) series: /, "", text); sub(/ \*\/[[:space:]]*$/, "", text)
      print indent text; replace = 1; next
    }
    replace { replace = 0; next }
    # A blank line where one was printed before the lines left out.
    /^[[:space:]]*$/ && NR > printed + 1 && blank { next }
    { print; printed = NR; blank = ($0 ~ /^[[:space:]]*$/) }
    END { if (skip) { print "fork-only block from line " skip " not closed" > "/dev/stderr"; exit 1 } }
  '
}

# A shared file as the series carries it into TREE: without the fork's
# lines (strip_fork_only); in upstream's cgroupfs crate, `cgroupfs::` is
# `crate::`, and Rust is formatted in upstream's style (upstream_rustfmt).
#   shared_file OURS TREE
shared_file() {
  case "$1" in
    *.rs) strip_fork_only <"$REPO_ROOT/$1" | sed 's/\bcgroupfs::/crate::/g' | upstream_rustfmt "$2" ;;
    *) strip_fork_only <"$REPO_ROOT/$1" ;;
  esac
}

# upstream_rustfmt TREE: TREE's rustfmt.toml with the pinned
# nightly (its unstable keys: import grouping and granularity), stdin to
# stdout.
upstream_rustfmt() {
  nightly_rustfmt
  rustfmt "+$UPSTREAM_NIGHTLY" --edition 2024 --config-path "$1/rustfmt.toml" 2>/dev/null
}

upstream_available() { [ -n "$UPSTREAM_TARBALL" ] && [ -f "$UPSTREAM_TARBALL" ]; }

# A pull request's patches in order (cover letter excluded).
pr_patches() {
  find "$1" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]-*.patch' ! -name '0000-*' | LC_ALL=C sort
}

# The patches applied for VARIANT stock (the build fixes), patched (and
# the reader series) or stepN (and the reader series' first N patches).
series_patches() {
  pr_patches "$BUILD_SERIES"
  case "$1" in
    stock) ;;
    step*) pr_patches "$READER_SERIES" | head -n "${1#step}" ;;
    *) pr_patches "$READER_SERIES" ;;
  esac
}

# What a tree is made of: tarball, patches, harness version.
variant_key() {
  { sha256_of "$UPSTREAM_TARBALL"; echo "harness $HARNESS_VERSION"
    series_patches "$1" | while read -r p; do sha256_of "$p"; done; } | sha256sum | cut -c1-16
}

# The nightly toolchain for upstream's rustfmt.toml (unstable keys), pinned.
UPSTREAM_NIGHTLY=nightly-2026-05-20
nightly_rustfmt() {
  rustup run "$UPSTREAM_NIGHTLY" rustfmt --version >/dev/null 2>&1 && return 0
  log "installing $UPSTREAM_NIGHTLY (rustfmt) for upstream's rustfmt.toml"
  rustup toolchain install "$UPSTREAM_NIGHTLY" --profile minimal --component rustfmt >&2
}

# Harness packages: bindgen's runtime feature dlopens libclang.so.
upstream_deps() {
  install_pkgs "${PKGS_UPSTREAM[@]}"
  mkdir -p "$UP/shim"
  # libbpf-cargo runs `clang`; Debian names it clang-19.
  ln -sf "$(command -v clang-19)" "$UP/shim/clang"
}

ugit() { git -c user.name="tests/upstream" -c user.email=harness@localhost -c commit.gpgsign=false "$@"; }

# Prepare $UP/src-VARIANT (or DIR): the pristine tree committed once, then (when the
# key changed) reset to it, the series `git am`ed and the harness steps
# committed on top. Resetting instead of re-extracting keeps unchanged files'
# mtimes, so cargo rebuilds only what a patch touched. Prints the tree path.
upstream_tree() {
  local variant=$1 dir=${2:-$UP/src-$1} key tarsha p
  key=$(variant_key "$variant")
  tarsha=$(sha256_of "$UPSTREAM_TARBALL")
  if [ "$(cat "$dir/.git/harness-pristine" 2>/dev/null)" != "$tarsha" ]; then
    log "$variant: unpacking $(basename "$UPSTREAM_TARBALL")"
    rm -rf "$dir"; mkdir -p "$dir"
    tar -xzf "$UPSTREAM_TARBALL" -C "$dir" --strip-components=1
    ugit -C "$dir" init -q -b main
    ugit -C "$dir" add -A
    GIT_AUTHOR_DATE=2026-08-17T00:00:00Z GIT_COMMITTER_DATE=2026-08-17T00:00:00Z \
      ugit -C "$dir" commit -q -m "below ${UPSTREAM_COMMIT:0:12} (pristine, from $(basename "$UPSTREAM_TARBALL"))"
    ugit -C "$dir" tag pristine
    echo "$tarsha" >"$dir/.git/harness-pristine"
  fi
  if [ "$(cat "$dir/.git/harness-key" 2>/dev/null)" != "$key" ]; then
    ugit -C "$dir" am --abort >/dev/null 2>&1 || true
    ugit -C "$dir" reset -q --hard pristine
    ugit -C "$dir" clean -qfdx
    while read -r p; do
      [ -n "$p" ] || continue
      log "$variant: git am $(basename "$p")"
      ugit -C "$dir" am -q "$p" >&2 || die "git am $(basename "$p") failed on below ${UPSTREAM_COMMIT:0:8}"
    done < <(series_patches "$variant")
    harness_steps "$dir"
    echo "$key" >"$dir/.git/harness-key"
  fi
  printf '%s\n' "$dir"
}

# Steps outside the series, committed as one "harness:" commit.
harness_steps() {
  local dir=$1 f=$1/below/cgroupfs/Cargo.toml
  # cgroupfs's parity tests are `#[test]` only under `vmtest`, which Meta's
  # build declares and the open-source manifest does not: declared here so
  # they can run in a guest (vmtest_binary).
  grep -q '^\[features\]' "$f" || die "harness: no [features] in $f"
  grep -q '^vmtest = ' "$f" || sed -i '/^\[features\]/a vmtest = []' "$f"
  # bindgen's `static` feature links libclang.a, which Debian does not ship.
  # `runtime` turns on clang-sys's optional libloading, which enters the
  # lock: cargo adds it (the one unlocked cargo here), and must change
  # nothing else in the lock (the builds are --locked).
  grep -q '^bindgen = .*"static"' "$f" || die "harness: no bindgen \"static\" feature in $f"
  sed -i '/^bindgen = /s/"static"/"runtime"/' "$f"
  (cd "$dir" && cargo metadata --format-version 1 >/dev/null) || die "harness: cargo metadata failed in $dir"
  case "$(git -C "$dir" diff --numstat -- Cargo.lock | cut -f2)" in
    "" | 0) ;;
    *) git -C "$dir" diff -- Cargo.lock >&2; die "harness: bindgen's runtime feature changed more than it adds to $dir/Cargo.lock" ;;
  esac
  ugit -C "$dir" commit -q -a -m "harness: declare cgroupfs's vmtest feature; bindgen runtime, not static (Debian ships no libclang.a), with what that adds to Cargo.lock"
}

# The target dir of a tree. One per tree: cargo hashes path crates by their
# path relative to the workspace, so two trees sharing one would overwrite
# each other's workspace crates and rebuild them on every switch.
target_of() { if [ "$(basename "$1")" = src-stock ]; then echo "$UP/target"; else echo "$UP/target-${1##*/src-}"; fi; }

# Cargo in a tree with the harness environment, --locked: the build fixes
# bring Cargo.lock up to the manifests (build/0003) and each patch keeps it
# there, so a patch whose lock is stale fails here instead of being fixed
# up by cargo.
ucargo() {
  local dir=$1; shift
  [ "${1:-}" = clean ] || vmlinux_output_of "$dir"
  (cd "$dir" && PATH="$UP/shim:$PATH" LIBCLANG_PATH=$LIBCLANG_DIR CARGO_TARGET_DIR="$(target_of "$dir")" \
    nice -n 10 cargo --locked "$@" 8>&-) # no orphan rustc keeps the lock
}

# below-vmlinux's build output names the headers of the tree that built it,
# and cargo keys path crates by their path inside the workspace: a target dir
# copied from another tree, or used by hand from a clone, keeps the other
# tree's path (cgroupfs's BPF build then looks for a vmlinux.h that is gone).
# Cleaned so the build script runs again for DIR.
vmlinux_output_of() {
  local dir=$1 f
  for f in "$(target_of "$dir")"/release/build/below-vmlinux-*/output; do
    [ -f "$f" ] || continue
    grep -q '/below/vmlinux' "$f" || continue
    grep -qF "$dir/below/vmlinux" "$f" && continue
    log "$(target_of "$dir"): below-vmlinux was built from another tree ($(grep -om1 '/[^ ]*/below/vmlinux' "$f")): cargo clean -p below-vmlinux"
    ucargo "$dir" clean --release -p below-vmlinux >/dev/null 2>&1 || die "cargo clean -p below-vmlinux failed in $dir"
    return
  done
}

# Build below for VARIANT; copy it to $UP/bin/below-main-VARIANT and print
# that path. One cargo at a time (2 cores).
upstream_binary() {
  upstream_available || die "no upstream tarball (../shared/upstream/below-${UPSTREAM_COMMIT:0:8}.tar.gz next to the repo; BELOW_UPSTREAM_TARBALL overrides)"
  # Built from these very inputs already: no lock (a test run may hold it).
  if [ -x "$UP/bin/below-main-$1" ] && [ "$(cat "$UP/bin/below-main-$1.key" 2>/dev/null)" = "$(variant_key "$1")" ]; then
    printf '%s\n' "$UP/bin/below-main-$1"; return
  fi
  upstream_deps
  mkdir -p "$UP/bin"
  (flock 8; build_variant "$1") 8>"$UP/.lock"
}

# The patched build with the walk under RCU turned off (rcu_walk_in() says
# no), for measuring the cgroup iterator that kernels without that walk
# run against stock on one kernel; built in the patched tree, which is
# restored after. Prints $UP/bin/below-main-locked.
locked_binary() {
  local bin="$UP/bin/below-main-locked" key dir f rc
  key="$(variant_key patched) locked"
  if [ -x "$bin" ] && [ "$(cat "$bin.key" 2>/dev/null)" = "$key" ]; then
    printf '%s\n' "$bin"; return
  fi
  upstream_binary patched >/dev/null
  dir=$(upstream_tree patched)
  f=$dir/below/cgroupfs/src/cgroup_bpf/kernel.rs
  grep -q '^fn rcu_walk_in(btf: &KernelBtf) -> std::result::Result<(), &.static str> {$' "$f" \
    || die "locked: no rcu_walk_in() in $f"
  (
    flock 8
    cp "$f" "$f.orig"
    sed -i '/^fn rcu_walk_in(/a\    if std::hint::black_box(true) {\n        return Err("turned off for a measurement");\n    }' "$f"
    log "locked: cargo build --release -p below (log: $UP/build-locked.log)"
    rc=0
    ucargo "$dir" build --release -p below >"$UP/build-locked.log" 2>&1 || rc=$?
    mv -f "$f.orig" "$f"
    [ $rc -eq 0 ] || { tail -n 40 "$UP/build-locked.log" >&2; die "locked: build failed"; }
    cp -f "$(target_of "$dir")/release/below" "$bin.tmp" && mv -f "$bin.tmp" "$bin"
    echo "$key" >"$bin.key"
  ) 8>"$UP/.lock"
  printf '%s\n' "$bin"
}

build_variant() {
  local variant=$1 dir bin="$UP/bin/below-main-$1" t0=$SECONDS
  if [ "$variant" = patched ] && [ "$(variant_key patched)" = "$(variant_key stock)" ]; then
    # The series holds only the build fixes so far: patched is stock.
    build_variant stock >/dev/null
    cp -f "$UP/bin/below-main-stock" "$bin"
    variant_key stock >"$bin.key"
  else
    dir=$(upstream_tree "$variant")
    # A new tree's target dir starts from stock's: the registry crates are
    # the same (workspace crates rebuild: cargo keys them by path).
    if [ ! -d "$(target_of "$dir")" ] && [ -d "$UP/target" ]; then
      cp -a "$UP/target" "$(target_of "$dir")"
    fi
    log "$variant: cargo build --release -p below (log: $UP/build-$variant.log)"
    ucargo "$dir" build --release -p below >"$UP/build-$variant.log" 2>&1 \
      || { tail -n 40 "$UP/build-$variant.log" >&2; die "$variant: build failed"; }
    cp -f "$(target_of "$dir")/release/below" "$bin.tmp" && mv -f "$bin.tmp" "$bin"
    variant_key "$variant" >"$bin.key"
    log "$variant: cargo build took $((SECONDS - t0)) s"
  fi
  printf '%s\n' "$bin"
}

# Each patch of the reader series before the last (the patched tree is the
# last) on its own, in one tree ($UP/src-steps, so each step rebuilds only
# what its patch touched): below builds and cgroupfs's tests pass. A step
# that passed with the same inputs is not run again ($UP/steps.ok).
upstream_steps() {
  upstream_available || die "no upstream tarball"
  upstream_deps
  (flock 8; steps_locked) 8>"$UP/.lock"
}

steps_locked() {
  local n k dir log="$UP/steps.log" key t
  n=$(pr_patches "$READER_SERIES" | wc -l)
  for ((k = 1; k < n; k++)); do
    key=$(variant_key "step$k")
    if grep -qx "$key" "$UP/steps.ok" 2>/dev/null; then
      log "reader patch $k of $n: passed before with these inputs"
      continue
    fi
    dir=$(upstream_tree "step$k" "$UP/src-steps")
    # Registry crates from another tree's target dir (built by now).
    if [ ! -d "$(target_of "$dir")" ]; then
      for t in "$UP/target-patched" "$UP/target"; do
        [ -d "$t" ] && cp -a "$t" "$(target_of "$dir")" && break
      done
    fi
    log "reader patch $k of $n: cargo build --release -p below (log: $log)"
    ucargo "$dir" build --release -p below >"$log" 2>&1 \
      || { tail -n 40 "$log" >&2; die "reader patch $k of $n: the build failed"; }
    ci_tests "$dir" "$UP/steps-test.log" "reader patch $k of $n"
    echo "$key" >>"$UP/steps.ok"
  done
}

# Upstream's tests in VARIANT's tree, the way its CI runs them:
# `cargo test --release -- --skip ...` with the --skip list read from its
# .github/workflows/ci.yml (tests that need cgroup2 on the host). Prints the
# summed counts; fails when a test fails.
upstream_tests() {
  upstream_available || die "no upstream tarball"
  upstream_deps
  (flock 8; run_tests_locked "$1") 8>"$UP/.lock"
}

run_tests_locked() {
  local variant=$1 dir
  if [ "$variant" = patched ] && [ "$(variant_key patched)" = "$(variant_key stock)" ]; then
    dir=$(upstream_tree stock) # the same tree: its crates are built already
  else
    dir=$(upstream_tree "$variant")
  fi
  ci_tests "$dir" "$UP/test-$variant.log" "$variant"
}

# ci_tests DIR LOG LABEL: `cargo test --release -- --skip ...` in DIR with
# the --skip list read from its .github/workflows/ci.yml (tests that need
# cgroup2 on the host). Prints the summed counts; dies when a test fails.
ci_tests() {
  local dir=$1 log=$2 label=$3 skips=() t0=$SECONDS rc=0
  mapfile -t skips < <(grep -oE -- '--skip [A-Za-z0-9_:]+' "$dir/.github/workflows/ci.yml" | tr ' ' '\n')
  [ ${#skips[@]} -gt 0 ] || die "no --skip list in $dir/.github/workflows/ci.yml (did the CI workflow change?)"
  # CI's runner has cgroup2 at /sys/fs/cgroup; these build a model from it.
  if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ]; then
    log "no cgroup2 at /sys/fs/cgroup here: also skipping below-view's controllers::test (they collect a sample from it)"
    skips+=(--skip controllers::test::test_belowrc_to_event --skip controllers::test::test_event_controller_override)
  fi
  log "$label: cargo test --release --no-fail-fast -- ${skips[*]} (log: $log)"
  ucargo "$dir" test --release --no-fail-fast -- "${skips[@]}" >"$log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    # Some of upstream's tests race a 20 ms timeout (fb_procfs's
    # test_pid_cmdline_loop) and fail on a loaded 2-core machine: one more
    # run, and the first run's failures stay in the log.
    log "$label: failed: $(grep -E '^test .* FAILED' "$log" | awk '{print $2}' | tr '\n' ' ')-- running the tests once more"
    mv "$log" "$log.first"
    rc=0
    ucargo "$dir" test --release --no-fail-fast -- "${skips[@]}" >"$log" 2>&1 || rc=$?
    [ $rc -ne 0 ] || log "$label: passed the second time (first run's log: $log.first)"
  fi
  awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) c[$(i + 1)] += $i }
    END { printf "[upstream] tests: %d passed, %d failed, %d ignored, %d filtered out\n",
          c["passed;"], c["failed;"], c["ignored;"], c["filtered"] }' "$log" >&2
  log "$label: cargo test took $((SECONDS - t0)) s"
  if [ $rc -ne 0 ]; then
    grep -E "^(test .* FAILED|failures:|error)" "$log" | head -n 40 >&2
    die "$label: cargo test failed (rc $rc, log $log)"
  fi
}

# cgroupfs's test binary for VARIANT with upstream's `vmtest` feature (its
# BPF parity tests: root, cgroup2 at /sys/fs/cgroup, memcg kfuncs), copied to
# $UP/bin/cgroupfs-vmtest-VARIANT; prints that path.
vmtest_binary() {
  upstream_available || die "no upstream tarball"
  upstream_deps
  (flock 8; vmtest_binary_locked "$1") 8>"$UP/.lock"
}

vmtest_binary_locked() {
  local variant=$1 dir exe bin="$UP/bin/cgroupfs-vmtest-$1"
  if [ -x "$bin" ] && [ "$(cat "$bin.key" 2>/dev/null)" = "$(variant_key "$variant")" ]; then
    printf '%s\n' "$bin"; return
  fi
  dir=$(upstream_tree "$variant")
  log "$variant: cargo test --release -p cgroupfs --features vmtest --no-run (log: $UP/vmtest-$variant.log)"
  exe=$(ucargo "$dir" test --release -p cgroupfs --features vmtest --no-run --message-format=json \
          2>"$UP/vmtest-$variant.log" \
        | jq -r 'select(.reason == "compiler-artifact" and .target.name == "cgroupfs"
                        and .profile.test == true) | .executable' | tail -n1) \
    || { tail -n 40 "$UP/vmtest-$variant.log" >&2; die "$variant: cgroupfs vmtest build failed"; }
  [ -x "$exe" ] || { tail -n 40 "$UP/vmtest-$variant.log" >&2; die "$variant: no cgroupfs test binary"; }
  mkdir -p "$UP/bin"
  cp -f "$exe" "$bin.tmp" && mv -f "$bin.tmp" "$bin"
  variant_key "$variant" >"$bin.key"
  printf '%s\n' "$bin"
}
