#!/usr/bin/env python3
"""A soak client adapter for tests/nodes/httpnode.py, with ways to misbehave.

    httpadapter.py                      a good adapter
    httpadapter.py --crash-after N      exits (status 3) at its Nth request,
                                        leaving it unanswered, in every
                                        incarnation whose number is odd
    httpadapter.py --garbage-after N    prints a line that is not the
                                        protocol instead of its Nth answer
    httpadapter.py --no-init            never answers its init
    httpadapter.py --concurrency N      says it takes N requests at once
                                        (and answers them in reverse order)
"""

import argparse
import base64
import http.client
import json
import os
import select
import sys


def lines(held):
    """stdin's lines; answers held back are printed (in reverse) whenever
    no request has come for 20 ms."""
    buf = b""
    while True:
        while b"\n" not in buf:
            ready, _, _ = select.select([0], [], [], 0.02)
            if not ready:
                for o in reversed(held):
                    print(json.dumps(o), flush=True)
                held.clear()
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        yield line


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crash-after", type=int, default=0)
    p.add_argument("--garbage-after", type=int, default=0)
    p.add_argument("--no-init", action="store_true")
    p.add_argument("--concurrency", type=int, default=1)
    a = p.parse_args()
    # Which incarnation this is, counted in a file beside the cell's log.
    count_file = os.environ.get("ADAPTER_COUNT")
    n = 0
    if count_file:
        try:
            n = int(open(count_file).read() or "0")
        except FileNotFoundError:
            pass
        open(count_file, "w").write(str(n + 1))
    conn = None
    handled = 0
    held = []
    for line in lines(held):
        req = json.loads(line)
        t = req["type"]
        if t == "init":
            if a.no_init:
                continue
            host, port = req["target"].rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
            out = {"type": "init_ok", "in_reply_to": req["id"],
                   "capabilities": {"multi_read": False, "delete": True},
                   "concurrency": a.concurrency}
            print(json.dumps(out), flush=True)
            continue
        if t == "node":
            print(f"node up: {req['up']}", file=sys.stderr, flush=True)
            continue
        handled += 1
        if a.crash_after and handled == a.crash_after and n % 2 == 0:
            print(f"crashing at request {handled}", file=sys.stderr, flush=True)
            sys.exit(3)
        if a.garbage_after and handled == a.garbage_after:
            print("<html>this is not json</html>", flush=True)
            continue
        try:
            key = "/kv/" + (req.get("key") or req["keys"][0])
            if t == "write":
                conn.request("PUT", key, base64.b64decode(req["value"]))
            elif t == "delete":
                conn.request("DELETE", key)
            else:
                conn.request("GET", key)
            r = conn.getresponse()
            body = r.read()
            if t == "read":
                value = base64.b64encode(body).decode() if r.status == 200 else None
                out = {"type": "ok", "values": [value]}
            elif r.status < 300:
                out = {"type": "ok"}
            elif r.status < 500:
                out = {"type": "fail", "error": f"{r.status}"}
            else:
                out = {"type": "info", "error": f"{r.status}"}
        except Exception as e:
            conn.close()
            out = {"type": "info", "error": repr(e)}
        out["in_reply_to"] = req["id"]
        held.append(out)
        if len(held) >= a.concurrency:
            for o in reversed(held):
                print(json.dumps(o), flush=True)
            held.clear()


if __name__ == "__main__":
    main()
