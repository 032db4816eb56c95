#!/bin/sh
# Runs in a guest under `bstats-check frozen-tree` (run.sh):
#   guest.sh FILES_BIN BPF_BIN LOG_LINE
# below main over the frozen tree: `below record -i 1` with FILES_BIN
# reading files and BPF_BIN with enable_cgroup_bpf; BPF_BIN's iterator
# program must be loaded and have run, its log must have LOG_LINE (what
# it says it serves, or why a file is read), and `below dump cgroup` of
# both stores must agree.
set -eu
: "${TREE:?run me under bstats-check frozen-tree}"
# shellcheck source=tests/e2e/dump-rows.sh
. /dump-rows.sh
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

bpf_iter_line() { bpftool prog show 2>/dev/null | grep "name cgroup_stats" || true; }

files_bin=$1 bpf_bin=$2 log_line=$3
for m in files bpf; do
  if [ $m = files ]; then bin=$files_bin; else bin=$bpf_bin; fi
  cfg=$(config "rec-$m" $m)
  echo "== $bin --config $cfg record -i 1 ($(tr '\n' ' ' < "$cfg"))"
  # Its log goes to log_dir/below.log or the terminal (LOG_TARGET): keep both.
  "$bin" --config "$cfg" record -i 1 2>"/tmp/rec-$m/stderr" &
  pid=$!
  sleep 8
  prog=$(bpf_iter_line)
  kill -TERM $pid
  wait $pid || true
  cat "/tmp/rec-$m/below.log" "/tmp/rec-$m/stderr" 2>/dev/null > "/tmp/rec-$m/all.log" || true
  grep -iE "error|fail|warn|bpf" "/tmp/rec-$m/all.log" | head -12 || true
  if [ $m = bpf ]; then
    grep -qF "$log_line" "/tmp/rec-$m/all.log" \
      || { echo "FAIL: the enable_cgroup_bpf log does not say: $log_line"; exit 1; }
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
same_rows files bpf enable_cgroup_bpf
echo "upstream checks passed: files and enable_cgroup_bpf dumps agree"
