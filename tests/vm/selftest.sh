#!/usr/bin/env bash
# Usage: tests/vm/selftest.sh [KERNEL...]      (default: debian-7.3 debian-6.1)
# Boots each kernel and checks, in the guest: cgroup2 mounted at /sys/fs/cgroup
# with the memory controller available and enabled in the root's subtree_control,
# bpffs mounted, and whether the memcg kfunc bpf_mem_cgroup_page_state is in
# /sys/kernel/btf/vmlinux (expected: yes on 7.3 / patched, no on 6.1). Also checks
# that arguments with spaces and quotes reach the guest intact, that --add
# works, and that files written under /out come back. Exits non-zero on any mismatch.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# (braces: bash parses the whole body first, so editing this file while it runs is safe)
{

kernels=("$@")
[ ${#kernels[@]} -gt 0 ] || kernels=(debian-7.3 debian-6.1)

work=$(mktemp -d "${TMPDIR:-/tmp}/below-vm-selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT

cat >"$work/check.sh" <<'GUEST'
#!/bin/sh
# runs in the guest: check.sh ARGS... ; writes /out/result and /out/args
r=/out/result
: >$r
if grep -q '^[^ ]* /sys/fs/cgroup cgroup2 ' /proc/mounts; then echo "cgroup2=yes" >>$r; else echo "cgroup2=no" >>$r; fi
if grep -qw memory /sys/fs/cgroup/cgroup.controllers; then echo "memory=yes" >>$r; else echo "memory=no" >>$r; fi
if grep -qw memory /sys/fs/cgroup/cgroup.subtree_control; then echo "memory_enabled=yes" >>$r; else echo "memory_enabled=no" >>$r; fi
if grep -q '^[^ ]* /sys/fs/bpf bpf ' /proc/mounts; then echo "bpffs=yes" >>$r; else echo "bpffs=no" >>$r; fi
if [ -r /sys/kernel/btf/vmlinux ]; then echo "btf=yes" >>$r; else echo "btf=no" >>$r; fi
n=$(grep -c bpf_mem_cgroup_page_state /sys/kernel/btf/vmlinux 2>/dev/null)
if [ "${n:-0}" -gt 0 ]; then echo "kfunc=yes" >>$r; else echo "kfunc=no" >>$r; fi
echo "kernel=$(uname -r)" >>$r
for a in "$@"; do printf '[%s]\n' "$a"; done >/out/args
mkdir -p "/out/sub dir"
echo "nested file" >"/out/sub dir/f 1.txt"
dd if=/dev/urandom of=/out/blob bs=1024 count=300 2>/dev/null
md5sum /out/blob | cut -d' ' -f1 >/out/blob.md5
cat $r
GUEST
chmod +x "$work/check.sh"

# what the guest must see as its arguments
# shellcheck disable=SC2016 # a literal $HOME is the point
args=("a b  c" "it's" '$HOME' '"quoted"' 'back\slash' '')
printf '[%s]\n' "${args[@]}" >"$work/args.expected"

# One kernel: boot it, run check.sh, compare what came back.
selftest_kernel() {
  local k=$1 want_kfunc out rc=0 res bad=() want
  case "$k" in
    *6.1*) want_kfunc=no ;;
    *) want_kfunc=yes ;;
  esac
  out="$work/out-$k"
  "$VM_DIR/run.sh" --kernel "$k" --timeout 300 --out "$out" --add "$work/check.sh:/selftest/check.sh" \
    -- /selftest/check.sh "${args[@]}" >"$work/console-$k.log" || rc=$?
  [ "$rc" = 0 ] || bad+=("guest exit code $rc")
  res="$out/result"
  if [ ! -f "$res" ]; then
    bad+=("no /out/result came back")
  else
    for want in cgroup2=yes memory=yes memory_enabled=yes bpffs=yes btf=yes "kfunc=$want_kfunc"; do
      grep -qx "$want" "$res" || bad+=("want $want, got $(grep "^${want%%=*}=" "$res" || echo nothing)")
    done
    cmp -s "$work/args.expected" "$out/args" || bad+=("guest arguments mangled: $(tr '\n' ' ' <"$out/args")")
    [ "$(cat "$out/sub dir/f 1.txt" 2>/dev/null)" = "nested file" ] || bad+=("nested /out file missing")
    [ "$(md5sum <"$out/blob" | cut -d' ' -f1)" = "$(cat "$out/blob.md5")" ] || bad+=("/out/blob corrupted")
  fi
  if [ ${#bad[@]} -eq 0 ]; then
    log "selftest: $k: $(grep '^kernel=' "$res"), kfunc=$want_kfunc"
    return 0
  fi
  for b in "${bad[@]}"; do log "  - $b"; done
  tail -n 30 "$work/console-$k.log" | tr -d '\r' | sed 's/^/[vm]   | /' >&2
  return 1
}

for k in "${kernels[@]}"; do
  check "selftest $k" selftest_kernel "$k"
done
tally_summary
exit $?
}
