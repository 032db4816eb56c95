#!/usr/bin/env bash
# Usage: tests/vm/kernel.sh [--no-modules] NAME
#   NAME: debian-7.3 | debian-7.2 (sid) | debian-6.12 (trixie) | debian-6.1 | patched
#   patched: Debian's linux-source-7.3 + patches/*.patch (or $BELOW_VM_PATCHES/*.patch;
#            0000-cover-letter.patch is skipped), applied in name order with patch -p1;
#            tinyconfig + kvm_guest.config + tests/vm/config/guest.config.
#            The source and object dirs stay in $CACHE/build for incremental
#            rebuilds, except when CI=true or BELOW_VM_KEEP_BUILD=0.
# Prints (last line of stdout) the absolute path of a bzImage for NAME,
# fetching or building it into the cache (${BELOW_VM_CACHE:-$HOME/.cache/below-vm}).
# Next to the bzImage: `config`, and for Debian kernels `modules/` holding the
# decompressed virtio_blk module and its dependencies plus `modules/load-order`
# (one file name a line, dependencies first), used by run.sh for its disk.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- Pins (resolved 2025-11 from the Debian archive; bump together) -------
# Old backports versions vanish from the archive: the cache keeps the .debs.
DEB73_SUITE=trixie-backports
DEB73_VERSION=7.3.4-1~bpo13+1
DEB73_ABI=7.3.4+deb13-cloud-amd64
DEB73_BINARY_SHA256=c4fbc8e404958693b28825474c20742d70594d65ca58aea7be6a279c81eb6fa0   # linux-binary-$ABI (vmlinuz)
DEB73_BASE_SHA256=e08baa43706ba6e8daff58029b039f46beecfb3b3750c6fa0d6d5ca508a46a43     # linux-base-$ABI (config)
DEB73_MODULES_SHA256=359f04c363b7d3c5f9ce999ccb7351e00cc8eec0a30d6bc1cda37734987fc43d  # linux-modules-$ABI

DEB61_SUITE=bookworm
DEB61_VERSION=6.1.176-1
DEB61_ABI=6.1.0-50-cloud-amd64
DEB61_IMAGE_SHA256=efe19f605b6f54a8352e68d85a629abb2d30b72a085faef603a9152590baa791    # linux-image-$ABI

DEB612_SUITE=trixie
DEB612_VERSION=6.12.117-1
DEB612_ABI=6.12.117+deb13-cloud-amd64
DEB612_IMAGE_SHA256=e9893e5295d0549b8852611f12a4b8b5f6cc4b8128dcc2086b9847793b904ab7   # linux-image-$ABI

# sid: packaged like trixie-backports' 7.x (linux-image-* is a meta package).
DEB72_SUITE=sid
DEB72_VERSION=7.2.13-1
DEB72_ABI=7.2.13+deb14-cloud-amd64
DEB72_BINARY_SHA256=03e41f1c34c16583462f029e81944a85ebcdb78098c258dedfa1cfdd680a27f8   # linux-binary-$ABI (vmlinuz)
DEB72_BASE_SHA256=c41b217e1a4e321f5eff028e965ea25f5da8a74cd3683ca7f4bacedc59e0ecc5     # linux-base-$ABI (config)
DEB72_MODULES_SHA256=97d79546041e3fdfb44dccff180938894d1bf8eb298f091f88539c1b37080bef  # linux-modules-$ABI

SRC73_PACKAGE=linux-source-7.3
SRC73_VERSION=$DEB73_VERSION
SRC73_SHA256=703e369ddd4cce971452f5a593ee55df3a5c10c83caf0fa0df039633ed181ee3          # linux-source-7.3 (all)
SRC73_TARBALL=usr/src/linux-source-7.3.tar.xz

# Modules the run.sh disk needs (virtio_pci is built in on 7.3, a module on 6.1).
WANT_MODULES="virtio_pci virtio_blk"
# --------------------------------------------------------------------------


