#!/usr/bin/env bash
# What soak costs beside the node it watches, with named peers in the same
# run. For each interval (1 s, 100 ms, 10 ms) it runs bench/cost.yaml
# (soak-node at 10,000 ops/s for 60 s) and reads summary.json's harness
# figures: soak's CPU, the sampler's part (reading the node's smaps_rollup,
# its cgroup's memory.stat and events, the data directory's size, soak's own
# threads), the load thread's part, soak's RSS. Beside them:
# - `top -b -d INTERVAL -p PID` watching the same node for the same time,
#   its CPU (the tool a user would watch a process with);
# - redis-benchmark's CPU per 10,000 ops/s: SET and GET, 8 connections,
#   pipeline 1, against a soak-node of its own (the load generator's peer).
#
#   bench/cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps --tests
cargo build --locked -q --bin soak --bin soak-node
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
hz=$(getconf CLK_TCK)
# CPU seconds a process has used (user + system), from /proc/PID/stat.
cpu_of() { awk -v hz="$hz" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"; }

echo "| interval | soak CPU (% of a core) | sampler | load thread (per 10k ops/s) | soak RSS peak | top -p, same node | sampler / top |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for interval in 1s 100ms 10ms; do
  out="$work/$interval"
  target/debug/soak run bench/cost.yaml --interval "$interval" --out "$out" --progress plain \
    >"$out.log" 2>&1 &
  soak_pid=$!
  pids+=("$soak_pid")
  # The node's pid, from the progress line that says it is ready.
  node_pid=""
  for _ in $(seq 600); do
    node_pid=$(sed -n 's/.*ready pid \([0-9]*\).*/\1/p' "$out.log" | head -1)
    [ -n "$node_pid" ] && break
    sleep 0.1
  done
  [ -n "$node_pid" ] || { cat "$out.log"; exit 1; }
  delay=$(python3 -c "import sys; v='$interval'; print(float(v[:-2])/1000 if v.endswith('ms') else float(v[:-1]))")
  top -b -d "$delay" -p "$node_pid" >/dev/null &
  top_pid=$!
  pids+=("$top_pid")
  # top's CPU over the run: read while it still runs, when the run ends.
  top_cpu=0
  while kill -0 "$soak_pid" 2>/dev/null; do
    top_cpu=$(cpu_of "$top_pid")
    sleep 1
  done
  wait "$soak_pid" || { cat "$out.log"; exit 1; }
  kill "$top_pid"
  python3 - "$out" "$interval" "$top_cpu" <<'PY'
import glob, json, sys
out, interval, top_cpu = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = json.load(open(glob.glob(out + "/cost/*/summary.json")[0]))
c = s["cells"][0]
h = c["harness"]
ops = c["load"]["ops_per_s"]
# top ran from the node's start to the run's end: about the run's 60 s.
top_share = top_cpu / 60.0
print(f"| {interval} | {100 * h['cpu_share']:.2f} | {100 * h['sampler_cpu_share']:.2f} "
      f"| {100 * h['load_cpu_share'] * 10000 / ops:.1f} (at {ops:.0f} ops/s) "
      f"| {h['rss_peak_bytes'] / 2**20:.1f} MiB | {100 * top_share:.2f} "
      f"| {h['sampler_cpu_share'] / top_share if top_share else float('nan'):.2f} |")
PY
done

# The load generator's peer: redis-benchmark's CPU per 10k ops/s.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target/debug/soak-node --data-dir "$work/peer" --port "$port" >"$work/peer.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
n=300000
start=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$work/rb.time" \
  redis-benchmark -p "$port" -c 8 -P 1 -n "$n" -r 100000 -d 100 -t set,get -q >/dev/null
secs=$(python3 -c "import time; print(time.time() - $start)")
python3 - "$work/rb.time" "$n" "$secs" <<'PY'
import sys
user, sys_ = map(float, open(sys.argv[1]).read().split())
ops = 2 * int(sys.argv[2])  # SET, then GET
secs = float(sys.argv[3])
rate = ops / secs
print(f"\nredis-benchmark (SET and GET, 8 connections, pipeline 1): {rate:.0f} ops/s, "
      f"{100 * (user + sys_) / secs * 10000 / rate:.1f}% of a core per 10k ops/s")
PY
