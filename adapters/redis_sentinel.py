#!/usr/bin/env python3
"""A soak client adapter for Redis behind Sentinel (stdlib only).

The target is the Sentinels, `HOST:PORT,HOST:PORT,...`, and the name of
the primary they watch is the `master` parameter (default `soak`). The
adapter asks the Sentinels, in order, which server is the primary, keeps
its connection to it, and asks again only when that connection fails or
the server refuses a write as a replica (`-READONLY`) or for want of
replicas (`-NOREPLICAS`): as a Sentinel-aware client does, which is how a
client goes on writing to an old primary that a partition cut off from
the others and that no longer is the primary.

Outcomes: a reply is done (or for an error reply, failed: Redis did not
apply it); a connection that could not be made, or was refused before
anything was sent, failed; a timeout or a reset after the request was
sent is unknown (info). The protocol: docs/src/protocols.md.
"""

import base64
import json
import socket
import sys
import time

TIMEOUT = 1.0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, int(port)), TIMEOUT)
        self.sock.settimeout(TIMEOUT)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n):
        while len(self.buf) < n + 2:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("closed")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            return RedisError(rest.decode(errors="replace"))
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exactly(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError(f"not RESP: {line!r}")

    def call(self, *args):
        self.sock.sendall(encode(*args))
        return self.reply()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class RedisError(Exception):
    pass


class Sentinel:
    def __init__(self, target, master):
        self.sentinels = [s.rsplit(":", 1) for s in target.split(",")]
        self.master = master
        self.primary = None
        self.conn = None

    def find(self):
        """The primary the first Sentinel that answers names."""
        for host, port in self.sentinels:
            try:
                c = Conn(host, port)
                r = c.call("SENTINEL", "get-master-addr-by-name", self.master)
                c.close()
                if isinstance(r, list) and len(r) == 2:
                    return r[0].decode(), r[1].decode()
            except OSError as e:
                log(f"sentinel {host}:{port}: {e!r}")
        raise ConnectionRefusedError("no Sentinel named a primary")

    def connection(self):
        if self.conn is None:
            primary = self.find()
            if primary != self.primary:
                log(f"primary is {primary[0]}:{primary[1]}")
            self.primary = primary
            self.conn = Conn(*primary)
        return self.conn

    def forget(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def do(self, *args):
        """Sends one command; ('ok', reply), ('fail', why) or ('info', why)."""
        try:
            c = self.connection()
        except OSError as e:
            return "fail", f"no connection to the primary: {e!r}"
        try:
            r = c.call(*args)
        except (OSError, ValueError) as e:
            self.forget()
            return "info", repr(e)
        if isinstance(r, RedisError):
            if str(r).startswith(("READONLY", "NOREPLICAS", "MASTERDOWN", "LOADING")):
                self.forget()
            return "fail", str(r)
        return "ok", r


def answer(req, s):
    t = req["type"]
    if t == "write":
        kind, r = s.do("SET", req["key"], base64.b64decode(req["value"]))
    elif t == "delete":
        kind, r = s.do("DEL", req["key"])
    elif t == "read":
        kind, r = s.do("GET", req["keys"][0])
        if kind == "ok":
            return {"type": "ok", "values": [None if r is None else base64.b64encode(r).decode()]}
    else:
        return {"type": "fail", "error": f"unknown request type {t!r}"}
    if kind == "ok":
        return {"type": "ok"}
    return {"type": kind, "error": r}


def main():
    s = None
    for line in sys.stdin:
        req = json.loads(line)
        if req["type"] == "init":
            master = (req.get("params") or {}).get("master", "soak")
            s = Sentinel(req["target"], master)
            reply = {"type": "init_ok", "concurrency": 1,
                     "capabilities": {"multi_read": False, "delete": True}}
        elif req["type"] == "node":
            continue
        else:
            reply = answer(req, s)
        reply["in_reply_to"] = req["id"]
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
