#!/usr/bin/env bash
# Usage: tests/vm/run.sh --kernel NAME_OR_PATH [--root IMAGE] [--timeout SECS]
#                        [--add HOSTPATH[:GUESTPATH]]... [--out DIR] [--disk SIZE]
#                        [--disk-image FILE] [--pidfile FILE]
#                        [--mem SIZE] [--smp N] [--numa] [--append ARGS] -- GUEST_COMMAND [ARGS...]
# Boots NAME (see kernel.sh) or a bzImage PATH under QEMU (TCG) with a busybox
# initramfs and runs GUEST_COMMAND as root in it; the console goes to stdout
# and to a log file; exits with the guest command's exit code.
#   --root IMAGE        boot IMAGE (an ext4 disk image, e.g. rootfs.sh's) with
#                       its own /sbin/init (systemd): the initramfs mounts it
#                       and switch_roots; GUEST_COMMAND runs as a oneshot unit
#                       after multi-user.target (below-vm-run.service). IMAGE
#                       is attached with snapshot=on: runs never change it.
#   --add HOST[:GUEST]  copy a file or directory into the guest (default GUEST:
#                       /<basename of HOST>); shared libraries of ELF files and
#                       the dynamic loader come along (not with --root: the
#                       image has its own).
#   --out DIR           whatever the guest writes under /out lands in DIR (created;
#                       not emptied first). Transported as a tar archive written
#                       by the guest to a virtio disk (serial below-out, up to 4 GiB).
#   --disk SIZE         attach a blank raw scratch disk (e.g. 1G), /dev/scratch in the guest.
#   --disk-image FILE   attach FILE (raw) as /dev/scratch instead, kept across runs
#                       (tests/powercut reboots onto the same disk).
#   --pidfile FILE      QEMU writes its pid there (to cut the power: kill -9).
#   --timeout SECS      whole-VM time limit (default 600).
#   --numa              two NUMA nodes, each with half the memory and the CPUs
#                       (memory.numa_stat with more than one node).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# (braces: bash parses the whole body first, so editing this file while it runs is safe)
{

kernel='' rootimg='' timeout_s=600 out='' disk='' disk_image='' pidfile='' mem=2G smp=2 append='' numa=0
adds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) kernel=$2; shift 2 ;;
    --root) rootimg=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --add) adds+=("$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --disk) disk=$2; shift 2 ;;
    --disk-image) disk_image=$2; shift 2 ;;
    --pidfile) pidfile=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --numa) numa=1; shift ;;
    --append) append="$append $2"; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see the usage at the top of $0)" ;;
  esac
