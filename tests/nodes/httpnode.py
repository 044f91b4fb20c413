#!/usr/bin/env python3
"""A small HTTP key-value node for soak's tests: not soak-node, not RESP.

    PUT    /kv/KEY   body: the value   -> 204
    GET    /kv/KEY                     -> 200 with the value, or 404
    DELETE /kv/KEY                     -> 204
    GET    /health                     -> 200

Without --journal it keeps everything in memory: a SIGKILL loses every
acknowledged write. With --journal FILE every PUT and DELETE is appended
to FILE (and fsynced) before it is answered, and replayed at start.

With --lie-every N, every Nth write is applied and then answered 409
Conflict: a node that says a write failed when it did not, which a
client cannot see but soak's oracle can (the write is read back: an
aborted read).
"""

import argparse
import os
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Store:
    def __init__(self, journal):
        self.data = {}
        self.lock = threading.Lock()
        self.journal = None
        self.writes = 0
        if journal:
            self.replay(journal)
            self.journal = open(journal, "ab")

    def replay(self, path):
        try:
            raw = open(path, "rb").read()
        except FileNotFoundError:
            return
        i = 0
        while i + 9 <= len(raw):
            op, klen, vlen = struct.unpack(">BII", raw[i : i + 9])
            if i + 9 + klen + vlen > len(raw):
                break
            key = raw[i + 9 : i + 9 + klen]
            value = raw[i + 9 + klen : i + 9 + klen + vlen]
            if op == 1:
                self.data[key] = value
            else:
                self.data.pop(key, None)
            i += 9 + klen + vlen

    def apply(self, op, key, value=b""):
        with self.lock:
            if self.journal:
                self.journal.write(struct.pack(">BII", op, len(key), len(value)) + key + value)
                self.journal.flush()
                os.fsync(self.journal.fileno())
            if op == 1:
                self.data[key] = value
            else:
                self.data.pop(key, None)
            self.writes += 1
            return self.writes


def handler(store, lie_every):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body=b""):
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def key(self):
            return self.path[len("/kv/") :].encode() if self.path.startswith("/kv/") else None

        def do_GET(self):
            if self.path == "/health":
                return self.answer(200, b"ok")
            k = self.key()
            with store.lock:
                v = store.data.get(k)
            if v is None:
                self.answer(404)
            else:
                self.answer(200, v)

        def write(self, op, value=b""):
            n = store.apply(op, self.key(), value)
            if lie_every and n % lie_every == 0:
                self.answer(409, b"conflict")
            else:
                self.answer(204)

        def do_PUT(self):
            length = int(self.headers.get("content-length", "0"))
            self.write(1, self.rfile.read(length))

        def do_DELETE(self):
            self.write(2)

    return H


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # A read-back opens its connections at once.
    request_queue_size = 128


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--journal")
    p.add_argument("--lie-every", type=int, default=0)
    a = p.parse_args()
    store = Store(a.journal)
    server = Server(("127.0.0.1", a.port), handler(store, a.lie_every))
    print(f"httpnode: serving on {a.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