# copy_modules ROOT KVER OUTDIR: decompress WANT_MODULES and their
# dependencies (read from each module's .modinfo) from ROOT/{usr/,}lib/modules/KVER.
copy_modules() {
  local root=$1 kver=$2 out=$3 mdir
  mdir=$(first_existing "$root"/usr/lib/modules/"$kver" "$root"/lib/modules/"$kver")
  [ -n "$mdir" ] || die "no modules dir for $kver"
  local tmp="$out.tmp"; rm -rf "$tmp"; mkdir -p "$tmp"
  : >"$tmp/load-order"
  local -A seen=()
  add_mod() {
    local name=$1 f fname deps d
    [ -z "${seen[$name]:-}" ] || return 0
    seen[$name]=1
    # built in? (modules.builtin lists kernel/.../name.ko)
    if [ -f "$mdir/modules.builtin" ] && grep -Eq "/${name//_/[-_]}\.ko\$" "$mdir/modules.builtin"; then
      return 0
    fi
    f=$(find "$mdir/kernel" -regextype posix-extended -regex ".*/${name//_/[-_]}\.ko(\.xz|\.zst|\.gz)?" | head -n1)
    if [ -z "$f" ]; then log "module $name not found (built in?)"; return 0; fi
    fname=$(basename "$f"); fname=${fname%.xz}; fname=${fname%.zst}; fname=${fname%.gz}
    case "$f" in
      *.xz) xz -dc "$f" >"$tmp/$fname" ;;
      *.zst) zstd -qdc "$f" >"$tmp/$fname" ;;
      *.gz) gzip -dc "$f" >"$tmp/$fname" ;;
      *) cp "$f" "$tmp/$fname" ;;
    esac
    deps=$(tr '\0' '\n' <"$tmp/$fname" | sed -n 's/^depends=//p' | head -n1)
    for d in ${deps//,/ }; do add_mod "$d"; done
    echo "$fname" >>"$tmp/load-order"
  }
  local m
  for m in $WANT_MODULES; do add_mod "$m"; done
  rm -rf "$out"; mv "$tmp" "$out"
}