done
[ -n "$kernel" ] || die "--kernel is required"
[ $# -gt 0 ] || die "no guest command given (after --)"
[ -z "$rootimg" ] || [ -f "$rootimg" ] || die "--root: no image $rootimg"

install_pkgs "${PKGS_VM[@]}"

# ---- kernel -----------------------------------------------------------------
if [ -f "$kernel" ]; then
  kimage=$(cd "$(dirname "$kernel")" && pwd)/$(basename "$kernel")
else
  kimage=$("$VM_DIR/kernel.sh" "$kernel" | tail -n1)
fi
[ -f "$kimage" ] || die "no kernel image: $kimage"
kmods=$(dirname "$kimage")/modules
[ -f "$kmods/load-order" ] || kmods=

# ---- base initramfs (busybox), cached ----------------------------------------
bb=$(command -v busybox || true)
{ [ -n "$bb" ] && [ -x "$bb" ]; } || die "busybox not found (./x deps installs busybox-static)"
if ldd "$bb" >/dev/null 2>&1; then die "$bb is dynamically linked: install busybox-static"; fi
base="$CACHE/initramfs/base-$(sha256_of "$bb" | cut -c1-16).cpio"
if [ ! -f "$base" ]; then
  log "building base initramfs $base"
  mkdir -p "$CACHE/initramfs"
  t=$(mktemp -d)
  (
    cd "$t"
    mkdir -p bin sbin usr/bin usr/sbin usr/local/bin lib lib64 etc proc sys dev tmp run root out mnt var/tmp
    cp "$bb" bin/busybox
    for app in $(bin/busybox --list-full); do
      [ -e "$app" ] || ln -s /bin/busybox "$app"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >etc/passwd
    printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group
    # (the kernel's built-in initramfs has /dev/console too: fine without root)
    mknod -m 600 dev/console c 5 1 2>/dev/null || true
    mknod -m 666 dev/null c 1 3 2>/dev/null || true
    find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet >"$t.cpio"
  )
  mv "$t.cpio" "$base"
  rm -rf "$t"
fi

# ---- per-run initramfs ------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/below-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/etc" "$root/lib/vm-modules"
# With --root, the added files wait in the initramfs's /stage and are copied
# into the image's file system before switch_root.
files=$root
[ -z "$rootimg" ] || files=$root/stage
mkdir -p "$files"

# Copy shared libraries of ELF file $1 (and the loader) into the guest root.
copy_libs() {
  local f=$1 lib
  head -c4 "$f" 2>/dev/null | grep -q 'ELF' || return 0
  # ldd fails on static binaries: nothing to copy then.
  local deps
  deps=$(ldd "$f" 2>/dev/null) || return 0
  while read -r lib; do
    { [ -n "$lib" ] && [ -e "$lib" ]; } || continue
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done < <(printf '%s\n' "$deps" | sed -n -e 's/.*=> \(\/[^ ]*\) .*/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p')
}

for a in "${adds[@]+"${adds[@]}"}"; do
  host=${a%%:*}
  if [ "$host" = "$a" ]; then guest=/$(basename "$host"); else guest=${a#*:}; fi
  [ -e "$host" ] || die "--add: $host does not exist"
  case "$guest" in /*) ;; *) guest=/$guest ;; esac
  mkdir -p "$files$(dirname "$guest")"
  cp -a "$host" "$files$guest"
  # The image's own libraries serve it (the host's could be older).
  [ -z "$rootimg" ] || continue
  if [ -d "$host" ]; then
    while IFS= read -r -d '' f; do copy_libs "$f"; done < <(find "$host" -type f -print0)
  else
    copy_libs "$host"
  fi
done

if [ -n "$kmods" ]; then
  cp "$kmods"/*.ko "$kmods/load-order" "$root/lib/vm-modules/"
fi

# Quote each argument for POSIX sh (busybox ash): 'a'\''b'
quoted=
for arg in "$@"; do
  quoted="$quoted '$(printf '%s' "$arg" | sed "s/'/'\\\\''/g")'"
done

want_out=0; [ -n "$out" ] && want_out=1
want_root=0; [ -n "$rootimg" ] && want_root=1

# Shell text used by /init and, with --root, by the unit's script.
# Finds the virtio disks by serial: below-out (transport for /out),
# below-scratch, below-root (--root's image).
disks=$(cat <<'SH'
OUTDEV= ROOTDEV=
for i in 1 2 3 4 5 6 7 8 9 10; do
  for b in /sys/block/vd*; do
    [ -e "$b/serial" ] || continue
    case "$(cat $b/serial)" in
      below-out) OUTDEV=/dev/${b##*/} ;;
      below-scratch) ln -sf /dev/${b##*/} /dev/scratch ;;
      below-root) ROOTDEV=/dev/${b##*/} ;;
    esac
  done
  if { [ $WANT_OUT = 0 ] || [ -n "$OUTDEV" ]; } && { [ $WANT_ROOT = 0 ] || [ -n "$ROOTDEV" ]; }; then break; fi
  sleep 0.2
done
SH
)
# Runs the command, sends /out back, prints the EXIT line.
run_cmd=$(cat <<SH
mkdir -p /out
cd /
$quoted </dev/null
rc=\$?
SH
)
run_cmd+=$'\n'$(cat <<'SH'
if [ $WANT_OUT = 1 ]; then
  if [ -z "$OUTDEV" ]; then
    echo "[vm-init] OUT=fail (no below-out disk: virtio_blk missing?)"
  elif tar -cf "$OUTDEV" -C /out . && sync; then
    echo "[vm-init] OUT=ok"
  else
    echo "[vm-init] OUT=fail"
  fi
fi
sync
printf '\nEXIT=%s\n' "$rc"
SH
)

