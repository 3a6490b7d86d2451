"""Cold load: the first full read of every node by the scheduler, the API and the metrics.

The fleet of :mod:`bench.api` (N ``fake.multinode`` nodes on N/100
hosts, an instance claimed on every tenth node) in a PostgreSQL database.
Recording 100,000 nodes through real audits takes many minutes, so the
first :data:`BASE` nodes are recorded by audits and claims and the rest
are copies of them made in SQL (:func:`clone_fleet`): new uuids, host and
node names, the report's hostname and uuid rewritten, the inventories,
instances, allocations, usage rows and service rows copied with them.

Each reader then runs in a process of its own, so its peak RSS is its
own (``ru_maxrss``), as ``nova-lite`` runs them:

- ``scheduler``: a new ``HostManager``'s first ``select_destinations``
  (reads every node), then a second one (nothing changed);
- ``api``: ``nova-lite api serve``'s app in waitress, the first
  ``GET /v1/cluster`` (the node cache reads every node), then the first
  page of ``GET /v1/hypervisors?limit=1000``;
- ``metrics``: ``nova-lite metrics serve``'s exporter in waitress, the
  first ``GET /metrics`` (reads and formats every node), then a second.

Reported per reader: ``cold_ms`` (wall) and ``cold_cpu_ms`` (the
process's CPU, which hardly moves when other processes load the
machine), ``next_ms``, ``base_rss_mib`` (after start-up, before the
read) and ``peak_rss_mib``.

``--url URL`` reuses a fleet recorded before (``--keep`` keeps the one a
run records, and prints its URL); ``--tree PATH`` runs the readers on the
nova-lite source tree at PATH (another checkout), so two versions can be
measured alternately on one fleet.
"""

import json
import os
import resource
import subprocess
import sys
import time

NAME = "cold_load"
DEFAULT_SIZES = [10000, 100000]
TINY_SIZES = [200]
STORES = ("postgresql",)
#: Nodes recorded through real audits and claims; the rest are copies.
BASE = 1000
ROLES = ("scheduler", "api", "metrics")
TARGETS = {"100000 nodes": {"scheduler cold_ms": "<= 3000", "metrics cold_ms": "<= 2000",
                            "peak_rss_mib of each reader": "<= 500"}}


def cases(sizes):
    return [{"store": store, "nodes": n} for n in sizes for store in STORES]


# -- the fleet -------------------------------------------------------------------

def clone_fleet(url, copies, hosts_per_copy):
    """Add ``copies`` copies of the fleet recorded at ``url`` (PostgreSQL).

    Copy ``k`` of host ``host-HHHH`` is ``host-{k * hosts_per_copy + HHHH}``;
    uuids are derived from the original's and ``k`` (md5), so copies never
    collide.
    """
    import sqlalchemy as sa
    from nova_lite.db.engine import normalize_url
    host = ("'host-' || lpad((k * {n} + substr({col}, 6, 4)::int)::text, 4, '0')")
    new_uuid = "md5({col} || ':' || k)::uuid::text"

    def rename(col, n=hosts_per_copy):
        return host.format(col=col, n=n)

    def renamed_node(col):   # host-HHHH-node-NNN
        return f"{rename(col)} || substr({col}, 10)"

    statements = [
        ("compute_nodes", {
            "uuid": new_uuid.format(col="c.uuid"), "host": rename("c.host"),
            "nodename": renamed_node("c.nodename"),
            "resources": f"replace(replace(c.resources, '\"' || c.nodename || '\"', "
                         f"'\"' || {renamed_node('c.nodename')} || '\"'), c.uuid, "
                         f"{new_uuid.format(col='c.uuid')})"}),
        ("inventories", {"node_uuid": new_uuid.format(col="c.node_uuid")}),
        ("instances", {"uuid": new_uuid.format(col="c.uuid"), "host": rename("c.host"),
                       "node": renamed_node("c.node")}),
        ("allocations", {"consumer_uuid": new_uuid.format(col="c.consumer_uuid"),
                         "node_uuid": new_uuid.format(col="c.node_uuid"),
                         "instance_uuid": new_uuid.format(col="c.instance_uuid")}),
        ("node_usage", {"node_uuid": new_uuid.format(col="c.node_uuid")}),
        ("services", {"host": rename("c.host")}),
    ]
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.begin() as conn:
            for table, overrides in statements:
                columns = [c["name"] for c in sa.inspect(conn).get_columns(table)
                           if c["name"] != "id" and not c.get("computed")]
                values = ", ".join(overrides.get(c, f'c."{c}"') for c in columns)
                names = ", ".join(f'"{c}"' for c in columns)
                conn.exec_driver_sql(
                    f"INSERT INTO {table} ({names}) SELECT {values} "
                    f"FROM {table} c CROSS JOIN generate_series(1, {copies}) AS k")
            conn.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()


