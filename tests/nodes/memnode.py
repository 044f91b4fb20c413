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
        (a garbage collector's sawtooth, no leak);
    memnode.py --port P --step BYTES --step-at S
        takes BYTES at once S seconds after it started (a cache filling);
    memnode.py --port P --warmup BYTES --tau S
        takes BYTES * (1 - e^(-t/S)) (a cache warming up);
    memnode.py --port P --noise BYTES
        holds a random amount more, redrawn every 0.1 s: an AR(1) series
        (phi 0.9) whose standard deviation is BYTES, seeded by --seed.
    memnode.py --port P --leak BYTES_PER_S --chunk BYTES
        takes the leak BYTES at a time, each chunk when the smooth leak
        would have reached it, give or take half (seeded): a staircase,
        as allocators grow arenas and caches in chunks;
    memnode.py ... --hang-after S
        after S seconds answers nothing but PING, alive: a node stalled at
        its memory limit (its reads waiting on reclaim);
    memnode.py ... --bind ADDR
        listens on ADDR (127.0.0.1 by default: a cluster's member gives
        its own address);
    memnode.py ... --leak-for S
        stops the leak after S seconds (a staircase that stops: a cache
        filled in chunks);
    memnode.py ... --unsafe-after-pause S
        after it wakes from a pause (SIGSTOP, seen as a gap in its own
        clock), acknowledges writes for S seconds without journaling them,
        then journals them: a SIGKILL within S seconds of a pause loses
        them, a kill at any other time does not (a node that replays its
        log lazily after a stall). A SIGTERM journals them first;
    memnode.py ... --retry-journal
        when a journal write fails (EIO from soak's fault filesystem),
        acknowledges the write all the same and keeps it to write again
        every 50 ms until the disk takes it: a kill while the disk fails
        loses those writes, a kill after it recovered does not;
    memnode.py ... --drop-mget N
        closes the connection instead of answering every Nth MGET, and
        stays up: a node that cannot allocate a large reply and drops the
        connection, as Netty does when it cannot reserve direct memory.
These add up: the node holds their sum at every moment (to 64 KiB), so
`--leak 20000 --sawtooth 4000000 --period 10` is a leak under a sawtooth.

Its durability too. Without --journal it keeps everything in memory: a
SIGKILL loses every acknowledged write. With --journal FILE every SET and
DEL is appended to FILE before it is acknowledged and replayed at start (a
SIGKILL loses nothing); with --lose-tail P as well, each start drops the
last 20 to 100 journal entries with probability P (seeded by --seed and
the number of starts), as a node with a durability bug would, and says so
in its log: "memnode: start N dropped M journal entries".

The journal is written with write(2), so a killed process loses nothing;
a power cut (soak's fault filesystem) loses what was not fsynced:
--fsync never (the default) fsyncs nothing, --fsync always fsyncs each
record before acknowledging it, and --fsync split keeps two journals, the
records of keys whose CRC-32 is even in FILE, fsynced, and the others in
FILE.b, never fsynced: a node that forgot the fsync of one of its logs,
whose power cut leaves holes (a write lost, a later one kept).

Memory is taken with anonymous mmap and written, so it is resident, and
freed with munmap, so it leaves at once.
"""

import argparse
import math
import mmap
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
import zlib

CHUNK = 64 * 1024


def target(args, t, noise):
    """The bytes the node holds t seconds after it started."""
    leak_t = min(t, args.leak_for) if args.leak_for else t
    if args.chunk:
        # The leak in chunks, each when the smooth leak would have reached
        # it, give or take half (an allocator growing its arenas).
        want = args.chunk * sum(1 for at in chunk_times(args) if at <= leak_t) + noise
    else:
        want = args.leak * leak_t + noise
    if args.sawtooth:
        want += args.sawtooth * (t % args.period)
    if args.step and t >= args.step_at:
        want += args.step
    if args.warmup:
        want += args.warmup * (1 - math.exp(-t / args.tau))
    return max(0, int(want))


_chunks = []


def chunk_times(args):
    """When each chunk of the leak comes (seeded), up to the hour."""
    if not _chunks and args.leak:
        rng = random.Random(args.seed + 7)
        at = 0.0
        while at < 3600:
            at += args.chunk / args.leak * rng.uniform(0.5, 1.5)
            _chunks.append(at)
    return _chunks


def memory(args):
    if not (args.leak or args.sawtooth or args.step or args.warmup or args.noise):
        return
    held = []
    tick = 0.05
    rng = random.Random(args.seed)
    noise, redrawn = 0.0, 0.0
    # AR(1) with phi 0.9 and innovations of sd * sqrt(1 - phi^2): the
    # series' own standard deviation is sd.
    phi = 0.9
    started = time.monotonic()
    while True:
        time.sleep(tick)
        t = time.monotonic() - started
        if args.noise and t - redrawn >= 0.1:
            noise = phi * noise + rng.gauss(0, args.noise * math.sqrt(1 - phi * phi))
            redrawn = t
        want = target(args, t, noise)
        while len(held) * CHUNK < want:
            m = mmap.mmap(-1, CHUNK)
            m.write(b"\x5a" * CHUNK)
            held.append(m)
        while (len(held) - 1) * CHUNK >= want:
            held.pop().close()


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


class Journal:
    """Length-prefixed records: b"S" klen vlen key value, or b"D" klen key."""

    def __init__(self, path, sync=False):
        self.path = path
        self.f = None
        self.sync = sync

    def records(self):
        """(offset, op, key, value) of every whole record; a torn tail stops it."""
        out = []
        try:
            data = open(self.path, "rb").read()
        except FileNotFoundError:
            return out
        i = 0
        while i < len(data):
            op = data[i:i + 1]
            if op == b"S" and i + 9 <= len(data):
                klen, vlen = struct.unpack_from("<II", data, i + 1)
                end = i + 9 + klen + vlen
                if end > len(data):
                    break
                key = data[i + 9:i + 9 + klen]
                out.append((i, op, key, data[i + 9 + klen:end]))
            elif op == b"D" and i + 5 <= len(data):
                (klen,) = struct.unpack_from("<I", data, i + 1)
                end = i + 5 + klen
                if end > len(data):
                    break
                out.append((i, op, data[i + 5:end], None))
            else:
                break
            i = end
        return out

    def open(self, db, lose_tail, seed):
        # "STARTS MARK": how many starts so far, and where in the journal
        # the last incarnation began to write.
        starts_file = self.path + ".starts"
        try:
            starts, mark = (int(x) for x in open(starts_file).read().split())
        except (FileNotFoundError, ValueError):
            starts, mark = 0, 0
        records = self.records()
        dropped = 0
        rng = random.Random(seed * 1000003 + starts)
        # Only what the last incarnation wrote (it acknowledged all of it
        # but the few writes in flight at its death), and only 20 or more.
        own = [r for r in records if r[0] >= mark]
        if lose_tail and len(own) >= 20 and rng.random() < lose_tail:
            dropped = min(len(own), rng.randint(20, 100))
            with open(self.path, "r+b") as f:
                f.truncate(records[len(records) - dropped][0])
            records = records[:len(records) - dropped]
        elif records:
            # Cut a torn last record, so that appends follow whole ones.
            last = records[-1]
            end = last[0] + (9 + len(last[2]) + len(last[3]) if last[1] == b"S" else 5 + len(last[2]))
            with open(self.path, "r+b") as f:
                f.truncate(end)
        for _, op, key, value in records:
            if op == b"S":
                db[key] = value
            else:
                db.pop(key, None)
        print("memnode: start %d dropped %d journal entries" % (starts, dropped), flush=True)
        self.f = open(self.path, "ab", buffering=0)
        try:
            open(starts_file, "w").write("%d %d" % (starts + 1, self.f.tell()))
        except OSError:
            if not RETRY["on"]:
                raise

    def append(self, record):
        if RETRY["on"] and RETRY["pending"]:
            RETRY["pending"].append(record)
            return
        try:
            self.f.write(record)
            if self.sync:
                os.fsync(self.f.fileno())
        except OSError:
            if not RETRY["on"]:
                raise
            RETRY["pending"].append(record)

    def retry(self):
        """Writes what failed before, in order, until one fails again."""
        while RETRY["pending"]:
            try:
                self.f.write(RETRY["pending"][0])
            except OSError:
                return
            RETRY["pending"].pop(0)

    def set(self, key, value):
        if self.f:
            self.append(b"S" + struct.pack("<II", len(key), len(value)) + key + value)

    def delete(self, key):
        if self.f:
            self.append(b"D" + struct.pack("<I", len(key)) + key)


class Split:
    """--fsync split: two journals, one fsynced and one not, by key."""

    def __init__(self, path):
        self.a = Journal(path, sync=True)
        self.b = Journal(path + ".b", sync=False)

    def open(self, db, lose_tail, seed):
        self.a.open(db, lose_tail, seed)
        self.b.open(db, 0.0, seed)

    def pick(self, key):
        return self.a if zlib.crc32(key) & 1 == 0 else self.b

    def set(self, key, value):
        self.pick(key).set(key, value)

    def delete(self, key):
        self.pick(key).delete(key)


STARTED = time.monotonic()
# --retry-journal: on, and the records the disk refused, in order.
RETRY = {"on": False, "pending": []}


def retrier(journal, lock):
    while True:
        time.sleep(0.05)
        with lock:
            journal.retry()
# --unsafe-after-pause: the window's length, its end (0: none now), and
# the writes acknowledged in it but not journaled yet.
UNSAFE = {"window": 0.0, "until": 0.0, "deferred": []}


def journal_deferred(journal):
    for op, key, value in UNSAFE["deferred"]:
        if op == b"S":
            journal.set(key, value)
        else:
            journal.delete(key)
    UNSAFE["deferred"] = []
    UNSAFE["until"] = 0.0


def watchdog(journal, lock):
    """Sees a pause as a gap in its own ticks, and closes the window."""
    last = time.monotonic()
    while True:
        time.sleep(0.02)
        now = time.monotonic()
        with lock:
            if now - last > 0.1:
                UNSAFE["until"] = now + UNSAFE["window"]
                print("memnode: woke after %.2f s; journaling deferred for %.2f s"
                      % (now - last, UNSAFE["window"]), flush=True)
            elif UNSAFE["until"] and now >= UNSAFE["until"]:
                journal_deferred(journal)
        last = now


def write(journal, op, key, value=None):
    if UNSAFE["until"]:
        UNSAFE["deferred"].append((op, key, value))
    elif op == b"S":
        journal.set(key, value)
    else:
        journal.delete(key)
HANG_AFTER = [0.0]
DROP_MGET = [0, 0]  # every Nth MGET, and the MGETs so far


def serve(conn, db, lock, journal):
    f = conn.makefile("rb")
    try:
        while True:
            cmd = read_command(f)
            if cmd is None:
                return
            if not cmd:
                continue
            name = cmd[0].upper()
            if HANG_AFTER[0] and time.monotonic() - STARTED > HANG_AFTER[0] and name != b"PING":
                # Alive, and answering nothing but PING: a node stalled
                # at its memory limit, its reads waiting on reclaim.
                time.sleep(3600)
            with lock:
                if DROP_MGET[0] and name == b"MGET":
                    DROP_MGET[1] += 1
                    if DROP_MGET[1] % DROP_MGET[0] == 0:
                        print("memnode: dropped a connection on MGET %d" % DROP_MGET[1], flush=True)
                        return
                if name == b"PING":
                    out = b"+PONG\r\n"
                elif name == b"SET":
                    write(journal, b"S", cmd[1], cmd[2])
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
                            write(journal, b"D", k)
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
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--leak", type=int, default=0)
    p.add_argument("--chunk", type=int, default=0)
    p.add_argument("--leak-for", type=float, default=0.0)
    p.add_argument("--sawtooth", type=int, default=0)
    p.add_argument("--period", type=float, default=1.0)
    p.add_argument("--step", type=int, default=0)
    p.add_argument("--step-at", type=float, default=0.0)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--tau", type=float, default=1.0)
    p.add_argument("--noise", type=int, default=0)
    p.add_argument("--journal")
    p.add_argument("--lose-tail", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fsync", choices=["never", "always", "split"], default="never")
    p.add_argument("--hang-after", type=float, default=0.0)
    p.add_argument("--drop-mget", type=int, default=0)
    p.add_argument("--unsafe-after-pause", type=float, default=0.0)
    p.add_argument("--retry-journal", action="store_true")
    args = p.parse_args()
    HANG_AFTER[0] = args.hang_after
    DROP_MGET[0] = args.drop_mget
    db, lock = {}, threading.Lock()
    if args.fsync == "split" and args.journal:
        journal = Split(args.journal)
    else:
        journal = Journal(args.journal, sync=args.fsync == "always")
    RETRY["on"] = args.retry_journal
    if args.journal:
        journal.open(db, args.lose_tail, args.seed)
    if args.retry_journal:
        threading.Thread(target=retrier, args=(journal, lock), daemon=True).start()
    if args.unsafe_after_pause:
        UNSAFE["window"] = args.unsafe_after_pause

        def term(*_):
            with lock:
                journal_deferred(journal)
            os._exit(0)

        signal.signal(signal.SIGTERM, term)
        threading.Thread(target=watchdog, args=(journal, lock), daemon=True).start()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.bind, args.port))
    srv.listen(64)
    threading.Thread(target=memory, args=(args,), daemon=True).start()
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, db, lock, journal), daemon=True).start()


if __name__ == "__main__":
    main()
