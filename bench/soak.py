"""Multi-process soak: claims, deletes and resizes race while a service audits.

N worker processes share one compute host's nodes through one database.
Each runs a random mix of operations (claim, claim-then-abort, resize,
confirm, revert, delete, shelve-offload) and writes every outcome to its own
operations log (JSON lines).  Meanwhile a ComputeService process audits the
host in a loop (heartbeat, audit, orphans).  The run is bounded both in
operations and in seconds.

Afterwards the records are checked against the operations logs:

- every allocation of the host is one the logs explain (no orphan or leak),
  with the amounts of its flavor (no double count);
- every instance the logs say is placed, and every resize they say is in
  progress, holds exactly its allocation (nothing lost);
- every instance row has the state, node and flavor the logs say;
- no node is over capacity;
- the service's audits never had to repair anything, and one more audit
  changes nothing.

A failed operation (StoreError) counts as "nothing written", so that is
checked too.  Usage::

    python bench/soak.py --processes 8 --ops 2000 --seconds 300 \\
        --database-url postgresql://postgres@127.0.0.1:5432/test \\
        --mix claim=6,delete=3,resize=2,confirm=1,revert=1,offload=1,abort=1

Without ``--database-url`` it uses a new SQLite file.  The records of each
run live under their own host name (``soak-<random>``), so an existing
database is never wiped.  It prints one JSON summary and exits 1 if any
check failed.
"""

import argparse
import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid

if __package__ in (None, ""):   # run as "python bench/soak.py"
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import attrs  # noqa: E402

from nova_lite import conf, objects  # noqa: E402
from nova_lite.compute.claims import ComputeResourcesUnavailable  # noqa: E402
from nova_lite.compute.manager import ComputeService  # noqa: E402
from nova_lite.compute.resource_tracker import ResourceTracker  # noqa: E402
from nova_lite.conf import redact_url  # noqa: E402
from nova_lite.db import Store  # noqa: E402
from nova_lite.exception import NovaLiteError, StoreError  # noqa: E402
from nova_lite.virt import loader  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ("claim", "abort", "resize", "confirm", "revert", "delete", "offload")
DEFAULT_MIX = "claim=6,abort=1,resize=2,confirm=1,revert=1,delete=3,offload=1"
FLAVORS = {
    "tiny": objects.Flavor(name="tiny", vcpus=1, memory_mb=256, root_gb=1),
    "small": objects.Flavor(name="small", vcpus=1, memory_mb=512, root_gb=5, swap=512),
    "medium": objects.Flavor(name="medium", vcpus=2, memory_mb=1024, root_gb=10,
                             ephemeral_gb=2),
    "large": objects.Flavor(name="large", vcpus=4, memory_mb=4096, root_gb=40),
}
#: Each node: 8 CPUs x 2.0, 8 GiB less 512 MiB reserved, 100 GB.
NODE_SIZE = dict(vcpus=8, memory_mb=8192, local_gb=100)
RESERVED_MEMORY_MB = 512
CPU_RATIO = 2.0

LOG = logging.getLogger("nova_lite.soak")


# -- shared set-up ---------------------------------------------------------------

def node_names(host, count):
    return [f"{host}-node{i}" for i in range(count)]


def make_settings(host, audit_interval=1.0):
    return conf.Settings(host=host, state_path=tempfile.gettempdir(),
                         reserved_host_memory_mb=RESERVED_MEMORY_MB,
                         cpu_allocation_ratio=CPU_RATIO,
                         update_resources_interval=audit_interval, claim_retries=50)


def make_driver(host, nodes, settings):
    driver = loader.load_driver("fake.multinode", settings=settings,
                                nodes=node_names(host, nodes), **NODE_SIZE)
    driver.init_host(host)
    return driver


def requested(flavor):
    """What a flavor holds (the fake driver has no overhead)."""
    amounts = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb,
               "DISK_GB": flavor.root_gb + flavor.ephemeral_gb + math.ceil(flavor.swap / 1024)}
    return {rc: n for rc, n in amounts.items() if n}


