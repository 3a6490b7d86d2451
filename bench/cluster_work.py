"""Cluster work: builds and deletes carried out by 4 compute service processes.

Set-up, on PostgreSQL: ``hosts`` compute services (4), each a process of
its own (:mod:`bench.cluster_services`) running
:class:`~nova_lite.compute.manager.ComputeService` with a ``fake.multinode``
driver of ``nodes / hosts`` nodes (2,500 each, 10,000 in all; sizes: see
:func:`layout`), its worker thread woken by LISTEN/NOTIFY, or polling every
``work_poll_interval`` seconds with ``"listen": false`` (no setting turns
listening off: the bench gives the worker a ``WorkListener(listen=False)``).
Each service's first pass records its nodes; its periodic audit then waits
an hour, so none runs while work is timed.  The operators ask through
:func:`nova_lite.compute.api.build` and :func:`~nova_lite.compute.api.delete`
with a 1 vCPU / 512 MB / 1 GB flavor.  The phases a case names run in
this order on the same services:

- ``latency_builds`` (N): one build at a time from the operator (this process,
  one HostManager and one set of claim trackers for all its builds, as an
  API process keeps them): ``api.build``, then the instance is read every
  ``poll_s`` (2 ms) until it is ``active``, after ``warmup`` (2) untimed
  builds; with ``think_s``, each request waits a random part of it first
  (untimed: the polling case, so requests fall anywhere in a poll
  interval).  Median and p95 of request to seen active, and from the
  task's stamps where the time went (``parts``): the build call (schedule,
  claim, record the task), when the host took the task and when it
  recorded it done, counted from the request, and the host's own time,
  take to done.
- ``operators`` x ``builds``: that many operator processes, started
  together, build ``builds`` instances each, ``batch`` at a time
  (``num_instances``); builds per second from the first operator's start
  to the last build recorded active (``finished_at`` of the last task).
  The operators' scheduler settings default to ``bench.builds``' tuned
  ones (``nodes_max_age``, ``host_subset_size``, ``warm_trackers``).
- ``deletes`` (N): one delete at a time of instances built before (built
  first, untimed, if there are not enough): ``api.delete``, then the
  instance's allocations are read every ``poll_s`` until there is none.
  Median and p95 of delete to capacity freed.

After every phase the records are checked (:mod:`bench.cluster_checks`):
each instance built is active (each deleted is deleted), each active one
holds exactly its flavor on its node and nothing else is allocated, no
task is open or failed, and each host's driver runs exactly the guests
recorded active on that host.  A
case whose check fails reports ``problems`` and an ``error``.  Each phase
also reports what each worker spent per task, step by step (take, read,
spawn, free, finish; wall and CPU time, statements and transactions), the
CPU the operators and the services used, and the CPU of every PostgreSQL
server process and the machine's busy share (these two count whatever
else runs on the machine and the server too).  ``"profile":
"<prefix>"`` writes a cProfile of each worker thread's CPU time to
``<prefix>.<host>.prof`` (and of each throughput operator's to
``<prefix>.operator<i>.prof``).
"""

import multiprocessing
import random
import statistics
import sys
import time

from bench import cluster_services, common
from bench.cluster_checks import Clock, check, per_task, wait_for_work

NAME = "cluster_work"
DEFAULT_SIZES = [10000]
TINY_SIZES = [4]
HOSTS = 4
STORES = ("postgresql",)
TARGETS = {"10000 nodes, 4 hosts, postgresql": {
    "latency.median_ms (listen)": "<= 100",
    "throughput.builds_per_s": ">= 500",
    "delete.median_ms (listen)": "<= 200"}}
#: The operators' scheduler settings in the throughput phase (bench.builds' tuned case).
TUNED = {"nodes_max_age": 0.5, "host_subset_size": 50, "warm_trackers": True}


