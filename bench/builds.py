"""Builds as asked: schedule, claim and record the host's task, from 4 processes.

Set-up as ``bench.scheduler``: N ``fake.multinode`` nodes, each given its
own host and a live compute service.  Four worker processes, each with its
own Store, HostManager and resource trackers (those a build makes when it
is given none, as ``nova-lite server create`` does: one per host, claiming
through the records, no driver of the host loaded), start together and make
``builds`` builds each of a 1 vCPU / 512 MB / 1 GB flavor through
:func:`nova_lite.compute.api.build`: scheduling, the claim and the build
task recorded for the chosen host (the instance, its allocation and its
task are stored in full).  No compute service runs, so no task is taken
and every instance stays ``building``: what is measured is the asking
side alone (``bench.cluster_work`` measures builds carried out by the
hosts' services, spawn and ``active`` included).  Reported:
total builds / wall time, lost claims retried on an alternate, and whether
the records hold exactly the builds made (instances, allocations and
waiting build tasks), and the CPU time the workers
themselves spent per build.  Beside it, over the timed window (from the
workers' start together to the last one's result, before any closes its
connections): the CPU of the processes named ``postgres`` per build
(``server_cpu_ms_per_build``; None for a SQLite file, or a server whose
processes this machine does not show), the share of all the machine's
CPUs that was busy (``machine_busy``), and ``cpu_ceiling_builds_per_s``:
the rate at which the workers' and the server's CPU per build would fill
every core, the most builds/s this machine could make while a build
costs what it cost.

Optional case keys: ``nodes_max_age`` (s) and ``host_subset_size`` (the
HostManager's), ``warm_trackers`` (each worker's trackers read their node
before the timing, as a compute host's tracker already has; the default
cases make a tracker when a build first lands on its host), and
``"profile": "<prefix>"``, which has each worker profile its own
builds with cProfile and save them to ``<prefix>.<worker>.prof`` (read
them with ``pstats``; the figures are then slower than unprofiled).
"""

import multiprocessing
import os
import sys
import time

from bench import common
from bench.cluster_checks import Clock
from bench.scheduler import _spread_hosts

NAME = "builds"
DEFAULT_SIZES = [10000]
TINY_SIZES = [4]
PROCESSES = 4
BUILDS = 1000
STORES = ("postgresql", "sqlite-file")
TARGETS = {"10000 nodes, postgresql": {"builds_per_s": ">= 1000"}}


#: The "tuned" case: requests reuse the view for 0.5 s, each pick is a random one
#: of the 50 best nodes, and every tracker tracks its node before the timing.
TUNED = {"nodes_max_age": 0.5, "host_subset_size": 50, "warm_trackers": True}


def cases(sizes):
    found = []
    for n in sizes:
        for store in STORES:
            case = {"store": store, "nodes": n, "processes": PROCESSES,
                    "builds": BUILDS if n > 10 else 3}
            found.append(case)
            if store == "postgresql":
                found.append(dict(case, **TUNED))
    return found


def _names(count):
    return [f"node-{i:06d}" for i in range(count)]


def _settings(case=None):
    from nova_lite import conf
    return conf.Settings(service_down_time=3600,
                         host_subset_size=(case or {}).get("host_subset_size", 1),
                         nodes_max_age=(case or {}).get("nodes_max_age", 0.0))


def _worker(url, case, signals, results, index=0):
    from nova_lite import objects
    from nova_lite.compute import api
    from nova_lite.db import Store
    from nova_lite.scheduler import HostManager

    settings = _settings(case)
    store = Store(url)
    # The trackers a build makes when none are given: one per host, claiming
    # through the records, no driver of the host loaded in this process.
    tracker_for = api.RecordsTrackers(store, settings)
    manager = HostManager(store, settings)
    manager.refresh()   # the first full read is not part of the timing
    if case.get("warm_trackers"):
        # A compute host's tracker already tracks its node: track them all first.
        for state in manager.get_host_states():
            tracker_for(state.host).get_node(state.nodename)
    flavor = objects.Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1)
    profiler = None
    if case.get("profile"):
        import cProfile
        profiler = cProfile.Profile(time.process_time)   # CPU, not waiting
    common.settle_heap()
    ready, go, measured = signals
    ready.put(index)
    go.wait()
    start, cpu, retried = time.time(), time.process_time(), 0
    if profiler is not None:
        profiler.enable()
    for _ in range(case["builds"]):
        result = api.build(store, flavor, trackers=tracker_for, host_manager=manager)
        retried += len(result.attempts)
    end, cpu = time.time(), time.process_time() - cpu
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{case['profile']}.{index}.prof")
    results.put({"start": start, "end": end, "cpu": cpu, "builds": case["builds"],
                 "retried": retried,
                 "peak_rss_mib": common.peak_rss_mib()})
    # Connections closed after the server's CPU is read: a backend that
    # exits takes its own figure with it.
    measured.wait(timeout=600)
    store.close()


def run_case(case):
    if case["store"] == "postgresql":
        reason = common.postgresql_available()
        if reason:
            return {"skipped": reason}
    from nova_lite.compute.resource_tracker import ResourceTracker
    from nova_lite.db import Store
    from nova_lite.virt import loader

    ctx = multiprocessing.get_context("spawn")
    settings = _settings()
    with common.store_url(case["store"]) as url:
        store = Store(url)
        driver = loader.load_driver("fake.multinode", settings=settings,
                                    nodes=_names(case["nodes"]))
        driver.init_host(common.HOST)
        ResourceTracker(common.HOST, driver, store=store,
                        settings=settings).update_available_resource()
        _spread_hosts(store, case["nodes"])
        ready, go, measured, results = ctx.Queue(), ctx.Event(), ctx.Event(), ctx.Queue()
        workers = [ctx.Process(target=_worker,
                               args=(url, case, (ready, go, measured), results, i))
                   for i in range(case["processes"])]
        for w in workers:
            w.start()
        try:
            common.gather(ready, workers)   # every worker set up
            clock = Clock()
            go.set()
            outcomes = common.gather(results, workers)
            used = clock.figures()
        finally:
            measured.set()
        for w in workers:
            w.join()
        stored = len(store.list_instances())
        waiting = len(store.tasks.find(states=("waiting",), kinds=("build",)))
        held = store.list_allocations()
        allocations, nodes_used = len(held), len({a.node_uuid for a in held})
        store.close()
    failed = [w.exitcode for w in workers if w.exitcode]
    if failed:
        raise RuntimeError(f"worker exit codes {failed}")
    total = sum(o["builds"] for o in outcomes)
    wall = max(o["end"] for o in outcomes) - min(o["start"] for o in outcomes)
    worker_ms = 1000 * sum(o["cpu"] for o in outcomes) / total
    server_ms = 1000 * used["postgres_cpu_s"] / total \
        if case["store"] == "postgresql" and used["postgres_cpu_s"] > 0 else None
    return {"builds_per_s": round(total / wall, 1), "total_builds": total,
            "wall_s": round(wall, 3),
            "worker_cpu_ms_per_build": round(worker_ms, 3),
            "server_cpu_ms_per_build": None if server_ms is None else round(server_ms, 3),
            "machine_busy": used["machine_busy"],
            "cpu_ceiling_builds_per_s": round(
                1000 * (os.cpu_count() or 1) / (worker_ms + (server_ms or 0)), 1),
            "retried_on_alternate": sum(o["retried"] for o in outcomes),
            "stored_instances": stored, "stored_allocations": allocations,
            "waiting_build_tasks": waiting,
            "nodes_used": nodes_used,
            "worker_peak_rss_mib": max(o["peak_rss_mib"] for o in outcomes)}


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
