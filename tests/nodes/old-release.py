#!/usr/bin/env python3
"""An older release of a RocksDB-backed node, as far as a downgrade sees it:
it reads the RocksDB version that last wrote the database (from its
OPTIONS file, as RocksDB itself records it) and refuses a database written
by a newer RocksDB than its own, as real nodes do (Teku, Kafka Streams).

No RESP server here: the refusal is the whole point. It stands in for an
old build of the node, which this machine cannot produce (the only RESP
node over RocksDB is soak-node with its bundled 11.8).

    old-release.py --data-dir DIR [--rocksdb 7.8.3]
"""
import argparse
import glob
import os
import re
import sys

p = argparse.ArgumentParser()
p.add_argument("--data-dir", required=True)
p.add_argument("--rocksdb", default="7.8.3")
a, _ = p.parse_known_args()

mine = tuple(int(x) for x in a.rocksdb.split("."))
options = sorted(glob.glob(os.path.join(a.data_dir, "OPTIONS-*")))
if not options:
    print(f"fatal: no RocksDB OPTIONS file in {a.data_dir}", file=sys.stderr)
    sys.exit(2)
text = open(options[-1]).read()
m = re.search(r"rocksdb_version=([0-9.]+)", text)
theirs = tuple(int(x) for x in m.group(1).split(".")) if m else (0,)
if theirs > mine:
    print(
        f"fatal: the database in {a.data_dir} was written by RocksDB {m.group(1)}, "
        f"newer than this node's {a.rocksdb}: refusing to open it",
        file=sys.stderr,
    )
    sys.exit(1)
print("this old release would serve the database now", file=sys.stderr)
sys.exit(3)
