#!/usr/bin/env python3
"""A RESP node over a shared RocksDB library: by default Debian's 7.8
(librocksdb.so.7.8, from the package librocksdb7.8 that rocksdb-tools
installs), through RocksDB's C API.

It is an older release of a RocksDB-backed node, for real: it writes the
database in RocksDB 7.8's formats, serves it back, and refuses what 7.8
refuses (a database a newer RocksDB has written to) with 7.8's own error.
It stores the data as soak-node does (the RESP key as the key of the
default column family, the value as is), so soak can upgrade from it to
soak-node and back and judge the database offline.

    librocksdb-node.py --port P --data-dir DIR [--compression snappy|lz4|zstd|none]
                       [--library librocksdb.so.7.8]

PING, SET, GET, MGET, DEL, EXISTS, DBSIZE, INFO. SIGTERM flushes the
memtable and closes the database; SIGKILL leaves it to the WAL.
"""

import argparse
import ctypes
import signal
import socket
import sys
import threading

COMPRESSION = {"none": 0, "snappy": 1, "lz4": 4, "zstd": 7}


class RocksDB:
    def __init__(self, library, path, compression):
        c = ctypes.CDLL(library)
        vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        for name, res, args in [
            ("rocksdb_options_create", vp, []),
            ("rocksdb_options_set_create_if_missing", None, [vp, ctypes.c_ubyte]),
            ("rocksdb_options_set_compression", None, [vp, ctypes.c_int]),
            ("rocksdb_options_increase_parallelism", None, [vp, ctypes.c_int]),
            ("rocksdb_open", vp, [vp, cp, ctypes.POINTER(vp)]),
            ("rocksdb_writeoptions_create", vp, []),
            ("rocksdb_readoptions_create", vp, []),
            ("rocksdb_flushoptions_create", vp, []),
            ("rocksdb_put", None, [vp, vp, cp, sz, cp, sz, ctypes.POINTER(vp)]),
            ("rocksdb_get", vp, [vp, vp, cp, sz, ctypes.POINTER(sz), ctypes.POINTER(vp)]),
            ("rocksdb_delete", None, [vp, vp, cp, sz, ctypes.POINTER(vp)]),
            ("rocksdb_property_value", vp, [vp, cp]),
            ("rocksdb_flush", None, [vp, vp, ctypes.POINTER(vp)]),
            ("rocksdb_close", None, [vp]),
            ("rocksdb_free", None, [vp]),
        ]:
            f = getattr(c, name)
            f.restype, f.argtypes = res, args
        self.c = c
        opts = c.rocksdb_options_create()
        c.rocksdb_options_set_create_if_missing(opts, 1)
        c.rocksdb_options_set_compression(opts, COMPRESSION[compression])
        c.rocksdb_options_increase_parallelism(opts, 2)
        self.db = self.call(c.rocksdb_open, opts, path.encode())
        self.w = c.rocksdb_writeoptions_create()
        self.r = c.rocksdb_readoptions_create()

    def call(self, f, *args):
        err = ctypes.c_void_p()
        out = f(*args, ctypes.byref(err))
        if err.value:
            msg = ctypes.string_at(err.value).decode(errors="replace")
            self.c.rocksdb_free(err)
            raise IOError(msg)
        return out

    def put(self, k, v):
        self.call(self.c.rocksdb_put, self.db, self.w, k, len(k), v, len(v))

    def get(self, k):
        n = ctypes.c_size_t()
        p = self.call(self.c.rocksdb_get, self.db, self.r, k, len(k), ctypes.byref(n))
        if not p:
            return None
        v = ctypes.string_at(p, n.value)
        self.c.rocksdb_free(p)
        return v

    def delete(self, k):
        self.call(self.c.rocksdb_delete, self.db, self.w, k, len(k))

    def property(self, name):
        p = self.c.rocksdb_property_value(self.db, name)
        if not p:
            return b""
        v = ctypes.string_at(p)
        self.c.rocksdb_free(p)
        return v

    def close(self):
        self.call(self.c.rocksdb_flush, self.db, self.c.rocksdb_flushoptions_create())
        self.c.rocksdb_close(self.db)


def parse(buf, pos):
    """One command from `buf` at `pos`: (args, next) or (None, pos) if it
    has not all arrived."""
    if buf[pos : pos + 1] != b"*":
        end = buf.find(b"\r\n", pos)
        return (None, pos) if end < 0 else (bytes(buf[pos:end]).split(), end + 2)
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None, pos
    at, args = end + 2, []
    for _ in range(int(buf[pos + 1 : end])):
        end = buf.find(b"\r\n", at)
        if end < 0:
            return None, pos
        size = int(buf[at + 1 : end])
        at = end + 2
        if len(buf) < at + size + 2:
            return None, pos
        args.append(bytes(buf[at : at + size]))
        at += size + 2
    return args, at


def bulk(v):
    return b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v)


def answer(db, cmd):
    name = cmd[0].upper()
    if name == b"PING":
        return b"+PONG\r\n"
    if name == b"SET":
        db.put(cmd[1], cmd[2])
        return b"+OK\r\n"
    if name == b"GET":
        return bulk(db.get(cmd[1]))
    if name == b"MGET":
        return b"*%d\r\n" % (len(cmd) - 1) + b"".join(bulk(db.get(k)) for k in cmd[1:])
    if name in (b"DEL", b"EXISTS"):
        found = [k for k in cmd[1:] if db.get(k) is not None]
        if name == b"DEL":
            for k in found:
                db.delete(k)
        return b":%d\r\n" % len(found)
    if name == b"DBSIZE":
        return b":%d\r\n" % int(db.property(b"rocksdb.estimate-num-keys") or 0)
    if name == b"INFO":
        return bulk(b"# Server\r\nrocksdb_library:%s\r\n" % db.library)
    return b"-ERR unknown command '%s'\r\n" % name


def serve(conn, db):
    buf = bytearray()
    try:
        while True:
            data = conn.recv(1 << 16)
            if not data:
                return
            buf += data
            out, pos = [], 0
            # Every whole request that has arrived, answered in one write.
            while True:
                cmd, pos = parse(buf, pos)
                if cmd is None:
                    break
                if not cmd:
                    continue
                try:
                    out.append(answer(db, cmd))
                except IOError as e:
                    out.append(b"-ERR %s\r\n" % str(e).encode())
            del buf[:pos]
            conn.sendall(b"".join(out))
    except (OSError, ValueError, IndexError):
        conn.sendall(b"-ERR Protocol error\r\n")
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--compression", default="snappy", choices=sorted(COMPRESSION))
    p.add_argument("--library", default="librocksdb.so.7.8")
    a = p.parse_args()
    try:
        db = RocksDB(a.library, a.data_dir, a.compression)
    except OSError as e:
        print(f"fatal: cannot open {a.data_dir} with {a.library}: {e}", file=sys.stderr)
        sys.exit(1)
    db.library = a.library.encode()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.port))
    srv.listen(64)

    def stop(*_):
        db.close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"serving {a.data_dir} with {a.library} on 127.0.0.1:{a.port}", file=sys.stderr)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, db), daemon=True).start()


if __name__ == "__main__":
    main()
