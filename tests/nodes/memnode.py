#!/usr/bin/env python3
"""A small RESP node with a chosen memory behaviour, for soak's tests.

It is not soak-node: a separate program, in another language, that only
speaks the protocol (PING, SET, GET, MGET, DEL, EXISTS, DBSIZE, INFO,
FLUSHALL). Its memory does what it is told:

    memnode.py --port P --leak BYTES_PER_S
        keeps BYTES_PER_S of new anonymous memory each second, forever
        (an off-heap leak: it ends in an OOM kill under a limit);
    memnode.py --port P --sawtooth BYTES_PER_S --period S
        takes BYTES_PER_S each second and frees all of it every S seconds
        (a garbage collector's sawtooth, no leak).

Memory is taken with anonymous mmap and written, so it is resident, and
freed with munmap, so it leaves at once.
"""

import argparse
import mmap
import socket
import threading
import time

CHUNK = 256 * 1024


def memory(args):
    rate = args.leak or args.sawtooth
    if not rate:
        return
    held = []
    tick = 0.05
    started = time.monotonic()
    while True:
        time.sleep(tick)
        want = int(rate * tick)
        while want > 0:
            size = min(CHUNK, want)
            m = mmap.mmap(-1, size)
            m.write(b"\x5a" * size)
            held.append(m)
            want -= size
        if args.sawtooth and time.monotonic() - started >= args.period:
            for m in held:
                m.close()
            held = []
            started = time.monotonic()


def read_command(f):
    line = f.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.split()
    args = []
    for _ in range(int(line[1:])):
        size = int(f.readline()[1:])
        args.append(f.read(size + 2)[:-2])
    return args


def bulk(v):
    if v is None:
        return b"$-1\r\n"
    return b"$%d\r\n%s\r\n" % (len(v), v)


def serve(conn, db, lock):
    f = conn.makefile("rb")
    try:
        while True:
            cmd = read_command(f)
            if cmd is None:
                return
            if not cmd:
                continue
            name = cmd[0].upper()
            with lock:
                if name == b"PING":
                    out = b"+PONG\r\n"
                elif name == b"SET":
                    db[cmd[1]] = cmd[2]
                    out = b"+OK\r\n"
                elif name == b"GET":
                    out = bulk(db.get(cmd[1]))
                elif name == b"MGET":
                    out = b"*%d\r\n" % (len(cmd) - 1) + b"".join(bulk(db.get(k)) for k in cmd[1:])
                elif name in (b"DEL", b"EXISTS"):
                    n = sum(1 for k in cmd[1:] if k in db)
                    if name == b"DEL":
                        for k in cmd[1:]:
                            db.pop(k, None)
                    out = b":%d\r\n" % n
                elif name == b"DBSIZE":
                    out = b":%d\r\n" % len(db)
                elif name == b"FLUSHALL":
                    db.clear()
                    out = b"+OK\r\n"
                elif name == b"INFO":
                    out = bulk(b"# Server\r\nmemnode:1\r\n")
                else:
                    out = b"-ERR unknown command\r\n"
            conn.sendall(out)
    except (OSError, ValueError, IndexError):
        return
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--leak", type=int, default=0)
    p.add_argument("--sawtooth", type=int, default=0)
    p.add_argument("--period", type=float, default=1.0)
    args = p.parse_args()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", args.port))
    srv.listen(64)
    threading.Thread(target=memory, args=(args,), daemon=True).start()
    db, lock = {}, threading.Lock()
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, db, lock), daemon=True).start()


if __name__ == "__main__":
    main()
