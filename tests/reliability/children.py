"""Child processes of the fault tests: ``python -m tests.reliability.children CMD ...``.

- ``claim-loop URL HOST NODE...``: claims, deletes, resizes and confirms as
  fast as it can, forever (the SIGKILL test kills it); prints ``ready``
  once its first claim is in.
- ``probe URL HOST NODE [--as-user UID:GID]``: opens the store, reads the
  node, claims, audits a changed driver report; prints one JSON line with
  each step's outcome.  ``--as-user`` drops privileges first, after every
  import, so file permissions bind even when the tests run as root.
- ``fill URL HOST NODE``: claims until the store refuses; prints JSON.
"""

import json
import os
import random
import sqlite3  # noqa: F401  (imported before privileges are dropped)
import sys
import uuid

import attrs
import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401
import sqlalchemy.dialects.sqlite.pysqlite  # noqa: F401

from nova_lite import conf, objects
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import InvalidInput, NovaLiteError
from nova_lite.virt import loader

FLAVORS = [objects.Flavor(name="c.tiny", vcpus=1, memory_mb=128, root_gb=1),
           objects.Flavor(name="c.small", vcpus=1, memory_mb=512, root_gb=2),
           objects.Flavor(name="c.big", vcpus=2, memory_mb=2048, root_gb=10)]


def tracker(url, host, nodes, **sizes):
    settings = conf.Settings(host=host, state_path="/tmp", reserved_host_memory_mb=0)
    # A test may bound the child's lock waits itself (seconds), so that only
    # what it tests can end a wait.
    busy = os.environ.get("NOVA_LITE_CHILD_BUSY_TIMEOUT")
    store = Store(url) if busy is None else Store(url, busy_timeout=float(busy))
    driver = loader.load_driver("fake.multinode", settings=settings, nodes=list(nodes),
                                **sizes)
    driver.init_host(host)
    return store, driver, ResourceTracker(host, driver, store=store, settings=settings)


def claim_loop(url, host, *nodes):
    store, driver, rt = tracker(url, host, nodes)
    rng = random.Random()
    # A restarted child carries on with what the killed ones left.
    live = [i.uuid for i in store.list_instances(host=host)]
    ready = False
    while True:
        roll = rng.random()
        try:
            if roll < 0.55 or not live:
                inst = objects.Instance(uuid=str(uuid.uuid4()), flavor=rng.choice(FLAVORS))
                rt.instance_claim(inst, rng.choice(nodes))
                live.append(inst.uuid)
            elif roll < 0.8:
                u = live.pop(rng.randrange(len(live)))
                rt.update_usage(attrs.evolve(store.get_instance(u), vm_state="deleted"))
            else:
                u = rng.choice(live)
                stored = store.get_instance(u)
                try:
                    claim = rt.resize_claim(stored, rng.choice(FLAVORS), rng.choice(nodes))
                except InvalidInput:
                    # A killed predecessor left this instance mid-resize: the
                    # tracker refuses a second move until that one ends.
                    continue
                rt.drop_move_claim(stored, claim.migration.source_node, stored.flavor)
        except ComputeResourcesUnavailable:
            continue
        if not ready:
            print("ready", flush=True)
            ready = True


def _outcome(fn):
    try:
        value = fn()
        return {"ok": True, "value": value}
    except Exception as exc:   # noqa: BLE001 - reported to the parent test
        return {"ok": False, "type": type(exc).__name__, "error": str(exc),
                "nova_lite_error": isinstance(exc, NovaLiteError)}


def probe(url, host, node, *options):
    settings = conf.Settings(host=host, state_path="/tmp", reserved_host_memory_mb=0)
    driver = loader.load_driver("fake.multinode", settings=settings, nodes=[node],
                                vcpus=7)   # differs from the record: the audit writes
    driver.init_host(host)
    if options and options[0] == "--as-user":
        uid, gid = (int(x) for x in options[1].split(":"))
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        except OSError as exc:   # no privilege to drop: the parent skips
            print(json.dumps({"uid": os.getuid(), "drop_failed": str(exc)}), flush=True)
            return
    result = {"uid": os.getuid()}
    opened = _outcome(lambda: Store(url))
    result["open"] = {k: v for k, v in opened.items() if k != "value"}
    if opened["ok"]:
        store = opened["value"]
        rt = ResourceTracker(host, driver, store=store, settings=settings)
        result["read"] = _outcome(lambda: dict(store.get_compute_node(host, node).usage))
        inst = objects.Instance(uuid=str(uuid.uuid4()), flavor=FLAVORS[0])
        result["claim"] = _outcome(lambda: rt.instance_claim(inst, node) and None)
        result["audit"] = _outcome(lambda: repr(rt.update_available_resource()))
        result["usage_after"] = _outcome(lambda: dict(rt.get_node(node).usage))
    print(json.dumps(result), flush=True)


def fill(url, host, node):
    store, driver, rt = tracker(url, host, [node])
    admitted = 0

    def claim_one():
        inst = objects.Instance(uuid=str(uuid.uuid4()), flavor=FLAVORS[0],
                                display_name="x" * 2000)
        rt.instance_claim(inst, node)

    while admitted < 100000:
        outcome = _outcome(claim_one)
        if not outcome["ok"]:
            break
        admitted += 1
    print(json.dumps({"admitted": admitted, "failure": outcome,
                      "usage": dict(rt.get_node(node).usage)}), flush=True)


COMMANDS = {"claim-loop": claim_loop, "probe": probe, "fill": fill}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
