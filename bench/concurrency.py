"""Concurrency: claims per second from 4 processes on one database.

Four worker processes, each with its own ResourceTracker and Store on the
same database, start together and make ``claims`` instance claims each.
Two layouts: ``shared-node`` (every process claims on the same node, so
they race on its generation) and ``node-per-process`` (four nodes of one
service, one per process: they share only the database).  Stores: one
SQLite file, and PostgreSQL.  Reported: total claims / wall time from the
first start to the last finish.
"""

import multiprocessing
import sys
import time

from bench import common

NAME = "concurrency"
DEFAULT_SIZES = [1000]
TINY_SIZES = [3]
PROCESSES = 4
STORES = ("sqlite-file", "postgresql")
LAYOUTS = ("shared-node", "node-per-process")
TARGETS = {}


def cases(sizes):
    return [{"store": store, "layout": layout, "processes": PROCESSES, "claims": n}
            for n in sizes for store in STORES for layout in LAYOUTS]


def _settings():
    from nova_lite import conf
    # 4 x 1,000 claims of 1 vCPU / 512 MB must fit one node.
    return conf.Settings(cpu_allocation_ratio=16.0, ram_allocation_ratio=4.0)


def _nodes(case):
    if case["layout"] == "shared-node":
        return ["node-shared"]
    return [f"node-{i}" for i in range(case["processes"])]


def _worker(url, case, index, barrier, results):
    rt, _, store = common.make_tracker(url, "fake.multinode", settings=_settings(),
                                       nodes=_nodes(case))
    nodes = _nodes(case)
    nodename = nodes[index % len(nodes)]
    instances = common.make_instances(case["claims"])
    rt.get_node(nodename)   # load the node record before the clock starts
    common.settle_heap()
    barrier.wait()
    start = time.time()
    for inst in instances:
        rt.instance_claim(inst, nodename)
    end = time.time()
    store.close()
    results.put({"start": start, "end": end, "claims": len(instances),
                 "peak_rss_mib": common.peak_rss_mib()})


def run_case(case):
    if case["store"] == "postgresql":
        reason = common.postgresql_available()
        if reason:
            return {"skipped": reason}
    ctx = multiprocessing.get_context("spawn")
    with common.store_url(case["store"]) as url:
        rt, _, store = common.make_tracker(url, "fake.multinode", settings=_settings(),
                                           nodes=_nodes(case))
        rt.update_available_resource()
        barrier = ctx.Barrier(case["processes"])
        results = ctx.Queue()
        workers = [ctx.Process(target=_worker, args=(url, case, i, barrier, results))
                   for i in range(case["processes"])]
        for w in workers:
            w.start()
        outcomes = [results.get(timeout=600) for _ in workers]
        for w in workers:
            w.join()
        used = sum(store.get_compute_node(common.HOST, n).used("VCPU") for n in _nodes(case))
        store.close()
    failed = [w.exitcode for w in workers if w.exitcode]
    if failed:
        raise RuntimeError(f"worker exit codes {failed}")
    total = sum(o["claims"] for o in outcomes)
    wall = max(o["end"] for o in outcomes) - min(o["start"] for o in outcomes)
    return {"claims_per_s": round(total / wall, 1), "total_claims": total,
            "wall_s": round(wall, 3), "vcpus_used_after": used,
            "worker_peak_rss_mib": max(o["peak_rss_mib"] for o in outcomes)}


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
