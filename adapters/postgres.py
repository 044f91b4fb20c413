#!/usr/bin/python3
"""A soak client adapter for PostgreSQL, through psycopg2 (Debian's
python3-psycopg2): the same table and statements as soak's built-in
`postgres` protocol, to compare the two (bench/adapter.sh).

init's `target` is HOST:PORT; `params` may give `user`, `dbname` and
`table` (defaults: soak, postgres, soak_kv).

Outcomes: a statement PostgreSQL answered with an error was rolled back
(autocommit): fail. An error that says the connection or the server went
away (SQLSTATE classes 08, 57, 58, XX), or none at all, may have come
after the commit reached the log: info (unknown), and a new connection.
"""

import base64
import json
import sys

import psycopg2
import psycopg2.errors

UNKNOWN_CLASSES = ("08", "57", "58", "XX")


class Db:
    def __init__(self, target, params):
        host, port = target.rsplit(":", 1)
        self.args = dict(host=host, port=int(port), connect_timeout=5,
                         user=params.get("user", "soak"),
                         dbname=params.get("dbname", "postgres"))
        self.table = params.get("table", "soak_kv")
        self.conn = None

    def cursor(self):
        if self.conn is None or self.conn.closed:
            self.conn = psycopg2.connect(**self.args)
            self.conn.autocommit = True
            try:
                with self.conn.cursor() as c:
                    c.execute(f"CREATE TABLE IF NOT EXISTS {self.table} "
                              "(k text PRIMARY KEY, v bytea NOT NULL)")
            except (psycopg2.errors.UniqueViolation,
                    psycopg2.errors.DuplicateTable,
                    psycopg2.errors.DuplicateObject):
                pass  # another connection created it at the same moment
        return self.conn.cursor()

    def do(self, req):
        t = self.table
        with self.cursor() as c:
            if req["type"] == "write":
                c.execute(f"INSERT INTO {t} (k, v) VALUES (%s, %s) "
                          "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                          (req["key"], base64.b64decode(req["value"])))
                return {"type": "ok"}
            if req["type"] == "delete":
                c.execute(f"DELETE FROM {t} WHERE k = %s", (req["key"],))
                return {"type": "ok"}
            c.execute(f"SELECT k, v FROM {t} WHERE k = ANY(%s)", (req["keys"],))
            found = {k: base64.b64encode(bytes(v)).decode() for k, v in c.fetchall()}
            return {"type": "ok", "values": [found.get(k) for k in req["keys"]]}


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
            try:
                reply = db.do(req)
            except psycopg2.Error as e:
                code = e.pgcode or ""
                if code[:2] in UNKNOWN_CLASSES or not code:
                    reply = {"type": "info", "error": str(e).strip()}
                    if db.conn is not None:
                        db.conn.close()
                else:
                    reply = {"type": "fail", "error": f"{code} {str(e).strip()}"}
        reply["in_reply_to"] = req["id"]
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
