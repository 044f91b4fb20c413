#!/usr/bin/python3
"""A soak client adapter for MariaDB and MySQL, through PyMySQL (Debian's
python3-pymysql), written from soak's book (docs/src/protocols.md,
"adapter"): each key a row of a table soak_kv (k, v) in database soak,
made by the first connection; writes are autocommit upserts.

init's `target` is HOST:PORT; `params` may give `user`, `password`,
`database` and `table` (defaults: root, none, soak, soak_kv).

Outcomes: an error the server answered (a duplicate, a deadlock, a
refused statement) rolled the statement back: fail. A connection that
could not be made: fail (nothing was sent). A connection lost after the
statement was sent (2006, 2013) may have lost it after the commit: info
(unknown), and a new connection.
"""

import base64
import json
import sys

import pymysql

# The client's own codes: the server went away or the connection broke.
GONE = (2006, 2013, 2014, 2055)


class Db:
    def __init__(self, target, params):
        host, port = target.rsplit(":", 1)
        self.args = dict(host=host, port=int(port), connect_timeout=5,
                         read_timeout=10, write_timeout=10, autocommit=True,
                         user=params.get("user", "root"),
                         password=params.get("password", ""))
        self.database = params.get("database", "soak")
        self.table = params.get("table", "soak_kv")
        self.conn = None

    def connect(self):
        conn = pymysql.connect(**self.args)
        with conn.cursor() as c:
            c.execute(f"CREATE DATABASE IF NOT EXISTS {self.database}")
            c.execute(f"USE {self.database}")
            c.execute(f"CREATE TABLE IF NOT EXISTS {self.table} "
                      "(k VARCHAR(255) PRIMARY KEY, v LONGBLOB NOT NULL) ENGINE=InnoDB")
        self.conn = conn

    def do(self, req):
        t = self.table
        with self.conn.cursor() as c:
            if req["type"] == "write":
                c.execute(f"INSERT INTO {t} (k, v) VALUES (%s, %s) "
                          "ON DUPLICATE KEY UPDATE v = VALUES(v)",
                          (req["key"], base64.b64decode(req["value"])))
                return {"type": "ok"}
            if req["type"] == "delete":
                c.execute(f"DELETE FROM {t} WHERE k = %s", (req["key"],))
                return {"type": "ok"}
            keys = req["keys"]
            c.execute(f"SELECT k, v FROM {t} WHERE k IN ({','.join(['%s'] * len(keys))})", keys)
            found = {k: base64.b64encode(bytes(v)).decode() for k, v in c.fetchall()}
            return {"type": "ok", "values": [found.get(k) for k in keys]}


def answer(db, req):
    if db.conn is None:
        try:
            db.connect()
        except pymysql.Error as e:
            return {"type": "fail", "error": f"cannot connect: {e}"}
    try:
        return db.do(req)
    except pymysql.err.OperationalError as e:
        if e.args and e.args[0] in GONE:
            db.conn = None
            return {"type": "info", "error": str(e)}
        return {"type": "fail", "error": str(e)}
    except pymysql.Error as e:
        return {"type": "fail", "error": str(e)}
    except OSError as e:
        db.conn = None
        return {"type": "info", "error": str(e)}


def main():
    db = None
    for line in sys.stdin:
        req = json.loads(line)
        if req["type"] == "init":
            db = Db(req["target"], req.get("params") or {})
            reply = {"type": "init_ok",
                     "capabilities": {"multi_read": True, "delete": True}}
        elif req["type"] == "node":
            continue
        else:
            reply = answer(db, req)
        reply["in_reply_to"] = req["id"]
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
