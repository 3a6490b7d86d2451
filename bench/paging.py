"""Paging and per-host metrics: a /v1/hypervisors page and a scrape of a large fleet.

The fleet of :mod:`bench.api` (N ``fake.multinode`` nodes on N/100 hosts,
an instance on every tenth node), recorded in a SQLite file or a
PostgreSQL database.  The API (``nova-lite api serve``'s app) and the
metrics (``nova-lite metrics serve``'s exporter, default settings: past
5,000 nodes the gauges are per host) run in waitress on 127.0.0.1 over a
read-only store each, as the commands run them.

API: ``GET /v1/hypervisors?limit=1000`` on one keep-alive connection:
the first request (the node cache is cold: every node is read), then
``repeat`` times the first page and a page from the middle of the fleet
(marker: the node at N/2) with nothing changed, then the first page after
a claim.  Metrics: ``GET /metrics`` the same way (cold, ``repeat`` steady
scrapes, one after a claim), parsed back with prometheus_client to count
the samples and check the mode.
"""

import http.client
import json
import sys

from bench import api, common

NAME = "paging"
DEFAULT_SIZES = [10000, 100000]
TINY_SIZES = [4]
STORES = ("sqlite-file", "postgresql")
REPEAT = 20
PAGE = 1000
TARGETS = {"100000 nodes": {"hypervisors_page_median_ms": "<= 100",
                            "scrape_median_ms": "<= 2000"}}


def cases(sizes):
    return [{"store": store, "nodes": n, "repeat": REPEAT if n > 10 else 2}
            for n in sizes for store in STORES]


#: One GET on the keep-alive connection: ``((wall s, process CPU s), body bytes)``.
get = api.get_body


def _api(url, settings, trackers, repeat):
    from nova_lite.api import make_app
    from nova_lite.db import Store
    from nova_lite.web_server import BackgroundServer
    reader = Store(url, readonly=True)
    server = BackgroundServer(make_app(reader, settings)).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    first = f"/v1/hypervisors?limit={PAGE}"
    try:
        cold, body = get(conn, first)
        page = json.loads(body)
        uuids = [n.uuid for n in reader.get_compute_nodes()]
        middle = f"{first}&marker={uuids[len(uuids) // 2]}"
        firsts, middles = [], []
        for _ in range(repeat):
            firsts.append(get(conn, first)[0])
            seconds, middle_body = get(conn, middle)
            middles.append(seconds)
        rt = trackers[0]
        rt.instance_claim(common.make_instances(1)[0], sorted(rt._nodes)[1])
        changed, _ = get(conn, first)
    finally:
        conn.close()
        server.stop()
        reader.close()
    return {"page_rows": len(page["hypervisors"]), "page_bytes": len(body),
            "next_link": bool(page["hypervisors_links"]),
            "middle_rows": len(json.loads(middle_body)["hypervisors"]),
            "cold_ms": api.ms(cold[0]), "first_page": common.timings(firsts),
            "middle_page": common.timings(middles), "after_change_ms": api.ms(changed[0])}


def _metrics(url, settings, trackers, repeat):
    from prometheus_client.parser import text_string_to_metric_families

    from nova_lite import metrics
    from nova_lite.db import Store
    reader = Store(url, readonly=True)
    server = metrics.MetricsServer(metrics.Exporter(reader, settings)).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    try:
        cold, _ = get(conn, "/metrics")
        steady = []
        for _ in range(repeat):
            seconds, body = get(conn, "/metrics")
            steady.append(seconds)
        rt = trackers[0]
        rt.instance_claim(common.make_instances(1)[0], sorted(rt._nodes)[2])
        changed, _ = get(conn, "/metrics")
    finally:
        conn.close()
        server.stop()
        reader.close()
    samples = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]
    mode = [s.value for s in samples if s.name == "nova_lite_per_node_series"]
    return {"per_node_series": mode[0] if mode else None, "samples": len(samples),
            "bytes": len(body), "hosts": len({s.labels["host"] for s in samples
                                              if s.name == "nova_lite_host_compute_nodes"}),
            "cold_ms": api.ms(cold[0]), "scrape": common.timings(steady),
            "after_change_ms": api.ms(changed[0])}


def run_case(case):
    with common.store_url(case["store"]) as url:
        trackers, settings, setup_s = api.make_fleet(url, case["nodes"])
        try:
            figures = {"setup_s": round(setup_s, 3),
                       "api": _api(url, settings, trackers, case["repeat"]),
                       "metrics": _metrics(url, settings, trackers, case["repeat"])}
        finally:
            trackers[0].store.close()
    return figures


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