debian_kernel() {
  local name=$1 ver=$2 kver=$3 dest=$4; shift 4
  # remaining args: triples suite pkg sha
  if [ -f "$dest/bzImage" ] && { [ $with_modules = 0 ] || [ -f "$dest/modules/load-order" ]; }; then
    printf '%s\n' "$dest/bzImage"; return 0
  fi
  log "fetching linux $name ($ver) ..."
  local root="$dest.root"; rm -rf "$root"; mkdir -p "$root"
  while [ $# -gt 0 ]; do
    local suite=$1 pkg=$2 sha=$3 kind=$4; shift 4
    if [ "$kind" = modules ] && [ $with_modules = 0 ]; then continue; fi
    local deb; deb=$(fetch_deb "$suite" "$pkg" "$ver" "$sha")
    log "extracting $(basename "$deb")"
    extract_deb "$deb" "$root"
  done
  mkdir -p "$dest"
  local vmlinuz config
  vmlinuz=$(first_existing "$root"/usr/lib/modules/"$kver"/vmlinuz "$root"/boot/vmlinuz-"$kver")
  config=$(first_existing "$root"/usr/lib/modules/"$kver"/config "$root"/boot/config-"$kver")
  [ -n "$vmlinuz" ] || die "no vmlinuz in the packages of $name"
  if [ -n "$config" ]; then cp "$config" "$dest/config"; fi
  if [ $with_modules = 1 ]; then
    copy_modules "$root" "$kver" "$dest/modules"
    log "modules: $(tr '\n' ' ' <"$dest/modules/load-order")"
  fi
  cp "$vmlinuz" "$dest/bzImage.tmp" && mv "$dest/bzImage.tmp" "$dest/bzImage"
  rm -rf "$root"
  printf '%s\n' "$dest/bzImage"
}

# ---- our own 7.3 ------------------------------------------------------------
# Bump when the build recipe below changes in a way that changes the kernel.
PATCHED_RECIPE=1

# Print sha256 over everything that determines the patched kernel.
patched_key() {
  {
    echo "recipe $PATCHED_RECIPE source $SRC73_PACKAGE $SRC73_VERSION $SRC73_SHA256"
    echo "fragment"; cat "$VM_DIR/config/guest.config"
    local p
    for p in "${PATCHES[@]+"${PATCHES[@]}"}"; do echo "patch $(basename "$p")"; cat "$p"; done
  } | sha256sum | cut -c1-16
}

# Run make quietly into a log, printing a progress line every 30 s.
make_logged() {
  local logf=$1; shift
  local start=$SECONDS
  make "$@" >"$logf" 2>&1 &
  local pid=$! rc=0 next=$((SECONDS + 30))
  while kill -0 $pid 2>/dev/null; do
    sleep 1
    if [ $SECONDS -ge $next ]; then
      next=$((next + 30))
      log "  ... $((SECONDS - start))s, $(grep -c '^  CC ' "$logf" || true) files compiled, last: $(tail -n1 "$logf" | sed 's/^ *//' | cut -c1-60)"
    fi
  done
  wait $pid || rc=$?
  if [ $rc != 0 ]; then
    log "make $* failed ($rc); last 40 lines of $logf:"
    tail -n 40 "$logf" | sed 's/^/[vm]   | /' >&2
    return $rc
  fi
}

build_patched() {
  PATCHES=()
  local pdir=${BELOW_VM_PATCHES:-$REPO_ROOT/patches}
  if [ -d "$pdir" ]; then
    while IFS= read -r p; do PATCHES+=("$p"); done < <(find "$pdir" -maxdepth 1 -name '*.patch' ! -name '0000-cover-letter.patch' -type f | LC_ALL=C sort)
  fi
  local key dest
  key=$(patched_key)
  dest="$CACHE/kernels/patched/$SRC73_VERSION-$key"
  if [ -f "$dest/bzImage" ]; then
    log "patched kernel cached ($key, ${#PATCHES[@]} patches)"
    printf '%s\n' "$dest/bzImage"; return 0
  fi
  local t0=$SECONDS
  log "building linux 7.3 ($SRC73_VERSION) with ${#PATCHES[@]} patches from patches/ (key $key) ..."
  install_pkgs "${PKGS_KERNEL[@]}"

  local bdir="$CACHE/build" src="$CACHE/build/src" obj="$CACHE/build/obj"
  mkdir -p "$bdir"
  # 1. pristine source tree (one, reused; the .deb stays in the cache)
  if [ "$(cat "$src/.below-source" 2>/dev/null)" != "$SRC73_VERSION" ]; then
    local deb; deb=$(fetch_deb "$DEB73_SUITE" "$SRC73_PACKAGE" "$SRC73_VERSION" "$SRC73_SHA256")
    log "extracting $SRC73_TARBALL ..."
    rm -rf "$src" "$src.tmp" "$obj"; mkdir -p "$src.tmp"
    dpkg-deb --fsys-tarfile "$deb" | tar -xO "./$SRC73_TARBALL" | xz -T0 -dc | tar -x -C "$src.tmp" --strip-components=1
    mkdir -p "$src.tmp/.below-patches"
    echo "$SRC73_VERSION" >"$src.tmp/.below-source"
    mv "$src.tmp" "$src"
    log "  source ready ($((SECONDS - t0))s)"
  fi
  # 2. patches: undo the previously applied set if it differs, apply ours
  local want have
  want=$(for p in "${PATCHES[@]+"${PATCHES[@]}"}"; do basename "$p"; sha256_of "$p"; done | sha256sum)
  # shellcheck disable=SC2012 # our own file names (patch names, cache keys)
  have=$(cd "$src/.below-patches" && for p in $(ls | LC_ALL=C sort); do echo "$p"; sha256_of "$p"; done | sha256sum)
  if [ "$want" != "$have" ]; then
    local p
    # .below-patches always lists exactly what is applied: each patch is
    # tried with --dry-run first, so a bad patch leaves the tree untouched.
    # shellcheck disable=SC2012 # our own file names (patch names, cache keys)
    for p in $(cd "$src/.below-patches" && ls | LC_ALL=C sort -r); do
      log "reverting previously applied $p"
      if ! patch -d "$src" -p1 -R --batch --dry-run --quiet <"$src/.below-patches/$p" >/dev/null ||
         ! patch -d "$src" -p1 -R --batch --quiet <"$src/.below-patches/$p" >&2; then
        rm -f "$src/.below-source"; die "cannot revert $p from $src (modified by hand?): run again to re-extract the source"
      fi
      rm "$src/.below-patches/$p"
    done
    for p in "${PATCHES[@]+"${PATCHES[@]}"}"; do
      log "applying $(basename "$p")"
      if ! patch -d "$src" -p1 --forward --batch --dry-run <"$p" >"$bdir/patch.log" 2>&1; then
        sed 's/^/[vm]   | /' "$bdir/patch.log" >&2
        die "patch $(basename "$p") does not apply to linux $SRC73_VERSION (tree left with the patches before it)"
      fi
      patch -d "$src" -p1 --forward --batch --quiet <"$p" >&2 || { rm -f "$src/.below-source"; die "patch $(basename "$p") failed after a clean dry run"; }
      cp "$p" "$src/.below-patches/"
    done
  fi
  # 3. configure: tinyconfig + kvm_guest.config + our fragment
  mkdir -p "$obj"
  log "configuring (tinyconfig + kvm_guest.config + tests/vm/config/guest.config)"
  make_logged "$bdir/config.log" -C "$src" O="$obj" tinyconfig
  (cd "$src" && scripts/kconfig/merge_config.sh -m -O "$obj" "$obj/.config" \
      kernel/configs/kvm_guest.config "$VM_DIR/config/guest.config") >"$bdir/merge.log" 2>&1 ||
    { tail -n 30 "$bdir/merge.log" >&2; die "merge_config.sh failed"; }
  make_logged "$bdir/config.log" -C "$src" O="$obj" olddefconfig
  local missing=() line sym
  while IFS= read -r line; do
    case "$line" in
      CONFIG_*=y) grep -qx "$line" "$obj/.config" || missing+=("${line%=y}") ;;
      "# CONFIG_"*" is not set") sym=${line#\# }; sym=${sym%% *}; ! grep -q "^$sym=" "$obj/.config" || missing+=("!$sym") ;;
    esac
  done <"$VM_DIR/config/guest.config"
  if [ ${#missing[@]} -gt 0 ]; then
    die "config fragment options that did not stick (missing dependency?): ${missing[*]}"
  fi
  # 4. build
  log "make -j$(nproc) bzImage (log: $bdir/build.log) ..."
  local tb=$SECONDS
  make_logged "$bdir/build.log" -C "$src" O="$obj" -j"$(nproc)" bzImage
  log "  built in $((SECONDS - tb))s"
  mkdir -p "$dest.tmp"
  cp "$obj/arch/x86/boot/bzImage" "$dest.tmp/bzImage"
  cp "$obj/.config" "$dest.tmp/config"
  # The series' kselftest, built from the same patched tree and cached with
  # the kernel it tests (tests/stream/run.sh boots them together).
  if [ -f "$src/tools/testing/selftests/cgroup/test_stat_stream.c" ]; then
    log "building the stat stream kselftest"
    "$REPO_ROOT/tests/stream/build-selftest.sh" "$src" "$dest.tmp/test_stat_stream" >&2
  fi
  { echo "source $SRC73_PACKAGE $SRC73_VERSION"; echo "key $key";
    for p in "${PATCHES[@]+"${PATCHES[@]}"}"; do echo "patch $(basename "$p") $(sha256_of "$p")"; done; } >"$dest.tmp/info"
  rm -rf "$dest"; mv "$dest.tmp" "$dest"
  # keep the newest 4 patched kernels
  # shellcheck disable=SC2012 # our own file names (patch names, cache keys)
  ls -1dt "$CACHE/kernels/patched"/*/ 2>/dev/null | tail -n +5 | while IFS= read -r old; do rm -rf "$old"; done
  # The ~2 GB source+build dirs serve incremental rebuilds; drop them in CI.
  if [ "${CI:-}" = true ] || [ "${BELOW_VM_KEEP_BUILD:-1}" = 0 ]; then
    log "removing build dirs (CI=${CI:-} BELOW_VM_KEEP_BUILD=${BELOW_VM_KEEP_BUILD:-1})"
    rm -rf "$src" "$obj"
  fi
  log "patched kernel ready in $((SECONDS - t0))s: $dest/bzImage"
  printf '%s\n' "$dest/bzImage"
}

main() {
  with_modules=1
  if [ "${1:-}" = "--no-modules" ]; then with_modules=0; shift; fi
  [ $# -eq 1 ] || die "usage: $0 [--no-modules] debian-7.3|debian-7.2|debian-6.12|debian-6.1|patched"
  local NAME=$1
  # one fetch/build per kernel name at a time (parallel test runs)
  exec 9>"$CACHE/.lock-kernel-$NAME"
  flock 9
  case "$NAME" in
    debian-7.3)
      debian_kernel debian-7.3 "$DEB73_VERSION" "$DEB73_ABI" "$CACHE/kernels/debian-7.3/$DEB73_VERSION" \
        "$DEB73_SUITE" "linux-binary-$DEB73_ABI" "$DEB73_BINARY_SHA256" image \
        "$DEB73_SUITE" "linux-base-$DEB73_ABI" "$DEB73_BASE_SHA256" image \
        "$DEB73_SUITE" "linux-modules-$DEB73_ABI" "$DEB73_MODULES_SHA256" modules
      ;;
    debian-6.1)
      debian_kernel debian-6.1 "$DEB61_VERSION" "$DEB61_ABI" "$CACHE/kernels/debian-6.1/$DEB61_VERSION" \
        "$DEB61_SUITE" "linux-image-$DEB61_ABI" "$DEB61_IMAGE_SHA256" image
      ;;
    debian-6.12)
      debian_kernel debian-6.12 "$DEB612_VERSION" "$DEB612_ABI" "$CACHE/kernels/debian-6.12/$DEB612_VERSION" \
        "$DEB612_SUITE" "linux-image-$DEB612_ABI" "$DEB612_IMAGE_SHA256" image
      ;;
    debian-7.2)
      debian_kernel debian-7.2 "$DEB72_VERSION" "$DEB72_ABI" "$CACHE/kernels/debian-7.2/$DEB72_VERSION" \
        "$DEB72_SUITE" "linux-binary-$DEB72_ABI" "$DEB72_BINARY_SHA256" image \
        "$DEB72_SUITE" "linux-base-$DEB72_ABI" "$DEB72_BASE_SHA256" image \
        "$DEB72_SUITE" "linux-modules-$DEB72_ABI" "$DEB72_MODULES_SHA256" modules
      ;;
    patched)
      build_patched
      ;;
    *) die "unknown kernel name '$NAME' (debian-7.3, debian-7.2, debian-6.12, debian-6.1, patched)" ;;
  esac
}

main "$@"; exit $?