cat >"$root/init" <<INIT
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin:/usr/local/bin
export HOME=/root TERM=dumb
WANT_OUT=$want_out WANT_ROOT=$want_root
INIT
# shellcheck disable=SC2129 # the init script is written in parts, quoted and not
cat >>"$root/init" <<'INIT'
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || mdev -s
exec </dev/null >/dev/console 2>&1
if [ -f /lib/vm-modules/load-order ]; then
  for m in $(cat /lib/vm-modules/load-order); do
    insmod /lib/vm-modules/$m || echo "[vm-init] insmod $m failed"
  done
fi
INIT
printf '%s\n' "$disks" >>"$root/init"
if [ -n "$rootimg" ]; then
  # systemd mounts the rest itself; /dev, /proc and /sys move along.
  cat >>"$root/init" <<'INIT'
mkdir -p /newroot
if [ -z "$ROOTDEV" ] || ! mount -t ext4 "$ROOTDEV" /newroot; then
  echo "[vm-init] cannot mount the below-root disk ($ROOTDEV)"
  poweroff -f
fi
cp -a /stage/. /newroot/
for m in dev proc sys; do mount -o move /$m /newroot/$m; done
exec switch_root -c /dev/console /newroot /sbin/init
INIT
  # The command, as a unit after multi-user.target; its output on the console.
  cat >"$files/below-vm-run.sh" <<SH
#!/bin/sh
WANT_OUT=$want_out WANT_ROOT=0
$disks
$run_cmd
systemctl poweroff --force
SH
  sd=$files/etc/systemd/system
  mkdir -p "$sd/multi-user.target.wants"
  cat >"$sd/below-vm-run.service" <<'UNIT'
[Unit]
Description=tests/vm/run.sh guest command
After=multi-user.target

[Service]
Type=oneshot
Environment=HOME=/root TERM=dumb
ExecStart=/bin/sh /below-vm-run.sh
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/console
TimeoutStartSec=infinity
UNIT
  ln -s ../below-vm-run.service "$sd/multi-user.target.wants/below-vm-run.service"
  # No login prompt on the console the results come back on.
  ln -s /dev/null "$sd/serial-getty@ttyS0.service"
else
  cat >>"$root/init" <<'INIT'
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs tmpfs /dev/shm 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "[vm-init] cannot mount cgroup2"
mount -t bpf bpf /sys/fs/bpf || echo "[vm-init] cannot mount bpffs"
if [ -d /sys/kernel/debug ]; then mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null; fi
if [ -d /sys/kernel/tracing ]; then mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null; fi
ulimit -l unlimited 2>/dev/null
hostname below-vm
ip link set lo up 2>/dev/null
for c in cpuset cpu io memory pids; do
  if grep -qw $c /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo +$c >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || echo "[vm-init] cannot enable +$c"
  fi
done
INIT
  printf '%s\npoweroff -f\n' "$run_cmd" >>"$root/init"
fi
chmod 755 "$root/init"

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$work/run.cpio"
cat "$base" "$work/run.cpio" >"$work/initrd.cpio"

# ---- QEMU -------------------------------------------------------------------
# Single-threaded TCG: with one host thread per vCPU, a vCPU now and then
# executes the int3 the kernel plants while live-patching its text (static
# keys, ftrace) on another vCPU and oopses ("Oops: int3", seen on 7.3).
# no_timer_check: on a loaded host the emulated timer can miss the boot
# check's window, and 6.1 then panics ("IO-APIC + timer doesn't work").
# shellcheck disable=SC2054 # commas are qemu's
qargs=(-accel tcg,thread=single -m "$mem" -smp "$smp" -nographic -no-reboot -nic none
       -kernel "$kimage" -initrd "$work/initrd.cpio"
       -append "console=ttyS0 panic=-1 quiet no_timer_check$append")
