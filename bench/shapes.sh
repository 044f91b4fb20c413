#!/usr/bin/env bash
# The growth detector end to end: runs bench/shapes.yaml (12 real processes
# of known memory shapes, 6 leaking, ~26 minutes) through `soak run` and
# prints a markdown table of each cell's memory_growth verdict against the
# truth (a cell named leak* leaks), with the measured growth and p-value.
# A warn is growth neither found nor ruled out: on a leak, a miss that
# did not pass.
#
#   bench/shapes.sh [--only PATTERN]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps --tests
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
right = passed_leaks = ruled_out = 0
for c in summary["cells"]:
    name = c["id"].split("=", 1)[1]
    leaks = name.startswith("leak")
    check = next(k for k in c["checks"] if k["name"].startswith("memory_growth"))
    verdict = check["verdict"]
    # A fail is a leak found; a pass is growth over the max ruled out; a
    # warn is neither (`inconclusive`).
    flagged = verdict == "fail"
    right += flagged == leaks
    passed_leaks += leaks and verdict == "pass"
    ruled_out += not leaks and verdict == "pass"
    note = "" if flagged == leaks else (" (missed)" if leaks else " (wrong)")
    growth = check.get("value")
    growth = "-" if growth is None else f"{growth / 2**20:+.1f} MiB/h"
    print(f"| {name} | {'leak' if leaks else 'no leak'} | {verdict}{note}"
          f" | {growth} | {check.get('detail', '-')} |")
quiet = sum(not c["id"].split("=", 1)[1].startswith("leak") for c in summary["cells"])
print(f"\n{right} of {len(summary['cells'])} judged right; leaks passed: {passed_leaks}; "
      f"leak-free cells with growth over the max ruled out: {ruled_out} of {quiet}.")
PY
