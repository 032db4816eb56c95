#!/bin/sh
# Runs inside a guest as root (tests/exitstats/run.sh): `below record` with
# exitstats keeps processes that exit between two samples, without tracefs;
# `--disable-exitstats` and an unprivileged user record without it, and
# the reason is logged.
#   guest.sh full    on + off + unprivileged
#   guest.sh basic   on + unprivileged
set -eu
mode=$1

# exitstats must not need tracefs: take it (and debugfs's copy) away.
umount /sys/kernel/tracing 2>/dev/null || true
umount /sys/kernel/debug 2>/dev/null || true
if [ -e /sys/kernel/tracing/events ] || [ -e /sys/kernel/debug/tracing/events ]; then
  echo "FAIL: tracefs is still mounted"; exit 1
fi

fail() { echo "FAIL: $*"; exit 1; }

# wait_for LOG PATTERN: until `below record -d` logged it.
wait_for() {
  n=0
  until grep -q "$2" "$1"; do
    n=$((n + 1))
    [ $n -lt 1200 ] || { cat "$1"; fail "timed out waiting for \"$2\""; }
    sleep 0.1
  done
}

# record_run NAME [record flags]: three samples 10 s apart (TCG is slow). burn-long spins
# from after sample 0 until 1 s after sample 1; burn-short (200 ms of CPU)
# starts and ends after sample 1. Both are reaped before sample 2, so
# sample 2 has them only if something caught their exits.
record_run() {
  name=$1
  shift
  log=/tmp/log-$name
  /below -d --store-dir "/tmp/s-$name" record --interval-s 10 --count 3 "$@" >"$log" 2>&1 &
  rec=$!
  wait_for "$log" "sample 0 written"
  /burn-long &
  long=$!
  wait_for "$log" "sample 1 written"
  # About a second of CPU after sample 1, for the exit to report.
  sleep 1
  kill "$long"
  wait "$long" || true
  /burn-short 200
  if grep -q "sample 2 written" "$log"; then
    cat "$log"
    fail "sample 2 was taken before the burners ended: machine too slow for this test"
  fi
  wait "$rec" || { cat "$log"; fail "record ($name) failed"; }
  grep exitstats "$log"
  /below --store-dir "/tmp/s-$name" dump process --begin "10m ago" --raw -O csv -f \
    datetime pid comm state cpu.usage_pct uptime_secs cgroup >"/tmp/dump-$name"
  grep -E "^Datetime|burn-" "/tmp/dump-$name" || true
}

# field CSV_LINE N
field() { echo "$1" | cut -d, -f"$2"; }

check_on() {
  grep -q "exitstats: on" /tmp/log-on || fail "exitstats did not start"
  short=$(grep ",burn-short," /tmp/dump-on || true)
  [ "$(echo "$short" | grep -c .)" -eq 1 ] || fail "burn-short: expected one row, got: $short"
  [ "$(field "$short" 4)" = DEAD ] || fail "burn-short not DEAD: $short"
  [ "$(field "$short" 7)" = /exitstats-t ] || fail "burn-short cgroup: $short"
  dead_long=$(grep ",burn-long,DEAD," /tmp/dump-on || true)
  [ -n "$dead_long" ] || fail "burn-long's exit is missing"
  # Its CPU from sample 1 (procfs) to its exit (the BPF program).
  cpu=$(field "$dead_long" 5)
  awk -v c="$cpu" 'BEGIN { exit !(c + 0 > 5) }' || fail "burn-long's CPU at exit: '$cpu'"
  echo "exitstats on: burn-short caught, burn-long's last $cpu% caught"
}

check_off() {
  grep -q "exitstats: off (--disable-exitstats)" /tmp/log-off || fail "no 'off' line"
  if grep -E ",burn-short,|,burn-long,DEAD," /tmp/dump-off; then
    fail "exits recorded with --disable-exitstats"
  fi
  grep -q ",burn-long,RUNNING," /tmp/dump-off || fail "burn-long not seen alive"
  echo "exitstats off: no exits recorded"
}

check_unprivileged() {
  mkdir -m 777 /tmp/s-nobody
  /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups \
    /below --store-dir /tmp/s-nobody record --interval-s 1 --count 2 >/tmp/log-nobody 2>&1 ||
    { cat /tmp/log-nobody; fail "unprivileged record failed"; }
  grep exitstats /tmp/log-nobody
  grep -q "exitstats: off, .*not permitted" /tmp/log-nobody || fail "no reason logged"
  rows=$(/below --store-dir /tmp/s-nobody dump system --begin "10m ago" -O csv --disable-title | grep -c .)
  [ "$rows" -eq 2 ] || fail "unprivileged store has $rows samples, expected 2"
  echo "unprivileged: recorded $rows samples, reason logged"
}

CG=/sys/fs/cgroup/exitstats-t
mkdir "$CG"
echo $$ >"$CG/cgroup.procs"
record_run on
check_on
if [ "$mode" = full ]; then
  record_run off --disable-exitstats
  check_off
fi
check_unprivileged
echo "exitstats checks passed ($mode)"
