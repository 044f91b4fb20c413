#!/usr/bin/env bash
# What attributing memory costs the node, against the same run without it,
# in the same session, interleaved (3 rounds, medians):
# - jemalloc's heap profiler (`memory: { profile: jemalloc }`: prof:true,
#   one sample every 512 KiB, a dump every 16 MiB of growth) on soak-node,
#   against soak-node on jemalloc alone;
# - Native Memory Tracking (`memory: { jvm: nmt }`: -XX:NativeMemoryTracking
#   =summary, read every 5 s) on the JVM reference node, against the same
#   JVM without it;
# - heaptrack (`memory: { profile: heaptrack }`: every allocation recorded)
#   on soak-node kept on glibc, against soak-node on glibc alone;
# - smaps, read for every node: the sampler's CPU from summary.json's
#   harness figures (it keeps itself under 1% of a core).
# Each run is bench/attribution-cost.yaml: closed loop, 20 s after a load.
#
#   bench/attribution-cost.sh
#   VARIANTS="glibc glibc-heaptrack" bench/attribution-cost.sh   # one pair
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked -q --bin soak --bin soak-node
nodes/jvm/build
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

jvm='["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", "${SUITE_DIR}/../target/jvm-node", "SoakJvmNode", "--port", "${PORT}", "--data-dir", "${DATA_DIR}", "--event-loops", "2"]'
# variant NAME: writes the suite of that variant and prints its path.
variant() {
  local f="$work/$1.yaml"
  sed "s|^name: attribution-cost|name: $1|" bench/attribution-cost.yaml > "$f"
  case "$1" in
    jemalloc-profiled) printf 'memory: { profile: jemalloc, dump_every: 16MiB }\n' >> "$f" ;;
    glibc|glibc-heaptrack)
      sed -i 's|^  allocator: \[jemalloc\]|  allocator: [glibc]|' "$f"
      [ "$1" = glibc-heaptrack ] && printf 'memory: { profile: heaptrack }\n' >> "$f" ;;
    jvm|jvm-nmt)
      python3 - "$f" "$jvm" <<'PY'
import sys
p, cmd = sys.argv[1], sys.argv[2]
s = open(p).read()
s = s.replace('  command: ["${SOAK_NODE}", "--data-dir", "${DATA_DIR}", "--port", "${PORT}"]', '  command: ' + cmd)
s = s.replace('matrix:\n  allocator: [jemalloc]\n', '')
open(p, 'w').write(s)
PY
      [ "$1" = jvm-nmt ] && printf 'memory: { jvm: nmt, jvm_every: 5s }\n' >> "$f" ;;
  esac
  # Suites refer to ../target/jvm-node from their own folder.
  mkdir -p "$work/suites"; mv "$f" "$work/suites/"; ln -sfn "$PWD/target" "$work/target"
  echo "$work/suites/$1.yaml"
}
# ops/s, peak RSS (MiB) and the sampler's CPU (% of a core) of a run.
figures() {
  python3 - "$1" <<'PY'
import json, sys, glob
s = json.load(open(glob.glob(sys.argv[1] + "/*/*/summary.json")[0]))
c = s["cells"][0]
h = c.get("harness") or {}
cpu = h.get("sampler_cpu_share")
print(f'{c["load"]["ops_per_s"]:.0f} {c["memory"]["peak_rss_bytes"] / 2**20:.1f} {100 * cpu if cpu is not None else float("nan"):.2f}')
PY
}
variants=(${VARIANTS:-jemalloc jemalloc-profiled jvm jvm-nmt glibc glibc-heaptrack})
declare -A runs
for round in 1 2 3; do
  for v in "${variants[@]}"; do
    suite=$(variant "$v")
    out="$work/out-$v-$round"
    target/debug/soak run "$suite" --out "$out" --quiet > /dev/null 2>&1 || true
    runs[$v]+="$(figures "$out");"
    echo "round $round $v: $(figures "$out")" >&2
  done
done
for v in "${variants[@]}"; do printf '%s=%s\n' "$v" "${runs[$v]}"; done | python3 -c '
import sys, statistics as st
runs = dict(l.strip().split("=", 1) for l in sys.stdin if "=" in l)
def med(v):
    rows = [tuple(map(float, r.split())) for r in runs[v].split(";") if r]
    return tuple(st.median(x[i] for x in rows) for i in range(3))
print("| node | without | with | throughput | peak RSS | sampler CPU (smaps) |")
print("|---|---:|---:|---:|---:|---:|")
for name, b, w in [("soak-node, jemalloc'"'"'s profiler", "jemalloc", "jemalloc-profiled"), ("JVM node, NMT", "jvm", "jvm-nmt"), ("soak-node on glibc, heaptrack", "glibc", "glibc-heaptrack")]:
    if b in runs and w in runs:
        base, with_ = med(b), med(w)
        print(f"| {name} | {base[0]:.0f} ops/s, {base[1]:.1f} MiB | {with_[0]:.0f} ops/s, {with_[1]:.1f} MiB | {with_[0] / base[0]:.3f}x | {with_[1] / base[1]:.3f}x | {base[2]:.2f}% / {with_[2]:.2f}% of a core |")
'
