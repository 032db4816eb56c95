#!/bin/sh
# Runs in a guest (tests/upstream/run.sh, record-bill.sh): below main
# recording with the cgroupfs files and with `enable_cgroup_bpf = true`.
#   guest.sh check FILES_BIN BPF_BIN
#     over frozen_tree: `below record -i 1` with FILES_BIN reading files and
#     BPF_BIN with enable_cgroup_bpf; BPF_BIN's iterator program must be
#     loaded and have run; `below dump cgroup` of both stores must agree.
#   guest.sh bill N SECS NAME:BIN:files|bpf...
#     over wide_tree of N cgroups, each recorder in turn: CPU (user + sys) of
#     the whole `below record -i 1` process per sample, over SECS seconds
#     after a warm-up; one `bill:` line per recorder.
set -eu
# shellcheck source=tests/e2e/cgroup-tree.sh
. /cgroup-tree.sh
CG=/sys/fs/cgroup
echo 1 > /proc/sys/kernel/bpf_stats_enabled

# config NAME files|bpf: a below.conf of its own (upstream has no
# --store-dir); prints its path.
config() {
  mkdir -p "/tmp/$1"
  {
    echo "store_dir = \"/tmp/$1/store\""
    echo "log_dir = \"/tmp/$1\""
    [ "$2" = files ] || echo "enable_cgroup_bpf = true"
  } > "/tmp/$1/below.conf"
  echo "/tmp/$1/below.conf"
}

# cpu_ticks PID: utime + stime (USER_HZ = 100 on x86).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

bpf_iter_line() { bpftool prog show 2>/dev/null | grep "name cgroup_bpf_read" || true; }

case "$1" in
check)
  files_bin=$2 bpf_bin=$3
  frozen_tree $CG/rec-t
  for m in files bpf; do
    if [ $m = files ]; then bin=$files_bin; else bin=$bpf_bin; fi
    cfg=$(config "rec-$m" $m)
    echo "== $bin --config $cfg record -i 1 ($(tr '\n' ' ' < "$cfg"))"
    "$bin" --config "$cfg" record -i 1 &
    pid=$!
    sleep 8
    prog=$(bpf_iter_line)
    kill -TERM $pid
    wait $pid || true
    grep -iE "error|fail|warn|bpf" "/tmp/rec-$m/below.log" | head -5 || true
    if [ $m = bpf ]; then
      echo "bpf program while recording: ${prog:-none}"
      case "$prog" in
        *run_cnt*) ;;
        *) echo "FAIL: below main with enable_cgroup_bpf did not run its cgroup iterator"; exit 1 ;;
      esac
    fi
    "$bin" --config "$cfg" dump cgroup --begin "10m ago" --everything --raw -O csv > "/tmp/dump-$m"
    last_rows "/tmp/dump-$m" > "/tmp/rows-$m"
    cut -c1-200 "/tmp/rows-$m"
  done
  [ "$(wc -l < /tmp/rows-bpf)" -eq 4 ] || { echo "FAIL: expected 4 test cgroups in the bpf dump"; exit 1; }
  if ! diff /tmp/rows-files /tmp/rows-bpf; then
    head -1 /tmp/dump-bpf
    echo "FAIL: dump of the enable_cgroup_bpf store differs from the files store"; exit 1
  fi
  echo "upstream checks passed: files and enable_cgroup_bpf dumps agree"
  ;;
bill)
  n=$2 secs=$3
  shift 3
  wide_tree $CG/bill-t "$n"
  echo "cgroups: $(find $CG -mindepth 1 -type d | wc -l) in the hierarchy, $n under bill-t"
  for r in "$@"; do
    name=${r%%:*} rest=${r#*:}
    bin=${rest%%:*} m=${rest#*:}
    cfg=$(config "bill-$m-$(basename "$bin")" "$m")
    "$bin" --config "$cfg" record -i 1 &
    pid=$!
    # Warm-up: start-up (BPF load and verification) and the first samples.
    sleep 15
    t1=$(date +%s) c1=$(cpu_ticks $pid)
    sleep "$secs"
    t2=$(date +%s) c2=$(cpu_ticks $pid)
    prog=$(bpf_iter_line)
    kill -TERM $pid
    wait $pid || true
    samples=$("$bin" --config "$cfg" dump system --begin "$t1" --end "$t2" -O csv | tail -n +2 | wc -l)
    [ "$samples" -gt 0 ] || { echo "FAIL: $name: no samples between $t1 and $t2"; exit 1; }
    echo "bill: name=\"$name\" cgroups=$n seconds=$((t2 - t1)) samples=$samples cpu_ms=$(((c2 - c1) * 10)) cpu_ms_per_sample=$(((c2 - c1) * 10 / samples)) bpf_iter=$([ -n "$prog" ] && echo yes || echo no)"
    grep -iE "error|fail" "/tmp/bill-$m-$(basename "$bin")/below.log" | head -3 || true
  done
  ;;
*) echo "usage: guest.sh check FILES_BIN BPF_BIN | bill N SECS NAME:BIN:files|bpf..."; exit 2 ;;
esac
