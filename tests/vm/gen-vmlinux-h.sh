#!/usr/bin/env bash
# Usage: tests/vm/gen-vmlinux-h.sh [KERNEL] [OUTPUT]
# Regenerates below/bpf_build/include/vmlinux.h (default OUTPUT) from the BTF
# of KERNEL (default debian-7.3): boots it, copies /sys/kernel/btf/vmlinux out,
# and runs `bpftool btf dump file ... format c`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# (braces: bash parses the whole body first, so editing this file while it runs is safe)
{

kernel=${1:-debian-7.3}
output=${2:-$REPO_ROOT/below/bpf_build/include/vmlinux.h}

install_pkgs "${PKGS_VM[@]}"
command -v bpftool >/dev/null || die "bpftool not found"

kimage=$("$VM_DIR/kernel.sh" "$kernel" | tail -n1)
kdir=$(dirname "$kimage")
btf="$kdir/vmlinux.btf"
if [ ! -s "$btf" ]; then
  log "booting $kernel to read /sys/kernel/btf/vmlinux ..."
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$VM_DIR/run.sh" --kernel "$kimage" --timeout 300 --out "$tmp" -- \
    cp /sys/kernel/btf/vmlinux /out/vmlinux.btf >&2
  [ -s "$tmp/vmlinux.btf" ] || die "the guest did not return /sys/kernel/btf/vmlinux"
  mv "$tmp/vmlinux.btf" "$btf"
fi

desc=$kernel
case "$kernel" in
  debian-7.3) desc="Debian $(sed -n 's/^DEB73_VERSION=//p' "$VM_DIR/kernel.sh") linux-image $(sed -n 's/^DEB73_ABI=//p' "$VM_DIR/kernel.sh")" ;;
  debian-6.1) desc="Debian $(sed -n 's/^DEB61_VERSION=//p' "$VM_DIR/kernel.sh") linux-image $(sed -n 's/^DEB61_ABI=//p' "$VM_DIR/kernel.sh")" ;;
esac
log "bpftool btf dump ($desc) -> $output"
mkdir -p "$(dirname "$output")"
{
  cat <<HDR
/* SPDX-License-Identifier: GPL-2.0 */
/*
 * GENERATED FILE - DO NOT EDIT.
 * Kernel type definitions dumped from the BTF of $desc
 * (/sys/kernel/btf/vmlinux, sha256 $(sha256_of "$btf"))
 * with $(bpftool version 2>/dev/null | head -n1).
 * Regenerate: tests/vm/gen-vmlinux-h.sh   (boots the kernel under QEMU)
 * Build BPF code with clang -fms-extensions -Wno-microsoft-anon-tag.
 * bpftool 7.1 emits no kfunc prototypes: declare kfuncs yourself (__ksym __weak).
 */
HDR
  bpftool btf dump file "$btf" format c
} >"$output.tmp"
mv "$output.tmp" "$output"
log "wrote $output ($(wc -l <"$output") lines)"
exit $?
}
