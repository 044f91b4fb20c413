#!/usr/bin/env bash
# The growth detector end to end: runs bench/shapes.yaml (12 real processes
# of known memory shapes, 6 leaking, ~26 minutes) through `soak run` and
# prints a markdown table of each cell's memory_growth verdict against the
# truth (a cell named leak* leaks), with the measured growth and p-value.
#
#   bench/shapes.sh [--only PATTERN]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Exit 1 is a failed check, which is what a leaking cell must give.
cargo run --locked -q --bin soak -- run bench/shapes.yaml --out "$out" --progress none "$@" \
  >"$out/stdout" 2>"$out/stderr" || [ $? -eq 1 ] || { cat "$out/stderr"; exit 1; }
python3 - "$out" <<'PY'
import glob, json, sys
summary = json.load(open(glob.glob(sys.argv[1] + "/shapes/*/summary.json")[0]))
print("| shape | truth | memory_growth (max 38 MiB/h) | growth | 95% interval, p |")
print("|---|---|---|---:|---:|")
right = 0
for c in summary["cells"]:
    name = c["id"].split("=", 1)[1]
    leaks = name.startswith("leak")
    check = next(k for k in c["checks"] if k["name"].startswith("memory_growth"))
    flagged = check["verdict"] == "fail"
    right += flagged == leaks
    growth = check.get("value")
    growth = "-" if growth is None else f"{growth / 2**20:+.1f} MiB/h"
    print(f"| {name} | {'leak' if leaks else 'no leak'} | {check['verdict']}"
          f"{'' if flagged == leaks else ' (wrong)'} | {growth} | {check.get('detail', '-')} |")
print(f"\n{right} of {len(summary['cells'])} judged right.")
PY