if [ $numa = 1 ]; then
  [ "$smp" -ge 2 ] || die "--numa needs --smp 2 or more"
  half=$(( $(numfmt --from=iec "$mem") / 2 / 1048576 ))M
  qargs+=(-object "memory-backend-ram,id=m0,size=$half" -numa "node,nodeid=0,cpus=0-$((smp / 2 - 1)),memdev=m0"
          -object "memory-backend-ram,id=m1,size=$half" -numa "node,nodeid=1,cpus=$((smp / 2))-$((smp - 1)),memdev=m1")
fi
if [ -n "$out" ]; then
  truncate -s 4G "$work/out.img"
  qargs+=(-drive "file=$work/out.img,if=none,format=raw,id=out"
          -device "virtio-blk-pci,drive=out,serial=below-out")
  [ -n "$kmods" ] || grep -q 'CONFIG_VIRTIO_BLK=y' "$(dirname "$kimage")/config" 2>/dev/null ||
    log "warning: no virtio_blk modules next to $kimage: --out needs virtio_blk built in"
fi
if [ -n "$rootimg" ]; then
  qargs+=(-drive "file=$rootimg,if=none,format=raw,id=root,snapshot=on"
          -device "virtio-blk-pci,drive=root,serial=below-root")
fi
if [ -n "$disk" ] && [ -z "$disk_image" ]; then
  truncate -s "$disk" "$work/scratch.img"
  disk_image=$work/scratch.img
fi
if [ -n "$disk_image" ]; then
  [ -f "$disk_image" ] || die "--disk-image: no file $disk_image"
  qargs+=(-drive "file=$disk_image,if=none,format=raw,id=scratch"
          -device "virtio-blk-pci,drive=scratch,serial=below-scratch")
fi
[ -z "$pidfile" ] || qargs+=(-pidfile "$pidfile")

mkdir -p "$CACHE/logs"
# keep the newest 100 console logs
# (find, not a glob: with no logs yet a failing ls would end the script under pipefail)
find "$CACHE/logs" -maxdepth 1 -name 'run-*.log' -printf '%T@ %p\n' | sort -rn | tail -n +100 |
  cut -d' ' -f2- | while IFS= read -r f; do rm -f "$f"; done
logf="$CACHE/logs/run-$(date +%Y%m%d-%H%M%S)-$$.log"
log "booting $(basename "$(dirname "$kimage")")/$(basename "$kimage") (timeout ${timeout_s}s); console log: $logf"
start=$(date +%s.%N)
set +e
timeout -k 10 "$timeout_s" qemu-system-x86_64 "${qargs[@]}" </dev/null 2>&1 | tee "$logf"
qrc=${PIPESTATUS[0]}
set -e
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')

exitline=$(tr -d '\r' <"$logf" | grep -E '^EXIT=[0-9]+$' | tail -n1 || true)
if [ -z "$exitline" ]; then
  if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then why="timeout after ${timeout_s}s"; else why="qemu exited $qrc (kernel panic or guest crash?)"; fi
  log "FAILED: no EXIT line from the guest: $why; last 50 console lines:"
  tail -n 50 "$logf" | tr -d '\r' | sed 's/^/[vm]   | /' >&2
  log "console log: $logf"
  exit 125
fi
rc=${exitline#EXIT=}

if [ -n "$out" ]; then
  if tr -d '\r' <"$logf" | grep -q 'OUT=ok$'; then
    mkdir -p "$out"
    tar -xf "$work/out.img" -C "$out" --no-same-owner
    log "guest /out copied to $out"
  else
    log "FAILED: the guest could not write /out back (see $logf)"
    [ "$rc" != 0 ] || rc=125
  fi
fi
log "guest exited rc=$rc after ${secs}s"
exit "$rc"
exit $?
}
