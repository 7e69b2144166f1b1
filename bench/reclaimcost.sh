#!/usr/bin/env bash
# Measures the kernel's CPU cost of reclaim per page scanned, the source of memvisor's default
# costs.reclaim_scan: a 96 MiB sweep runs 5 times in a 64 MiB memory cgroup (v1) with a swap file;
# kernel time, less the faults at the measured 1.5 us each (faultcost.c), divided by pages scanned (/proc/vmstat, so run it on an otherwise idle machine).
# Needs root, cgroup v1 memory and swap-file support; restores what it changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
cg=/sys/fs/cgroup/memory/memvisor-reclaimcost
cleanup() { swapoff "$tmp/swap" 2>/dev/null || true; rmdir "$cg" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
cc -O2 -o "$tmp/sweep" "$here/sweep.c"
dd if=/dev/zero of="$tmp/swap" bs=1M count=512 status=none
chmod 600 "$tmp/swap" && mkswap -q "$tmp/swap" && swapon "$tmp/swap"
mkdir -p "$cg" && echo $((64 << 20)) > "$cg/memory.limit_in_bytes"
scan() { awk '$1 == "pgscan_anon" || $1 == "pgscan_file" {s += $2} END {print s}' /proc/vmstat; }
before=$(scan)
sys=$( (echo $BASHPID > "$cg/cgroup.procs"; exec /usr/bin/time -f "%S" "$tmp/sweep" 24576 5) 2>&1 )
scanned=$(( $(scan) - before ))
faults=$(awk '$1 == "pgfault" {print $2}' "$cg/memory.stat")
awk -v s="$sys" -v n="$scanned" -v f="$faults" 'BEGIN{printf "kernel %.2f s, %d faults, %d pages scanned: %.2f us per page scanned\n", s, f, n, (s - f*1.5e-6)/n*1e6}'
