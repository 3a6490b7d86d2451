"""Metrics: a Prometheus scrape of a fleet, over real HTTP.

The fleet of :mod:`bench.api` (N ``fake.multinode`` nodes on N/100 hosts,
an instance on every tenth node) in a SQLite file; the metrics
(:class:`nova_lite.metrics.Exporter`, what ``nova-lite metrics serve``
serves) run in waitress on 127.0.0.1 and ``GET /metrics`` is timed
``repeat`` times: seven gauges per (node, resource class), the services'
state and the process metrics, parsed back with prometheus_client to
count the samples.  The first scrape reads and formats every node (cold);
the steady ones read the services and one fingerprint and join the cached
lines; the last one follows a claim (one node read and formatted again).
"""

import sys
import time
import urllib.request

from bench import api, common

NAME = "metrics"
DEFAULT_SIZES = [1000, 10000]
TINY_SIZES = [4]
STORES = ("sqlite-file",)
REPEAT = 7
TARGETS = {"10000 nodes": {"scrape_median_ms": "<= 1000"}}


def cases(sizes):
    return [{"store": store, "nodes": n, "repeat": REPEAT if n > 10 else 2}
            for n in sizes for store in STORES]


def scrape(url):
    """``((wall s, process CPU s), text)``: the server runs in this process."""
    start, cpu = time.perf_counter(), time.process_time()
    with urllib.request.urlopen(url, timeout=120) as answer:
        body = answer.read()
    return (time.perf_counter() - start, time.process_time() - cpu), body.decode()


def run_case(case):
    from prometheus_client.parser import text_string_to_metric_families

    from nova_lite import metrics
    from nova_lite.db import Store
    with common.store_url(case["store"]) as url:
        trackers, settings, setup_s = api.make_fleet(url, case["nodes"])
        reader = Store(url, readonly=True)
        server = metrics.MetricsServer(metrics.Exporter(reader, settings)).start()
        try:
            cold, _ = scrape(f"{server.url}/metrics")
            samples = []
            for _ in range(case["repeat"]):
                sample, text = scrape(f"{server.url}/metrics")
                samples.append(sample)
            rt = trackers[0]
            rt.instance_claim(common.make_instances(1)[0], sorted(rt._nodes)[1])
            changed, _ = scrape(f"{server.url}/metrics")
        finally:
            server.stop()
            reader.close()
            trackers[0].store.close()
    capacity = [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "nova_lite_resource_capacity"]
    return {"nodes": len({s.labels["node"] for s in capacity}),
            "capacity_samples": len(capacity), "bytes": len(text),
            "setup_s": round(setup_s, 3), "cold_ms": api.ms(cold[0]),
            "after_change_ms": api.ms(changed[0]),
            "scrape": common.timings(samples)}


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
