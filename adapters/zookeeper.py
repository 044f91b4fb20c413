#!/usr/bin/python3
"""A soak client adapter for ZooKeeper, through kazoo (Debian's python3-kazoo).

Each key is a znode under /soak: a write sets it (creating it the first
time), a delete deletes it, a read gets it (a missing znode is a missing
key). ZooKeeper answers each connection's requests in order, so this
adapter takes several at once (`concurrency` in its init_ok) and answers
each as its future completes.

Outcomes: a request ZooKeeper answered is done (or, for NoNode on a
delete, done too: the key is gone); one it refused with an error that
means it did not happen (BadVersion, NoAuth...) failed; a lost connection
or an expired session leaves it unknown (info), as ZooKeeper's own
documentation says of ConnectionLoss.
"""

import base64
import json
import sys
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import (ConnectionLoss, KazooException, NoNodeError,
                              NodeExistsError, OperationTimeoutError,
                              SessionExpiredError)

ROOT = "/soak"
UNKNOWN = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)
out_lock = threading.Lock()


def say(msg):
    with out_lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def answer(req_id, ok=None, error=None, unknown=False, values=None):
    if error is None:
        msg = {"type": "ok"}
        if values is not None:
            msg["values"] = values
    else:
        msg = {"type": "info" if unknown else "fail", "error": error}
    msg["in_reply_to"] = req_id
    say(msg)


def failed(req_id, e):
    answer(req_id, error=repr(e), unknown=isinstance(e, UNKNOWN) or not isinstance(e, KazooException))


def write(zk, req):
    path = f"{ROOT}/{req['key']}"
    value = base64.b64decode(req["value"])

    def created(r):
        try:
            r.get()
            answer(req["id"])
        except NodeExistsError:  # created by a write of ours before: set
            zk.set_async(path, value).rawlink(lambda s: done(s))
        except Exception as e:
            failed(req["id"], e)

    def done(r):
        try:
            r.get()
            answer(req["id"])
        except NoNodeError:
            zk.create_async(path, value).rawlink(created)
        except Exception as e:
            failed(req["id"], e)

    zk.set_async(path, value).rawlink(done)


def delete(zk, req):
    def done(r):
        try:
            r.get()
            answer(req["id"])
        except NoNodeError:
            answer(req["id"])
        except Exception as e:
            failed(req["id"], e)

    zk.delete_async(f"{ROOT}/{req['key']}").rawlink(done)


def read(zk, req):
    """A read after sync(): ZooKeeper's plain reads are sequentially
    consistent, not linearizable (a follower cut off from the leader
    answers from its own state until it notices), so the read first asks
    the server to catch up with the leader, as ZooKeeper's guide says to
    for a read that must see every write acknowledged before it."""
    key = req["keys"][0]

    def done(r):
        try:
            data, _ = r.get()
            answer(req["id"], values=[base64.b64encode(data).decode()])
        except NoNodeError:
            answer(req["id"], values=[None])
        except Exception as e:
            failed(req["id"], e)

    def synced(r):
        try:
            r.get()
        except Exception as e:
            failed(req["id"], e)
            return
        zk.get_async(f"{ROOT}/{key}").rawlink(done)

    zk.sync_async(ROOT).rawlink(synced)


def main():
    zk = None
    for line in sys.stdin:
        req = json.loads(line)
        t = req["type"]
        if t == "init":
            zk = KazooClient(hosts=req["target"], timeout=5)
            zk.start(timeout=10)
            zk.ensure_path(ROOT)
            say({"type": "init_ok", "in_reply_to": req["id"], "concurrency": 64,
                 "capabilities": {"multi_read": False, "delete": True}})
        elif t == "node":
            print(f"soak says the node is {'up' if req['up'] else 'down'}", file=sys.stderr, flush=True)
        else:
            try:
                {"write": write, "delete": delete, "read": read}[t](zk, req)
            except Exception as e:
                failed(req["id"], e)


if __name__ == "__main__":
    main()
