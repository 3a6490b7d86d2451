"""Steady pass: what one compute service's pass costs the database when nothing changed.

One ``ComputeService`` of ``fake.multinode`` with N nodes (1 and 100 by
default), two claimed and spawned instances on each node, on a SQLite file
and on PostgreSQL.  After passes until one writes nothing, ``repeat``
steady passes (``run_once(beat=False)``: the heartbeat is counted apart)
are counted with :class:`nova_lite.testing.db_cost.DatabaseCost`:
transactions, statements, rows written, transactions given a transaction
id (PostgreSQL) and, on PostgreSQL, the WAL bytes the server wrote across
the pass.  Then ``repeat`` heartbeats alone, counted the same way.

WAL bytes are the movement of the server's WAL insert position
(``pg_current_wal_insert_lsn()``) across one pass: server-wide, so any
other writer of the server adds to it.  The smallest of the ``repeat``
passes is reported (``wal_bytes_min``), an upper bound of the pass's own,
and the median beside it.
"""

import statistics
import sys
import uuid

from bench import common

NAME = "steady_pass"
DEFAULT_SIZES = [1, 100]
TINY_SIZES = [2]
STORES = ("sqlite-file", "postgresql")
INSTANCES_PER_NODE = 2
TARGETS = {"every size": {"transactions": "1", "statements": "<= 6", "rows_written": "0",
                          "wal_bytes_min": "0", "heartbeat_statements": "1"}}


def cases(sizes):
    return [{"store": store, "nodes": n, "repeat": 20} for n in sizes for store in STORES]


def _service(url, nodes):
    from nova_lite import conf, objects
    from nova_lite.compute.manager import ComputeService
    from nova_lite.db import Store
    from nova_lite.virt import loader
    settings = conf.Settings(reserved_host_memory_mb=0)
    driver = loader.load_driver("fake.multinode", settings=settings,
                                nodes=[f"node-{i:04d}" for i in range(nodes)])
    store = Store(url)
    svc = ComputeService(common.HOST, driver, store=store, settings=settings)
    svc.run_once()
    flavor = objects.Flavor(**common.FLAVOR)
    for name in driver.get_available_nodes():
        for _ in range(INSTANCES_PER_NODE):
            inst = objects.Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id="bench")
            driver.spawn(svc.tracker.instance_claim(inst, name).instance)
    return svc, driver, store


def _counted(engine, fn, repeat):
    """Per call of ``fn``: (DatabaseCost, WAL bytes or None, wall s)."""
    from nova_lite.testing.db_cost import DatabaseCost, wal_position
    out = []
    for _ in range(repeat):
        before = wal_position(engine)
        with DatabaseCost(engine) as cost:
            (wall, _cpu), _ = common.measure(fn)
        after = wal_position(engine)
        out.append((cost, None if before is None else after - before, wall))
    return out


def _figures(counted):
    costs = [c for c, _, _ in counted]
    wal = [w for _, w, _ in counted if w is not None]
    figures = {
        "transactions": max(len(c.transactions) for c in costs),
        "statements": max(c.statements for c in costs),
        "rows_written": max(c.rows_written for c in costs),
        "xids": max(c.xids for c in costs),
        "row_locks": max(sum(1 for t in c.transactions for s in t.statements
                             if "FOR UPDATE" in s or "FOR SHARE" in s) for c in costs),
        "median_ms": round(statistics.median(w for _, _, w in counted) * 1000, 3),
    }
    if wal:
        figures.update(wal_bytes_min=min(wal), wal_bytes_median=statistics.median(wal))
    return figures


def run_case(case):
    if case["store"] == "postgresql":
        problem = common.postgresql_available()
        if problem:
            return {"skipped": f"no PostgreSQL: {problem}"}
    with common.store_url(case["store"]) as url:
        svc, driver, store = _service(url, case["nodes"])
        try:
            for _ in range(5):   # until a pass writes nothing
                (cost, _, _), = _counted(store.db.engine, lambda: svc.run_once(beat=False), 1)
                if cost.rows_written == 0 and not any(t.writes for t in cost.transactions):
                    break
            steady = _counted(store.db.engine, lambda: svc.run_once(beat=False),
                              case["repeat"])
            beats = _counted(store.db.engine, lambda: svc.beat(only_if_due=False),
                             case["repeat"])
        finally:
            driver.destroy_all()
            store.close()
    figures = _figures(steady)
    beat = _figures(beats)
    figures.update({f"heartbeat_{k}": v for k, v in beat.items()
                    if k in ("transactions", "statements", "xids", "median_ms",
                             "wal_bytes_min", "wal_bytes_median")})
    figures["instances"] = case["nodes"] * INSTANCES_PER_NODE
    return figures


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
