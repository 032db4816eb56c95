#!/bin/sh
# One boot of tests/powercut/run.sh in the Debian 7.3 guest. The store disk
# (/dev/scratch, ext4 or xfs) survives from boot to boot; the host kills
# QEMU while this boot records (the power cut).
#   guest.sh FS EPOCH CGROUPS record|final|cost
# Mounts the disk (journal/log recovery), prints what every reader finds in
# every store (HAVE lines: an empty store reads as n=0; readers: ours,
# below 0.9 and, when the host added /below-main, below main), then either
# records until the power goes (record) or appends 3 samples cleanly and
# reads again (final). EPOCH: the host makes it 4 s before a UTC midnight,
# a day later each boot, so time only goes forward from boot to boot and
# every recording crosses a shard rollover; the clock is set to it once
# our recorder's first sample is durable ("POWERCUT armed").
# Stores: ours (`record --compress --dict-compress-chunk-size 16`, the
# default store_sync), ours-limit (the same at --store-size-limit 1: every
# sample runs the size limit, an older shard goes at the rollover) and b09
# (below 0.9's record, --compress). Recorders log to the console: ours at
# --debug, whose "Store durable through T" lines are the promise; straight
# to the console (a filter between, busybox awk, held lines back for
# seconds: they died with the power).
set -u
fs=$1 epoch=$2 ncg=$3 mode=$4
echo  # the console's escape codes end here: lines start clean
echo "POWERCUT epoch $epoch"

[ "$fs" != xfs ] || insmod /xfs.ko || echo "POWERCUT insmod xfs failed"
mkdir -p /mnt
mount -t "$fs" /dev/scratch /mnt || { echo "POWERCUT mount failed"; exit 1; }

b09_conf() { # STORE: below 0.9 and main take the store directory from a config file
  mkdir -p /tmp/log09
  printf 'store_dir = "/mnt/%s"\nlog_dir = "/tmp/log09"\n' "$1" >"/tmp/$1.b09.conf"
  echo "/tmp/$1.b09.conf"
}

# HAVE STORE READER rc=RC n=N T... : the sample timestamps READER dumps.
have() {
  store=$1 reader=$2
  [ -d "/mnt/$store" ] || return 0
  case $reader in
    ours) set -- /below --store-dir "/mnt/$store" ;;
    b09) set -- /below09 --config "$(b09_conf "$store")" ;;
    main) set -- /below-main --config "$(b09_conf "$store")" ;;
  esac
  "$@" dump system -b "2000-01-01 00:00:00" -e "2100-01-01 00:00:00" -f timestamp -O csv >/tmp/dump 2>/tmp/err
  rc=$?
  # An empty store (below 0.9's after a cut) is no read error.
  if [ "$rc" != 0 ] && grep -q 'No initial sample could be found' /tmp/err; then rc=0; fi
  ts=$(grep -E '^[0-9]+,$' /tmp/dump | tr -d , | tr '\n' ' ')
  # shellcheck disable=SC2086 # count the words
  set -- $ts
  echo "HAVE $store $reader rc=$rc n=$# $ts"
  # Anything the reader said that is not about the far-off range asked for.
  grep -e WARN -e ERRO /tmp/err | grep -v -e 'over 60 seconds' -e 'Expected file does not exist' |
    head -n 5 | sed "s/^/HAVE-WARN $store $reader: /"
}

read_all() {
  for s in ours ours-limit b09; do
    have "$s" ours
    have "$s" b09
    [ ! -x /below-main ] || have "$s" main
  done
}

# cost: what each store_sync policy writes to the disk: 60 samples a second
# apart at CGROUPS cgroups, then `sync`, each policy into its own store;
# COST lines: policy, bytes in the store, bytes the disk was sent, fsyncs
# (none, or 2 a sample: data, then index).
if [ "$mode" = cost ]; then
  i=0
  while [ "$i" -lt "$ncg" ]; do mkdir -p "/sys/fs/cgroup/load/c$i"; i=$((i + 1)); done
  dev=$(basename "$(readlink -f /dev/scratch)")
  written() { awk '{ print $7 * 512 }' "/sys/block/$dev/stat"; }
  for policy in none sample interval:60; do
    dir=/mnt/$(echo "$policy" | tr : -)
    sync
    w0=$(written)
    /below --store-dir "$dir" record --interval-s 1 --count 60 --compress --disable-exitstats \
      --store-sync "$policy" 2>&1 | tail -n 1
    sync
    w1=$(written)
    echo "COST $policy store=$(cat "$dir"/data_* "$dir"/index_* | wc -c) disk=$((w1 - w0))"
  done
  umount /mnt
  exit 0
fi

read_all
for f in /mnt/*/*_*; do
  [ ! -f "$f" ] || echo "FILE $(wc -c <"$f") $f"
done

set_clock() { date -u -s "@$1" >/dev/null || echo "POWERCUT cannot set the clock"; }
if [ "$mode" = final ]; then
  set_clock "$epoch"
  /below --store-dir /mnt/ours record --interval-s 1 --count 3 --compress --dict-compress-chunk-size 16 2>&1 | tail -n 1
  have ours ours
  umount /mnt
  echo "POWERCUT final done"
  exit 0
fi

# A large compressed sample: CGROUPS cgroups (created on every boot: the
# cgroup tree does not survive a reboot).
i=0
while [ "$i" -lt "$ncg" ]; do
  g=/sys/fs/cgroup/load/g$((i / 50))
  set --
  while [ "$i" -lt "$ncg" ] && [ $# -lt 50 ]; do set -- "$@" "$g/c$i"; i=$((i + 1)); done
  mkdir -p "$@"
done
# An hour early until our first sample is durable, then 4 s before
# midnight: below's start-up under TCG takes longer than 4 s. The shard of
# that hour may hold the last boot's samples: wait for it to grow.
set_clock $((epoch - 3600))
first=/mnt/ours/index_$(printf %011d $(((epoch - 3600) / 86400 * 86400)))
size() { if [ -f "$first" ]; then wc -c <"$first"; else echo 0; fi; }
before=$(size)
ours_args="record --interval-s 1 --compress --dict-compress-chunk-size 16 --disable-exitstats"
# shellcheck disable=SC2086 # $ours_args are several arguments
/below --debug --store-dir /mnt/ours $ours_args &
# shellcheck disable=SC2086
/below --store-dir /mnt/ours-limit $ours_args --store-size-limit 1 2>&1 | sed 's/^/ours-limit: /' &
/below09 --config "$(b09_conf b09)" record -i 1 --compress --disable-exitstats 2>&1 | sed 's/^/b09: /' &
i=0
until [ "$(size)" -gt "$before" ] || [ $i -ge 600 ]; do sleep 0.5; i=$((i + 1)); done
set_clock "$epoch"
echo "POWERCUT armed"
# The guest's clock on the console, each second: the last one seen before
# the cut says how long each recorder ran.
while :; do
  echo "TICK $(date +%s)"
  sleep 1
done
