#!/usr/bin/env bash
# soak-node against redis-server, in the same run, with redis-benchmark:
# SET and GET, 8 connections, pipeline 1 and 16, 100-byte values.
# soak-node runs twice: with its default memtable (16 MiB, Kafka Streams')
# and with RocksDB's (--write-buffer-size 64MiB), whose skiplist is deeper.
# Prints a markdown table of ops/s and soak-node's ratios to redis-server.
#
#   bench/node-vs-redis.sh [requests per test, default 200000]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps --tests
n=${1:-200000}
cargo build --locked -q --bin soak-node
node_bin=target/debug/soak-node
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ping() { for _ in $(seq 100); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 never answered" >&2; exit 1; }

node_port=$(free_port)
"$node_bin" --data-dir "$work/node" --port "$node_port" >"$work/node.log" 2>&1 &
pids+=($!)
big_port=$(free_port)
"$node_bin" --data-dir "$work/big" --port "$big_port" --write-buffer-size 64MiB >"$work/big.log" 2>&1 &
pids+=($!)
redis_port=$(free_port)
# Persistence off on both sides would be unfair to soak-node, which always
# writes its WAL; redis keeps its defaults but no RDB snapshots mid-run.
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
wait_ping "$node_port"
wait_ping "$big_port"
wait_ping "$redis_port"

bench() { # port test pipeline -> ops/s
  redis-benchmark -h 127.0.0.1 -p "$1" -c 8 -n "$n" -P "$3" -d 100 -r 100000 -t "$2" --csv -q 2>/dev/null \
    | awk -F'"' 'NR>1 || !/rps/ {print $4; exit}'
}

echo "| test | pipeline | soak-node ops/s | soak-node, 64 MiB memtable | redis-server ops/s | ratio | ratio, 64 MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for p in 1 16; do
  for t in set get; do
    # Interleave the servers so that machine noise hits them alike; the
    # best of two rounds each.
    a=$(bench "$node_port" "$t" "$p"); g=$(bench "$big_port" "$t" "$p"); b=$(bench "$redis_port" "$t" "$p")
    a2=$(bench "$node_port" "$t" "$p"); g2=$(bench "$big_port" "$t" "$p"); b2=$(bench "$redis_port" "$t" "$p")
    awk -v t="$t" -v p="$p" -v a="$a" -v b="$b" -v g="$g" -v a2="$a2" -v b2="$b2" -v g2="$g2" 'BEGIN {
      na = (a > a2 ? a : a2); nb = (b > b2 ? b : b2); ng = (g > g2 ? g : g2);
      printf "| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f |\n", toupper(t), p, na, ng, nb, na / nb, ng / nb }'
  done
done