def make_fleet(url, nodes):
    """Record ``nodes`` nodes (a multiple of :data:`BASE`, or fewer) at ``url``."""
    from bench import api
    base = min(nodes, BASE)
    trackers, _, _ = api.make_fleet(url, base)
    trackers[0].store.close()
    if nodes > base:
        clone_fleet(url, nodes // base - 1, base // api.NODES_PER_HOST)


# -- one reader in its own process -------------------------------------------------

def _rss_mib():
    """This process's resident set size now, in MiB."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _peak_mib():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return (round((time.perf_counter() - wall) * 1000, 1),
            round((time.process_time() - cpu) * 1000, 1), result)


def _get(port, path):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read()
    finally:
        conn.close()
    if answer.status != 200:
        raise RuntimeError(f"GET {path}: {answer.status} {body[:200]!r}")
    return body


def run_role(role, url):
    """Run one reader (see the module docstring) here; its figures."""
    from nova_lite import conf
    from nova_lite.db import Store
    settings = conf.Settings(service_down_time=10 ** 8)   # a kept fleet's beats age
    store = Store(url, readonly=True)
    out = {"role": role}
    server = None
    try:
        if role == "scheduler":
            from nova_lite import objects
            from nova_lite.scheduler import HostManager
            flavor = objects.Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)
            manager = HostManager(store, settings)
            out["base_rss_mib"] = _rss_mib()
            first = lambda: manager.select_destinations(flavor)   # noqa: E731
            out["cold_ms"], out["cold_cpu_ms"], picked = _timed(first)
            out["next_ms"], _, _ = _timed(first)
            out["picked"] = picked[0].nodename
        elif role == "api":
            from nova_lite.api import make_app
            from nova_lite.web_server import BackgroundServer
            server = BackgroundServer(make_app(store, settings)).start()
            out["base_rss_mib"] = _rss_mib()
            out["cold_ms"], out["cold_cpu_ms"], body = _timed(
                lambda: _get(server.port, "/v1/cluster"))
            out["nodes"] = json.loads(body)["nodes"]
            out["next_ms"], _, _ = _timed(
                lambda: _get(server.port, "/v1/hypervisors?limit=1000"))
        elif role == "metrics":
            from nova_lite import metrics
            server = metrics.MetricsServer(metrics.Exporter(store, settings)).start()
            out["base_rss_mib"] = _rss_mib()
            out["cold_ms"], out["cold_cpu_ms"], body = _timed(
                lambda: _get(server.port, "/metrics"))
            out["bytes"] = len(body)
            out["next_ms"], _, _ = _timed(lambda: _get(server.port, "/metrics"))
        else:
            raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    finally:
        if server is not None:
            server.stop()
        store.close()
    out["rss_mib"] = _rss_mib()
    out["peak_rss_mib"] = _peak_mib()
    return out


def roles(url, tree=None):
    """``{role: figures}``, each reader in its own process on the code at ``tree``."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tree = os.path.abspath(tree or here)
    found = {}
    for role in ROLES:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--role", role, "--url", url],
            capture_output=True, text=True, cwd=tree,
            env=dict(os.environ, PYTHONPATH=tree))
        if proc.returncode != 0:
            found[role] = {"error": f"exit status {proc.returncode}",
                           "stderr": proc.stderr.strip().splitlines()[-20:]}
        else:
            found[role] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def run_case(case):
    from bench import common
    if case.get("url"):
        return {"readers": roles(case["url"], case.get("tree"))}
    with common.store_url(case["store"]) as url:
        started = time.perf_counter()
        make_fleet(url, case["nodes"])
        setup_s = round(time.perf_counter() - started, 1)
        return {"setup_s": setup_s, "readers": roles(url, case.get("tree"))}


def _main(argv):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m bench.cold_load",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--url", help="an existing fleet's database URL: only read it")
    parser.add_argument("--tree", help="the nova-lite source tree the readers run on")
    parser.add_argument("--build", type=int, metavar="NODES",
                        help="record a fleet of NODES nodes in a new PostgreSQL database, "
                             "keep it and print its URL")
    parser.add_argument("--repeat", type=int, default=1,
                        help="with --url: read it this many times, alternating --tree "
                             "and this tree when both are given")
    args, rest = parser.parse_known_args(argv)
    if args.role:
        print(json.dumps(run_role(args.role, args.url)))
        return 0
    if args.build:
        from bench import common
        name = f"{common.PG_BENCH_DB}_cold_{args.build}"
        url = common._pg_database(name, create=True)
        started = time.perf_counter()
        make_fleet(url, args.build)
        print(json.dumps({"url": url, "nodes": args.build,
                          "setup_s": round(time.perf_counter() - started, 1)}))
        return 0
    if args.url:
        from bench import common
        trees = [args.tree, None] if args.tree else [None]
        runs = []
        for _ in range(args.repeat):
            for tree in trees:
                runs.append({"tree": tree or "this", "date": time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "readers": roles(args.url, tree)})
        print(json.dumps({"scenario": NAME, "machine": common.machine(), "url": args.url,
                          "targets": TARGETS, "runs": runs}, indent=1))
        return 0
    from bench import common
    return common.main(sys.modules[__name__], rest)


if __name__ == "__main__":
    if __package__ in (None, ""):   # run as a file: a reader's process, on its tree
        sys.path[0] = os.getcwd()
    sys.exit(_main(sys.argv[1:]))