def parse_mix(text):
    """``"claim=6,delete=3"`` -> ``{"claim": 6, "delete": 3}``; names every bad part."""
    mix = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, weight = part.partition("=")
        name = name.strip()
        if name not in OPS:
            raise argparse.ArgumentTypeError(
                f"unknown operation {name!r} in --mix (known: {', '.join(OPS)})")
        try:
            mix[name] = int(weight) if sep else 1
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"weight of {name!r} in --mix must be an integer, got {weight!r}") from None
        if mix[name] < 0:
            raise argparse.ArgumentTypeError(f"weight of {name!r} in --mix is negative")
    if not mix.get("claim"):
        raise argparse.ArgumentTypeError("--mix needs claim with a positive weight")
    return mix


# -- a worker ----------------------------------------------------------------------

class Worker:
    """One process's random walk of operations, logged line by line."""

    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.settings = make_settings(args.host)
        self.store = Store(args.database_url, claim_retries=self.settings.claim_retries)
        self.driver = make_driver(args.host, args.nodes, self.settings)
        self.rt = ResourceTracker(args.host, self.driver, store=self.store,
                                  settings=self.settings)
        self.nodes = node_names(args.host, args.nodes)
        self.mine = {}    # instance uuid -> {"migration": {...} or None}
        self.log = open(args.log, "a", encoding="utf-8")
        self.seq = 0

    def write(self, **entry):
        self.seq += 1
        entry.update(w=self.args.worker_id, seq=self.seq)
        self.log.write(json.dumps(entry, sort_keys=True) + "\n")
        self.log.flush()

    def choose(self, mix):
        ops = [op for op in mix if mix[op] and self.possible(op)]
        return self.rng.choices(ops, weights=[mix[op] for op in ops])[0]

    def possible(self, op):
        if op in ("claim", "abort"):
            return True
        if op == "resize":
            return any(m["migration"] is None for m in self.mine.values())
        if op in ("confirm", "revert"):
            return any(m["migration"] is not None for m in self.mine.values())
        return bool(self.mine)

    def pick(self, migrating=None):
        choices = sorted(u for u, m in self.mine.items()
                         if migrating is None or (m["migration"] is not None) == migrating)
        return self.rng.choice(choices)

    def run(self, mix, deadline):
        done = 0
        while done < self.args.ops and time.monotonic() < deadline:
            op = self.choose(mix)
            try:
                getattr(self, "op_" + op)()
            except StoreError as exc:   # nothing was written: logged as such
                self.write(op=op, result="error", error=str(exc))
            done += 1
        self.store.close()
        return done

    def op_claim(self):
        u, node = str(uuid.uuid4()), self.rng.choice(self.nodes)
        flavor = self.rng.choice(sorted(FLAVORS))
        inst = objects.Instance(uuid=u, flavor=FLAVORS[flavor], project_id="soak")
        try:
            self.rt.instance_claim(inst, node)
        except ComputeResourcesUnavailable as exc:
            self.write(op="claim", result="rejected", instance=u, node=node, flavor=flavor,
                       error=str(exc))
            return
        self.mine[u] = {"migration": None}
        self.write(op="claim", result="ok", instance=u, node=node, flavor=flavor)

    def op_abort(self):
        u, node = str(uuid.uuid4()), self.rng.choice(self.nodes)
        inst = objects.Instance(uuid=u, flavor=FLAVORS["tiny"], project_id="soak")
        try:
            with self.rt.instance_claim(inst, node):
                raise _SpawnFailed()
        except ComputeResourcesUnavailable as exc:
            self.write(op="abort", result="rejected", instance=u, node=node, error=str(exc))
        except _SpawnFailed:
            self.write(op="abort", result="ok", instance=u, node=node, flavor="tiny")

    def op_resize(self):
        u = self.pick(migrating=False)
        dest, flavor = self.rng.choice(self.nodes), self.rng.choice(sorted(FLAVORS))
        stored = self.store.get_instance(u)
        try:
            claim = self.rt.resize_claim(stored, FLAVORS[flavor], dest)
        except ComputeResourcesUnavailable as exc:
            self.write(op="resize", result="rejected", instance=u, node=dest, flavor=flavor,
                       error=str(exc))
            return
        mig = claim.migration
        self.mine[u]["migration"] = {"uuid": mig.uuid, "source": mig.source_node,
                                     "dest": dest, "old": stored.flavor.name, "new": flavor}
        self.write(op="resize", result="ok", instance=u, node=dest, flavor=flavor,
                   migration=mig.uuid, source=mig.source_node)

    def op_confirm(self):
        self._finish("confirm")

    def op_revert(self):
        self._finish("revert")

    def _finish(self, op):
        u = self.pick(migrating=True)
        mig = self.mine[u]["migration"]
        node, flavor = (mig["source"], mig["old"]) if op == "confirm" else (mig["dest"],
                                                                              mig["new"])
        self.rt.drop_move_claim(self.store.get_instance(u), node, FLAVORS[flavor])
        self.mine[u]["migration"] = None
        self.write(op=op, result="ok", instance=u, migration=mig["uuid"])

    def op_delete(self):
        self._free(objects.DELETED, "delete")

    def op_offload(self):
        self._free(objects.SHELVED_OFFLOADED, "offload")

    def _free(self, state, op):
        u = self.pick()
        self.rt.update_usage(attrs.evolve(self.store.get_instance(u), vm_state=state))
        del self.mine[u]
        self.write(op=op, result="ok", instance=u)


