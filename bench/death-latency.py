#!/usr/bin/env python3
"""Time from a SIGKILL of the node (sent from outside soak) to soak's record
of the death in events.jsonl, over N kills; soak sees a death through the
node's exit future (a thread blocked in waitpid), not a poll.

usage: bench/death-latency.py [N]   (from the project root; builds soak)"""
import glob, json, os, signal, subprocess, sys, tempfile, time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
subprocess.run(["cargo", "build", "-q", "--bin", "soak"], check=True)
out = tempfile.mkdtemp()
soak = subprocess.Popen(["target/debug/soak", "run", "bench/death-latency.yaml", "--out", out,
                         "--quiet"], stderr=subprocess.DEVNULL)

def events():
    files = glob.glob(f"{out}/*/*/cells/*/events.jsonl")
    if not files:
        return []
    return [json.loads(l) for l in open(files[0]) if l.strip()]

def nth(kind, k, timeout=30):
    """The k-th event of `kind` (1-based), once it is written."""
    end = time.time() + timeout
    while time.time() < end:
        seen = [e for e in events() if e["kind"] == kind]
        if len(seen) >= k:
            return seen[k - 1]
        time.sleep(0.005)
    raise SystemExit(f"no {kind} event {k} within {timeout} s")

lat = []
try:
    for i in range(1, n + 1):
        ready = nth("ready", i)
        time.sleep(0.2)
        t0 = time.time()
        os.kill(ready["pid"], signal.SIGKILL)
        died = nth("died", i)
        lat.append((died["unix_s"] - t0) * 1000)
finally:
    # Whatever happened, soak stops its node and removes its cgroup.
    soak.send_signal(signal.SIGINT)
    soak.wait()
lat.sort()
print(f"{n} SIGKILLs: death recorded after median {lat[n // 2]:.2f} ms, "
      f"max {lat[-1]:.2f} ms (min {lat[0]:.2f} ms)")