def cases(sizes):
    found = []
    for n in sizes:
        tiny = n < 100
        base = {"store": "postgresql", "nodes": n, "hosts": 2 if tiny else HOSTS}
        count = 2 if tiny else 200
        found.append(dict(base, listen=True, latency_builds=count, deletes=count))
        # Polling: each request at a random moment of the poll interval
        # (think_s), or every request after the first would follow the one
        # before on the same host by the same lag, locked to its polls.
        found.append(dict(base, listen=False, work_poll_interval=0.2 if tiny else 1.0,
                          think_s=0.2 if tiny else 1.0,
                          latency_builds=count if tiny else count // 2,
                          deletes=count if tiny else count // 2))
        for batch in (1, 10):
            found.append(dict(base, listen=True, operators=2 if tiny else 4,
                              builds=2 if tiny else 1000, batch=batch, **TUNED))
    return found


# -- the cluster ----------------------------------------------------------------

def host_names(case):
    return [f"host-{i}" for i in range(case["hosts"])]


def layout(case):
    """``{host: {node name: (vcpus, memory MB, disk GB)}}``: the nodes dealt out
    to the hosts in turn, each of Nova's default fake size plus a step of its
    own (1 vCPU, 1,792 MB and 4 GB per step), the steps shuffled across the
    hosts (the same every run).

    Equal nodes would tie, and ties go in (host, node) order: every build
    would land on the first host until each of its nodes held one.  Here
    the next best node is on any host.  The steps are nearly in proportion
    to what a build takes under the default allocation ratios (a quarter of
    a step's vCPU x 4 and disk, two sevenths of its memory), so the three
    weighers rank the nodes almost alike, as they do a fleet of equal nodes
    (a scheduler's ranking is cheapest then), and no two nodes ever tie:
    the best node takes four builds, then the next step's does."""
    from nova_lite.virt.fake import FakeMultiNodeDriver
    base = FakeMultiNodeDriver.size
    hosts = host_names(case)
    steps = list(range(case["nodes"]))
    random.Random(2026).shuffle(steps)
    per = {h: {} for h in hosts}
    for i, step in enumerate(steps):
        host = hosts[i % len(hosts)]
        per[host][f"{host}-n{len(per[host]):05d}"] = (
            base.vcpus + step, base.memory_mb + 1792 * step, base.local_gb + 4 * step)
    return per


def _service_settings(case):
    return {"update_resources_interval": 3600.0,
            "work_poll_interval": case.get("work_poll_interval", 1.0)}


def _operator_settings(case, tuned=False):
    from nova_lite import conf
    return conf.Settings(host_subset_size=case.get("host_subset_size", 1) if tuned else 1,
                         nodes_max_age=case.get("nodes_max_age", 0.0) if tuned else 0.0)


def _flavor():
    from nova_lite import objects
    return objects.Flavor(**common.FLAVOR)


def _ms(values):
    ordered = sorted(v * 1000 for v in values)
    if not ordered:
        return {"runs": 0}
    return {"runs": len(ordered), "min_ms": round(ordered[0], 1),
            "median_ms": round(statistics.median(ordered), 1),
            "p95_ms": round(common.percentile(ordered, 0.95), 1),
            "max_ms": round(ordered[-1], 1)}


# -- the phases ---------------------------------------------------------------------

def _wait_until(seen, poll, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = seen()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not seen after {timeout} s")
        time.sleep(poll)


def _think(case, rng=random.Random(27)):
    """Wait a random part of ``think_s`` (untimed) before a request."""
    if case.get("think_s"):
        time.sleep(rng.uniform(0, case["think_s"]))


def latency(store, case, built):
    """One build at a time; request to seen active, and its parts."""
    from nova_lite.compute import api
    from nova_lite.scheduler import HostManager

    settings = _operator_settings(case)
    manager = HostManager(store, settings)
    trackers = api.RecordsTrackers(store, settings)
    manager.refresh()
    flavor, poll = _flavor(), case.get("poll_s", 0.002)

    def one():
        asked = time.time()
        start = time.perf_counter()
        result = api.build(store, flavor, host_manager=manager, trackers=trackers)
        called = time.perf_counter()
        inst = result.instances[0]

        polls = []

        def active():
            if store.get_instance(inst.uuid).vm_state == "active":
                return True
            polls.append(1)
            if len(polls) % 25 == 0:   # the task over, the instance not active: no wait
                task = store.tasks.get(result.tasks[0].id)
                if not task.is_open and store.get_instance(inst.uuid).vm_state != "active":
                    raise RuntimeError(f"build of {inst.uuid}: task {task.state}, "
                                       f"{task.detail}")
            return False
        _wait_until(active, poll, 60, f"build of {inst.uuid}")
        seen = time.perf_counter()
        built[inst.uuid] = inst
        return (asked, called - start, result.tasks[0].id, seen - start)

    for _ in range(case.get("warmup", 2)):
        one()
    clock = Clock()
    samples = []
    for _ in range(case["latency_builds"]):
        _think(case)
        samples.append(one())
    figures = clock.figures()
    tasks = {t.id: t for t in store.tasks.find(ids=[s[2] for s in samples])}
    # From the request: the build call's return, the host's take and its
    # outcome recorded (the tasks' epoch stamps, taken before their
    # transactions), and the host's own time, take to outcome.
    parts = {"build_call": [], "taken_at": [], "done_at": [], "taken_to_done": []}
    for asked, call, task_id, _ in samples:
        task = tasks[task_id]
        parts["build_call"].append(call)
        parts["taken_at"].append(task.started_at - asked)
        parts["done_at"].append(task.finished_at - asked)
        parts["taken_to_done"].append(task.finished_at - task.started_at)
    seen = _ms(s[3] for s in samples)
    return dict(seen, **figures, parts={k: _ms(v) for k, v in parts.items()},
                poll_ms=poll * 1000)


def deletes(store, case, built, instances):
    """One delete at a time; delete to allocations gone."""
    from nova_lite.compute import api

    poll = case.get("poll_s", 0.002)
    clock = Clock()
    freed, done = [], []
    for inst in instances:
        _think(case)
        start = time.perf_counter()
        result = api.delete(store, inst)
        _wait_until(lambda uuid=inst.uuid: not store.list_allocations(instance_uuid=uuid),
                    poll, 60, f"delete of {inst.uuid}")
        freed.append(time.perf_counter() - start)
        _wait_until(lambda task=result.task.id: not store.tasks.get(task).is_open,
                    poll, 60, f"delete task of {inst.uuid}")
        done.append(time.perf_counter() - start)
        built[inst.uuid] = None
    return dict(_ms(freed), **clock.figures(), task_done=_ms(done), poll_ms=poll * 1000)


def _operator(url, case, barrier, results, index):
    """One operator process of the throughput phase."""
    from nova_lite.compute import api
    from nova_lite.db import Store
    from nova_lite.scheduler import HostManager

    settings = _operator_settings(case, tuned=True)
    store = Store(url)
    manager = HostManager(store, settings)
    trackers = api.RecordsTrackers(store, settings)
    manager.refresh()
    if case.get("warm_trackers"):
        for state in manager.get_host_states():
            trackers(state.host).get_node(state.nodename)
    flavor, batch, left = _flavor(), case.get("batch", 1), case["builds"]
    profiler = None
    if case.get("profile"):
        import cProfile
        profiler = cProfile.Profile(time.process_time)   # CPU, not waiting
    uuids, retried = [], 0
    barrier.wait()
    start, cpu = time.time(), time.process_time()
    if profiler is not None:
        profiler.enable()
    while left:
        result = api.build(store, flavor, min(batch, left), host_manager=manager,
                           trackers=trackers)
        uuids.extend(i.uuid for i in result.instances)
        retried += len(result.attempts)
        left -= len(result.instances)
    end, cpu = time.time(), time.process_time() - cpu
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{case['profile']}.operator{index}.prof")
    store.close()
    results.put({"start": start, "end": end, "cpu": cpu, "uuids": uuids, "retried": retried,
                 "peak_rss_mib": common.peak_rss_mib()})


def throughput(store, case, ctx, url, built):
    """``operators`` processes building at once; builds/s until all are active."""
    barrier = ctx.Barrier(case["operators"] + 1)   # this process starts the clock
    results = ctx.Queue()
    procs = [ctx.Process(target=_operator, args=(url, case, barrier, results, i))
             for i in range(case["operators"])]
    for proc in procs:
        proc.start()
    while barrier.n_waiting < len(procs):   # every operator ready (or one failed)
        if any(p.exitcode not in (None, 0) for p in procs):
            common.gather(results, procs)   # raises, naming the exit codes
        time.sleep(0.01)
    barrier.wait()
    clock = Clock()
    outcomes = common.gather(results, procs)
    for proc in procs:
        proc.join()
    failed = [p.exitcode for p in procs if p.exitcode]
    if failed:
        raise RuntimeError(f"operator exit codes {failed}")
    wait_for_work(store)
    figures = clock.figures()
    uuids = {u for o in outcomes for u in o["uuids"]}
    tasks = [t for t in store.tasks.find(kinds=("build",)) if t.instance_uuid in uuids]
    start = min(o["start"] for o in outcomes)
    asked_end = max(o["end"] for o in outcomes)
    active_end = max(t.finished_at for t in tasks)
    total = len(uuids)
    for uuid in uuids:
        built[uuid] = True
    return {"builds": total, "builds_per_s": round(total / (active_end - start), 1),
            "wall_s": round(active_end - start, 3),
            "asked_per_s": round(total / (asked_end - start), 1),
            "open_when_asked": sum(1 for t in tasks if t.finished_at > asked_end),
            "drain_s": round(max(0.0, active_end - asked_end), 3),
            "operator_cpu_ms_per_build": round(
                1000 * sum(o["cpu"] for o in outcomes) / total, 3),
            "retried_on_alternate": sum(o["retried"] for o in outcomes),
            "per_host": _per_host(tasks),
            "operator_peak_rss_mib": max(o["peak_rss_mib"] for o in outcomes), **figures}


def _per_host(tasks):
    counts = {}
    for task in tasks:
        counts[task.host] = counts.get(task.host, 0) + 1
    return dict(sorted(counts.items()))


def _build_untimed(store, count, built):
    from nova_lite.compute import api
    made = []
    while len(made) < count:
        result = api.build(store, _flavor(), min(50, count - len(made)))
        made.extend(result.instances)
    api.wait(store, [t for t in store.tasks.find(states=("waiting", "running"))], 300)
    for inst in made:
        built[inst.uuid] = inst
    return made


# -- the case ------------------------------------------------------------------------

#: What the process that forks the services and operators imports once.
PRELOAD = ["bench.cluster_services", "nova_lite.compute.api", "nova_lite.compute.manager",
           "nova_lite.db", "nova_lite.scheduler", "nova_lite.virt.loader", "psycopg"]


def _context():
    """Processes forked from one server that imported nova-lite once (each
    starts in a fraction of the import's second); spawned where there is no
    fork."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def run_case(case):
    reason = common.postgresql_available()
    if reason:
        return {"skipped": reason}
    from nova_lite.db import Store

    ctx = _context()
    out = {}
    with common.store_url(case["store"]) as url:
        Store(url).close()   # the schema, before the services race to create it
        setup = time.perf_counter()
        services = cluster_services.start(ctx, url, layout(case), _service_settings(case),
                                          listen=case.get("listen", True),
                                          profile=case.get("profile"))
        store = Store(url)
        try:
            out["setup_s"] = round(time.perf_counter() - setup, 3)
            out["nodes_recorded"] = len(store.get_compute_nodes())
            # How fast the machine is just now (shared machines vary by the minute).
            out["reference_us"] = common.reference_speed(repeat=3)
            # {uuid: Instance (active), True (active, built elsewhere) or None (deleted)}
            built = {}
            services.steps()   # the counters start now
            phases = [("latency", lambda: latency(store, case, built))] \
                if case.get("latency_builds") else []
            if case.get("operators"):
                phases.append(("throughput", lambda: throughput(store, case, ctx, url, built)))
            if case.get("deletes"):
                phases.append(("delete", lambda: _delete_phase(store, case, built)))
            problems = []
            for name, phase in phases:
                figures = phase()
                wait_for_work(store)
                figures["work"] = per_task(services.steps())
                figures["check"] = check(store, services, {
                    u: "deleted" if i is None else "active" for u, i in built.items()})
                problems += [f"{name}: {p}" for p in figures["check"]["problems"]]
                out[name] = figures
        finally:
            store.close()
            services.stop()
    if problems:
        out["problems"] = problems
        out["error"] = f"{len(problems)} problem(s) found by the checks"
    return out


def _delete_phase(store, case, built):
    live = [i for i in built.values() if i is not None and i is not True]
    if len(live) < case["deletes"]:
        live += _build_untimed(store, case["deletes"] - len(live), built)
    return deletes(store, case, built, live[:case["deletes"]])


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
