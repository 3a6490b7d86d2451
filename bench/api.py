"""API: cluster totals of a fleet, answered over real HTTP by ``nova-lite api serve``'s app.

A fleet of N ``fake.multinode`` nodes (Nova's default sizes) on N/100
hosts, one instance claimed on every tenth node, recorded in a SQLite file.
The API's WSGI application runs in waitress on 127.0.0.1 over a read-only
store, as ``nova-lite api serve`` runs it; a client on one keep-alive
connection asks ``GET /v1/cluster`` ``repeat`` times.  Reported: the first
request (the node cache is cold: every node is read), the steady state
(nothing changed between requests: the cache asks the change sequence
what changed, and reads nothing), the first request after a claim (the
cache re-reads that node) and the first request after 1% of the nodes
changed (one real claim on one node of every host: 1,000 at 100,000
nodes; ``after_1pct_changed_cpu_ms``: this process's CPU time for it,
client and server alike).
"""

import http.client
import json
import sys
import time

from bench import common

NAME = "api"
DEFAULT_SIZES = [1000, 10000]
TINY_SIZES = [4]
STORES = ("sqlite-file",)
REPEAT = 50
NODES_PER_HOST = 100
TARGETS = {"10000 nodes": {"cluster_totals_median_ms": "<= 50"}}


def cases(sizes):
    return [{"store": store, "nodes": n, "repeat": REPEAT if n > 10 else 3}
            for n in sizes for store in STORES]


def make_fleet(url, nodes):
    """Record ``nodes`` fake nodes on ceil(nodes / 100) hosts; claim on every tenth.

    Returns ``(trackers, settings, seconds taken)``.
    """
    from nova_lite import conf
    from nova_lite.compute.resource_tracker import ResourceTracker
    from nova_lite.db import Store
    from nova_lite.db.store import COMPUTE_BINARY
    from nova_lite.virt import loader
    settings = conf.Settings()
    store = Store(url)
    started = time.perf_counter()
    trackers = []
    for first in range(0, nodes, NODES_PER_HOST):
        host = f"host-{first // NODES_PER_HOST:04d}"
        names = [f"{host}-node-{i:03d}" for i in range(min(NODES_PER_HOST, nodes - first))]
        driver = loader.load_driver("fake.multinode", settings=settings, nodes=names)
        driver.init_host(host)
        rt = ResourceTracker(host, driver, store=store, settings=settings)
        rt.update_available_resource()
        store.heartbeat(host, COMPUTE_BINARY)
        for name, inst in zip(names[::10], common.make_instances(len(names[::10]))):
            rt.instance_claim(inst, name)
        trackers.append(rt)
    return trackers, settings, time.perf_counter() - started


def get_body(conn, path):
    """``((wall s, process CPU s), body bytes)`` of one GET on the keep-alive
    connection (the server runs in this process: its CPU time counts)."""
    start, cpu = time.perf_counter(), time.process_time()
    conn.request("GET", path)
    answer = conn.getresponse()
    body = answer.read()
    sample = (time.perf_counter() - start, time.process_time() - cpu)
    if answer.status != 200:
        raise RuntimeError(f"GET {path}: {answer.status} {body[:200]!r}")
    return sample, body


def get(conn, path):
    """:func:`get_body`, the body decoded as JSON."""
    sample, body = get_body(conn, path)
    return sample, json.loads(body)


def ms(seconds):
    return round(seconds * 1000, 3)


def run_case(case):
    from nova_lite.api import make_app
    from nova_lite.db import Store
    from nova_lite.web_server import BackgroundServer
    with common.store_url(case["store"]) as url:
        trackers, settings, setup_s = make_fleet(url, case["nodes"])
        reader = Store(url, readonly=True)
        server = BackgroundServer(make_app(reader, settings)).start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        try:
            cold, first = get(conn, "/v1/cluster")
            samples = []
            for _ in range(case["repeat"]):
                sample, data = get(conn, "/v1/cluster")
                samples.append(sample)
            rt = trackers[0]
            rt.instance_claim(common.make_instances(1)[0], sorted(rt._nodes)[1])
            changed, after = get(conn, "/v1/cluster")
            for rt in trackers:   # 1% of the nodes: one of the 100 of each host
                rt.instance_claim(common.make_instances(1)[0],
                                  sorted(rt._nodes)[min(5, len(rt._nodes) - 1)])
            many, after_many = get(conn, "/v1/cluster")
        finally:
            conn.close()
            server.stop()
            reader.close()
            trackers[0].store.close()
    steady = common.timings(samples)
    return {"nodes": data["nodes"], "hosts": data["hosts"], "setup_s": round(setup_s, 3),
            "cold_ms": ms(cold[0]), "steady": steady, "after_change_ms": ms(changed[0]),
            "vcpus_used": {r["resource_class"]: r["used"] for r in data["resources"]}["VCPU"],
            "vcpus_used_after_change": {r["resource_class"]: r["used"]
                                        for r in after["resources"]}["VCPU"],
            "changed_nodes": len(trackers), "after_1pct_changed_ms": ms(many[0]),
            "after_1pct_changed_cpu_ms": ms(many[1]),
            "vcpus_used_after_1pct": {r["resource_class"]: r["used"]
                                      for r in after_many["resources"]}["VCPU"]}


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