class _SpawnFailed(Exception):
    pass


# -- the auditing service ------------------------------------------------------------

class _Repairs(logging.Handler):
    """Counts the audit's repairs: any means the records were wrong mid-run."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.repairs = []

    def emit(self, record):
        text = record.getMessage()
        if text.startswith(("Leaked allocation", "Missing allocation")):
            self.repairs.append(text)


def run_service(args):
    repairs = _Repairs()
    logging.getLogger("nova_lite").addHandler(repairs)
    settings = make_settings(args.host, audit_interval=args.audit_interval)
    store = Store(args.database_url, claim_retries=settings.claim_retries)
    service = ComputeService(args.host, make_driver(args.host, args.nodes, settings),
                             store=store, settings=settings)
    passes = service.run(handle_signals=True)
    store.close()
    return {"passes": passes, "repairs": repairs.repairs}


# -- the parent: start, wait, verify -----------------------------------------------------

def _child(role, args, **extra):
    cmd = [sys.executable, "-m", "bench.soak", "--role", role, "--host", args.host,
           "--nodes", str(args.nodes), "--database-url", args.database_url,
           "--audit-interval", str(args.audit_interval)]
    for key, value in extra.items():
        cmd += ["--" + key.replace("_", "-"), str(value)]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _collect(proc, timeout):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, f"killed after {timeout:.0f} s; stderr: {err[-2000:]}"
    if proc.returncode != 0:
        return None, f"exit {proc.returncode}; stderr: {err[-2000:]}"
    try:
        return json.loads(out.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, f"no summary on stdout; stderr: {err[-2000:]}"


def run_soak(database_url=None, processes=4, ops=200, seconds=60.0, nodes=2, mix=None,
             audit_interval=0.2, seed=None, log_dir=None):
    """Run one soak and return its summary dict (``problems`` empty when all is well)."""
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="nova-lite-soak-")
    database_url = database_url or "sqlite:///" + os.path.join(tmp, "soak.db")
    log_dir = log_dir or tmp
    seed = random.randrange(2 ** 32) if seed is None else seed
    mix = parse_mix(mix or DEFAULT_MIX) if not isinstance(mix, dict) else mix
    args = argparse.Namespace(host=f"soak-{uuid.uuid4().hex[:8]}", nodes=nodes,
                              database_url=database_url, audit_interval=audit_interval)
    # The first audit creates the node records the workers claim against.
    settings = make_settings(args.host)
    store = Store(database_url, claim_retries=settings.claim_retries)
    ComputeService(args.host, make_driver(args.host, nodes, settings), store=store,
                   settings=settings).run_once()
    service = _child("service", args)
    _wait_for_first_pass(store, args.host, service)
    logs = [os.path.join(log_dir, f"{args.host}-worker{i}.jsonl") for i in range(processes)]
    workers = [_child("worker", args, worker_id=i, ops=ops, seconds=seconds,
                      seed=seed + i, log=logs[i], mix=_mix_text(mix))
               for i in range(processes)]
    problems = []
    done = 0
    for i, proc in enumerate(workers):
        summary, error = _collect(proc, timeout=seconds + 60)
        if error:
            problems.append(f"worker {i}: {error}")
        else:
            done += summary["ops"]
    service.send_signal(signal.SIGTERM)
    service_summary, error = _collect(service, timeout=60)
    if error:
        problems.append(f"service: {error}")
        service_summary = {"passes": 0, "repairs": []}
    problems += [f"the audit had to repair: {r}" for r in service_summary["repairs"]]
    entries = _read_logs(logs)
    problems += verify(store, args.host, nodes, entries, settings)
    store.close()
    counts = {}
    for e in entries:
        counts.setdefault(e["op"], {}).setdefault(e["result"], 0)
        counts[e["op"]][e["result"]] += 1
    return {"database": redact_url(database_url), "host": args.host, "processes": processes,
            "nodes": nodes, "seed": seed, "mix": mix, "ops_done": done, "by_op": counts,
            "audit_passes": service_summary["passes"],
            "seconds": round(time.monotonic() - started, 2), "logs": logs,
            "problems": problems}


def _wait_for_first_pass(store, host, service, timeout=60):
    """Start the workers once the service audits (its heartbeat moved on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and service.poll() is None:
        if any(s.host == host and s.report_count >= 2 for s in store.list_services()):
            return
        time.sleep(0.05)


def _mix_text(mix):
    return ",".join(f"{k}={v}" for k, v in mix.items())


def _read_logs(paths):
    entries = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                entries += [json.loads(line) for line in f if line.strip()]
        except OSError:
            pass
    return entries


def expected_books(entries):
    """Replay the logs: ``(instances, allocations)`` the records must hold.

    ``instances``: uuid -> (vm_state, node or None, flavor name);
    ``allocations``: (consumer uuid, node) -> {rc: amount}.
    """
    instances, migrations = {}, {}
    for e in sorted(entries, key=lambda e: (e["w"], e["seq"])):
        if e["result"] != "ok":
            continue
        op, u = e["op"], e.get("instance")
        if op == "claim":
            instances[u] = ["building", e["node"], e["flavor"]]
        elif op == "abort":
            instances[u] = ["building", None, e["flavor"]]
        elif op == "resize":
            migrations[e["migration"]] = {"instance": u, "source": e["source"],
                                          "dest": e["node"], "new": e["flavor"]}
        elif op in ("confirm", "revert"):
            mig = migrations.pop(e["migration"])
            same = mig["source"] == mig["dest"] and mig["new"] == instances[u][2]
            if op == "confirm" or same:   # equal flavors on one node: confirm wins
                instances[u][1:] = [mig["dest"], mig["new"]]
        elif op in ("delete", "offload"):
            for m in [m for m, v in migrations.items() if v["instance"] == u]:
                del migrations[m]
            if op == "delete":
                instances[u][0] = objects.DELETED
            else:
                instances[u][:2] = [objects.SHELVED_OFFLOADED, None]
    allocations = {}
    for u, (state, node, flavor) in instances.items():
        if node is not None and state not in objects.STATES_WITHOUT_RESOURCES:
            allocations[(u, node)] = requested(FLAVORS[flavor])
    for m, mig in migrations.items():
        allocations[(m, mig["dest"])] = requested(FLAVORS[mig["new"]])
    return instances, allocations


def _actual_allocations(store, host):
    names = {n.uuid: n.nodename for n in store.get_compute_nodes(host)}
    out = {}
    for a in store.list_allocations():
        if a.node_uuid in names:
            key = (a.consumer_uuid, names[a.node_uuid])
            if key in out:
                out[key] = "double"
            else:
                out[key] = dict(a.resources)
    return out


def verify(store, host, nodes, entries, settings):
    """Every difference between the records and the operations logs, as text."""
    problems = []
    instances, expected = expected_books(entries)
    actual = _actual_allocations(store, host)
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        if want is None:
            problems.append(f"orphaned allocation {key}: {got}")
        elif got is None:
            problems.append(f"lost allocation {key}: {want}")
        elif want != got:
            problems.append(f"allocation {key} holds {got}, the log says {want}")
    for e in entries:
        if e["op"] in ("claim", "abort") and e["result"] != "ok":
            try:
                row = store.get_instance(e["instance"])
                problems.append(f"claim of {e['instance']} was {e['result']} but left "
                                f"an instance row ({row.vm_state} on {row.node})")
            except NovaLiteError:
                pass
    for u, (state, node, flavor) in sorted(instances.items()):
        try:
            row = store.get_instance(u)
        except NovaLiteError:
            problems.append(f"instance {u} has no row")
            continue
        if (row.vm_state, row.node, row.flavor.name) != (state, node, flavor):
            problems.append(f"instance {u} is {row.vm_state} on {row.node} with "
                            f"{row.flavor.name}; the log says {state} on {node} with {flavor}")
    for node in store.get_compute_nodes(host):
        for rc, inv in node.inventories.items():
            if node.used(rc) > inv.capacity:
                problems.append(f"node {node.nodename} {rc} used {node.used(rc)} > "
                                f"capacity {inv.capacity}")
    # One more audit must find nothing to repair.
    driver = make_driver(host, nodes, settings)
    ResourceTracker(host, driver, store=store, settings=settings).update_available_resource()
    if _actual_allocations(store, host) != actual:
        problems.append("a final audit changed the allocations")
    return problems


# -- command line --------------------------------------------------------------------

def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value
    return parse


def build_parser():
    p = argparse.ArgumentParser(
        prog="bench/soak.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=_positive(int), default=4,
                   help="worker processes (default 4)")
    p.add_argument("--ops", type=_positive(int), default=500,
                   help="operations per worker at most (default 500)")
    p.add_argument("--seconds", type=_positive(float), default=120.0,
                   help="time bound of the workers (default 120)")
    p.add_argument("--database-url", default=None,
                   help="SQLAlchemy URL (default: a new SQLite file)")
    p.add_argument("--nodes", type=_positive(int), default=2, help="nodes of the host")
    p.add_argument("--mix", type=parse_mix, default=parse_mix(DEFAULT_MIX),
                   help=f"operation weights (default {DEFAULT_MIX})")
    p.add_argument("--audit-interval", type=_positive(float), default=0.2,
                   help="seconds between the service's audits (default 0.2)")
    p.add_argument("--seed", type=int, default=None, help="random seed of the workers")
    p.add_argument("--log-dir", default=None, help="where the operations logs go")
    # Internal: the child processes.
    p.add_argument("--role", choices=("main", "worker", "service"), default="main",
                   help=argparse.SUPPRESS)
    p.add_argument("--host", help=argparse.SUPPRESS)
    p.add_argument("--worker-id", type=int, help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.role == "worker":
        worker = Worker(args)
        done = worker.run(args.mix, time.monotonic() + args.seconds)
        print(json.dumps({"ops": done}))
        return 0
    if args.role == "service":
        print(json.dumps(run_service(args)))
        return 0
    summary = run_soak(args.database_url, processes=args.processes, ops=args.ops,
                       seconds=args.seconds, nodes=args.nodes, mix=args.mix,
                       audit_interval=args.audit_interval, seed=args.seed,
                       log_dir=args.log_dir)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
