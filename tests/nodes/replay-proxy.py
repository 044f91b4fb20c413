#!/usr/bin/env python3
"""A RESP proxy that replays to a restarted backend what a dead one never
answered, as a retrying client library or a connection-pooling proxy does.

    replay-proxy.py --listen PORT --backend PORT [--hold-ms MS]

Each client connection gets its own backend connection. Requests go on to
the backend (after MS milliseconds, so that many are in flight at any
moment); replies come back in order. When the backend dies, the client's
connection stays open: the proxy waits for the backend to come back and
sends it, in order, every request it had not answered. So a read sent
before a death is answered after the restart, and a write in flight at a
death may be applied after it: the races soak's oracle must not count as
lost writes. It says what it replayed on stdout:

    replay-proxy: replayed N requests (M reads)
"""

import argparse
import collections
import socket
import threading
import time

READS = (b"GET", b"MGET")


def line_end(buf, i):
    j = buf.find(b"\r\n", i)
    return None if j < 0 else j


def parse_request(buf, i):
    """End of one RESP array of bulk strings at `i`, and its command name."""
    j = line_end(buf, i)
    if j is None:
        return None
    n = int(buf[i + 1:j])
    pos = j + 2
    name = None
    for _ in range(n):
        k = line_end(buf, pos)
        if k is None:
            return None
        size = int(buf[pos + 1:k])
        end = k + 2 + size + 2
        if end > len(buf):
            return None
        if name is None:
            name = bytes(buf[k + 2:k + 2 + size]).upper()
        pos = end
    return pos, name


def parse_reply(buf, i):
    """End of one RESP reply at `i`."""
    if i >= len(buf):
        return None
    j = line_end(buf, i)
    if j is None:
        return None
    kind = buf[i:i + 1]
    if kind in (b"+", b"-", b":"):
        return j + 2
    if kind == b"$":
        size = int(buf[i + 1:j])
        if size < 0:
            return j + 2
        end = j + 2 + size + 2
        return end if end <= len(buf) else None
    if kind == b"*":
        n = int(buf[i + 1:j])
        pos = j + 2
        for _ in range(max(n, 0)):
            pos = parse_reply(buf, pos)
            if pos is None:
                return None
        return pos
    raise ValueError("not RESP: %r" % bytes(buf[i:i + 20]))


class Session:
    def __init__(self, client, backend_port, hold, stats):
        self.client = client
        self.port = backend_port
        self.hold = hold
        self.stats = stats
        self.lock = threading.Condition()
        # Every request not answered yet, in order: (bytes, is_read).
        self.pending = collections.deque()
        # The tail of those not yet sent to the current backend: (due, bytes).
        self.unsent = collections.deque()
        self.backend = self.connect()
        self.closed = False

    def connect(self, patience=30.0):
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=1)
                s.settimeout(None)
                return s
            except OSError:
                time.sleep(0.02)
        return None

    def from_client(self):
        buf = bytearray()
        while True:
            data = self.client.recv(65536)
            if not data:
                self.close()
                return
            buf += data
            pos = 0
            while True:
                parsed = parse_request(buf, pos)
                if parsed is None:
                    break
                end, name = parsed
                request = bytes(buf[pos:end])
                pos = end
                with self.lock:
                    self.pending.append((request, name in READS))
                    self.unsent.append((time.monotonic() + self.hold, request))
                    self.lock.notify()
            del buf[:pos]

    def forward(self):
        """Sends each request once it is due, to the backend of the moment."""
        while True:
            with self.lock:
                while not self.unsent or self.backend is None:
                    if self.closed:
                        return
                    self.lock.wait(0.1)
                due, request = self.unsent[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self.lock.wait(wait)
                    continue
                self.unsent.popleft()
                try:
                    self.backend.sendall(request)
                except OSError:
                    pass  # replayed once the backend is back

    def from_backend(self):
        buf = bytearray()
        while True:
            backend = self.backend
            try:
                data = backend.recv(65536) if backend else b""
            except OSError:
                data = b""
            if not data:
                self.replay()
                buf.clear()
                if self.backend is None:
                    self.close()
                    return
                continue
            buf += data
            pos = 0
            while True:
                end = parse_reply(buf, pos)
                if end is None:
                    break
                with self.lock:
                    if self.pending:
                        self.pending.popleft()
                try:
                    self.client.sendall(bytes(buf[pos:end]))
                except OSError:
                    return
                pos = end
            del buf[:pos]

    def replay(self):
        with self.lock:
            if self.backend:
                self.backend.close()
            self.backend = None
        backend = self.connect()
        with self.lock:
            self.backend = backend
            if backend is None:
                return
            # Sent to the dead backend or not yet: all of it, in order, now.
            sent = len(self.pending) - len(self.unsent)
            reads = sum(1 for _, is_read in list(self.pending)[:sent] if is_read)
            try:
                for request, _ in self.pending:
                    backend.sendall(request)
            except OSError:
                pass  # died again: from_backend sees it and replays again
            self.unsent.clear()
            if sent:
                self.stats(sent, reads)

    def close(self):
        self.closed = True
        for s in (self.client, self.backend):
            try:
                if s:
                    s.close()
            except OSError:
                pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--backend", type=int, required=True)
    p.add_argument("--hold-ms", type=float, default=0.0)
    args = p.parse_args()
    lock = threading.Lock()
    totals = [0, 0]

    def stats(n, reads):
        with lock:
            totals[0] += n
            totals[1] += reads
            print("replay-proxy: replayed %d requests (%d reads)" % tuple(totals), flush=True)

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", args.listen))
    srv.listen(64)
    print("replay-proxy: listening on %d for %d" % (args.listen, args.backend), flush=True)
    while True:
        client, _ = srv.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def run(client=client):
            s = Session(client, args.backend, args.hold_ms / 1000.0, stats)
            if s.backend is None:
                client.close()
                return
            threading.Thread(target=s.from_backend, daemon=True).start()
            threading.Thread(target=s.forward, daemon=True).start()
            try:
                s.from_client()
            except (OSError, ValueError):
                s.close()

        threading.Thread(target=run, daemon=True).start()


if __name__ == "__main__":
    main()
