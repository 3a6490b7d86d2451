"""What ``bench.cluster_work`` measures beside its timings, and its checks.

:class:`Clock`: the CPU of this process, of the PostgreSQL server and of
the machine over a phase; :func:`per_task`: the services' step counters
(:class:`bench.cluster_services.Steps`) per task done; :func:`check`: the
records and the drivers against the instances built and deleted.
"""

import os
import time

#: What each instance of the benchmark's flavor holds.
RESOURCES = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


class Clock:
    """CPU of this process, the PostgreSQL server's processes and the machine."""

    def __init__(self):
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.pg = postgres_cpu_s()
        self.machine = machine_busy()

    def figures(self):
        wall = time.perf_counter() - self.wall
        busy, total = (a - b for a, b in zip(machine_busy(), self.machine))
        return {"wall_s": round(wall, 3),
                "operator_cpu_s": round(time.process_time() - self.cpu, 3),
                "postgres_cpu_s": round(postgres_cpu_s() - self.pg, 3),
                "machine_busy": round(busy / total, 3) if total else None}


def postgres_cpu_s():
    """CPU seconds used so far by the processes named ``postgres`` (0 if unreadable).

    Each process's own time to the nanosecond where the kernel shows it
    (``/proc/<pid>/schedstat``), else in clock ticks (``utime`` and
    ``stime``); and, in clock ticks, that of its children that exited
    (``cutime`` and ``cstime``: the server's exited backends count in the
    postmaster's, which waited for them).
    """
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                text = f.read()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        if name != "postgres":
            continue
        utime, stime, cutime, cstime = (int(x) for x in rest.split()[11:15])
        total += (cutime + cstime) / tick
        try:
            with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            total += (utime + stime) / tick
    return total


def machine_busy():
    """(busy, total) jiffies of every CPU since boot (/proc/stat), or (0, 0)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0, 0
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def per_task(steps):
    """The services' step counters summed, per task done."""
    tasks = sum(s["tasks"] for s in steps.values())
    out = {"tasks": tasks, "wakes": sum(s["wakes"] for s in steps.values()),
           "worker_cpu_ms_per_task": None, "service_cpu_ms_per_task": None, "steps": {}}
    if not tasks:
        return out
    out["worker_cpu_ms_per_task"] = round(
        sum(s["worker_cpu_ms"] for s in steps.values()) / tasks, 3)
    out["service_cpu_ms_per_task"] = round(
        sum(s["process_cpu_ms"] for s in steps.values()) / tasks, 3)
    names = sorted({n for s in steps.values() for n in s["steps"]})
    statements = transactions = 0
    for name in names:
        got = [s["steps"][name] for s in steps.values() if name in s["steps"]]
        calls = sum(g["calls"] for g in got)
        stmts, txns = sum(g["statements"] for g in got), sum(g["transactions"] for g in got)
        if name != "wait":
            statements, transactions = statements + stmts, transactions + txns
        out["steps"][name] = {
            "calls_per_task": round(calls / tasks, 3),
            "wall_ms_per_call": round(sum(g["wall_ms"] for g in got) / calls, 3)
            if calls else None,
            "cpu_ms_per_call": round(sum(g["cpu_ms"] for g in got) / calls, 3)
            if calls else None,
            "statements_per_task": round(stmts / tasks, 3),
            "transactions_per_task": round(txns / tasks, 3)}
    out["statements_per_task"] = round(statements / tasks, 3)
    out["transactions_per_task"] = round(transactions / tasks, 3)
    out["round_trips_per_task"] = round((statements + 2 * transactions) / tasks, 3)
    return out


def wait_for_work(store, timeout=600):
    """Wait until no task is open; returns the seconds waited."""
    start = time.monotonic()
    while store.tasks.waiting_by_host():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"work still open after {timeout} s: "
                               f"{store.tasks.waiting_by_host()}")
        time.sleep(0.01)
    return time.monotonic() - start


def check(store, services, expected):
    """Problems of the records and the drivers against ``expected``
    (``{instance uuid: "active" | "deleted"}``), and what was counted."""
    import sqlalchemy as sa

    from nova_lite import work
    from nova_lite.db import models

    problems = []
    instances = {i.uuid: i for i in store.list_instances(live_only=False)}
    nodes = store.db.read("bench: node uuids", lambda conn: {
        (r.host, r.nodename): r.uuid for r in conn.execute(sa.select(
            models.compute_nodes.c.host, models.compute_nodes.c.nodename,
            models.compute_nodes.c.uuid))})
    held, allocations = {}, store.list_allocations()
    for alloc in allocations:
        held.setdefault(alloc.instance_uuid, []).append(alloc)
    guests = services.guests()
    running = {uuid: host for host, found in guests.items() for uuid in found}
    for uuid in sorted(set(instances) - set(expected)):
        problems.append(f"instance {uuid} was not built here")
    for uuid, state in sorted(expected.items()):
        inst = instances.get(uuid)
        if inst is None:
            problems.append(f"instance {uuid} has no record")
            continue
        if inst.vm_state != state or inst.task_state is not None:
            problems.append(f"instance {uuid} is {inst.vm_state}/{inst.task_state}, "
                            f"not {state}")
        allocs = held.pop(uuid, [])
        if state == "active":
            node = nodes.get((inst.host, inst.node))
            if len(allocs) != 1 or allocs[0].node_uuid != node \
                    or dict(allocs[0].resources) != RESOURCES:
                problems.append(f"instance {uuid} on {inst.host}/{inst.node} holds "
                                f"{[(a.node_uuid, dict(a.resources)) for a in allocs]}")
            if running.pop(uuid, None) != inst.host:
                problems.append(f"instance {uuid} runs on no driver of host {inst.host}")
        elif allocs:
            problems.append(f"deleted instance {uuid} still holds {len(allocs)} allocation(s)")
    for uuid in sorted(held):
        problems.append(f"allocation of unknown consumer {uuid}")
    for uuid, host in sorted(running.items()):
        problems.append(f"host {host} runs guest {uuid}, not recorded active there")
    tasks = store.tasks.find()
    states = {}
    for task in tasks:
        states[task.state] = states.get(task.state, 0) + 1
        if task.state != work.DONE:
            problems.append(f"task {task.id} ({task.kind} of {task.instance_uuid}) is "
                            f"{task.state}: {task.detail}")
    return {"active": sum(1 for s in expected.values() if s == "active"),
            "deleted": sum(1 for s in expected.values() if s == "deleted"),
            "allocations": len(allocations),
            "tasks": states, "guests": {h: len(g) for h, g in guests.items()},
            "problems": problems[:20] + ([f"... and {len(problems) - 20} more"]
                                         if len(problems) > 20 else [])}
