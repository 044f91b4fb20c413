#!/usr/bin/env python3
"""A soak client adapter for etcd, through its v3 JSON gateway (stdlib only).

soak writes one JSON request a line on stdin; this prints one JSON answer
a line on stdout: ok, fail (definitely not done) or info (unknown).
Its log goes to stderr (soak keeps it in the cell's adapter.log).
The protocol: docs/src/protocols.md.
"""

import base64
import http.client
import json
import sys


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Etcd:
    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=5)

    def call(self, path, body):
        """POSTs to the gateway; the reply's JSON, or raises."""
        self.conn.request("POST", "/v3/kv/" + path, json.dumps(body),
                          {"content-type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 500:
            raise TimeoutError(f"{r.status} {data[:100]!r}")  # may have happened
        if r.status >= 400:
            raise ValueError(f"{r.status} {data[:100]!r}")  # did not happen
        return json.loads(data)


def answer(req, etcd):
    t = req["type"]
    if t == "write":
        etcd.call("put", {"key": b64(req["key"]), "value": req["value"]})
        return {"type": "ok"}
    if t == "delete":
        etcd.call("deleterange", {"key": b64(req["key"])})
        return {"type": "ok"}
    if t == "read":
        values = []
        for key in req["keys"]:
            kvs = etcd.call("range", {"key": b64(key)}).get("kvs")
            values.append(kvs[0]["value"] if kvs else None)  # base64 already
        return {"type": "ok", "values": values}
    raise KeyError(f"unknown request type {t!r}")


def main():
    etcd = None
    for line in sys.stdin:
        req = json.loads(line)
        if req["type"] == "init":
            etcd = Etcd(req["target"])
            reply = {"type": "init_ok",
                     "capabilities": {"multi_read": True, "delete": True}}
        elif req["type"] == "node":
            print(f"node up: {req['up']}", file=sys.stderr)
            continue  # a notice: no answer
        else:
            try:
                reply = answer(req, etcd)
            except ValueError as e:
                reply = {"type": "fail", "error": str(e)}
            except Exception as e:  # a reset, a timeout: unknown
                reply = {"type": "info", "error": repr(e)}
                etcd.conn.close()  # the next request connects again
        reply["in_reply_to"] = req["id"]
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
