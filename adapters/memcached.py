#!/usr/bin/env python3
"""A soak client adapter for memcached's text protocol (stdlib only),
written from soak's book (docs/src/protocols.md, "adapter") alone, as a
new user would: each key a memcached item, several read with one `get`."""

import base64
import json
import socket
import sys


class Memcached:
    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("memcached closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("memcached closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def set(self, key, value):
        self.sock.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value))
        answer = self.line()
        if answer != b"STORED":
            raise ValueError(answer.decode(errors="replace"))  # refused: not done

    def delete(self, key):
        self.sock.sendall(b"delete %s\r\n" % key.encode())
        answer = self.line()
        if answer not in (b"DELETED", b"NOT_FOUND"):
            raise ValueError(answer.decode(errors="replace"))

    def get(self, keys):
        self.sock.sendall(b"get %s\r\n" % " ".join(keys).encode())
        found = {}
        while True:
            line = self.line()
            if line == b"END":
                break
            _, key, _flags, size = line.split(b" ")[:4]
            found[key.decode()] = self.exact(int(size))
        return [found.get(k) for k in keys]


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def main():
    mc = None
    target = None
    for raw in sys.stdin:
        req = json.loads(raw)
        kind, rid = req.get("type"), req.get("id")
        if kind == "init":
            target = req["target"]
            send({"type": "init_ok", "in_reply_to": rid,
                  "capabilities": {"multi_read": True, "delete": True}})
            continue
        if kind == "node":
            continue
        try:
            if mc is None:
                mc = Memcached(target)
            if kind == "write":
                mc.set(req["key"], base64.b64decode(req["value"]))
                send({"type": "ok", "in_reply_to": rid})
            elif kind == "delete":
                mc.delete(req["key"])
                send({"type": "ok", "in_reply_to": rid})
            elif kind == "read":
                values = mc.get(req["keys"])
                send({"type": "ok", "in_reply_to": rid,
                      "values": [None if v is None else base64.b64encode(v).decode() for v in values]})
        except ValueError as e:
            send({"type": "fail", "in_reply_to": rid, "error": str(e)})
        except (OSError, ConnectionError) as e:
            mc = None
            if kind == "read":
                send({"type": "fail", "in_reply_to": rid, "error": str(e)})
            else:
                send({"type": "info", "in_reply_to": rid, "error": str(e)})


main()
