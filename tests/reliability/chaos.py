"""A chaos worker: one process acting on shared nodes and instances at random,
logging every operation for :mod:`tests.reliability.history`.

``python -m tests.reliability.chaos URL LOG SEED OPS`` runs ``OPS``
operations and writes one JSON object a line to ``LOG``.  Any process may
act on any instance, through either of two hosts' trackers: claims (new
instances and unshelves), deletes, shelve-offloads, resizes (to any node),
confirms and reverts, and audits that grow or shrink a node or move it to
the other host (the driver reports a node uuid that does not depend on the
host, as a bare-metal node's does).  ``setup`` records both nodes on the
first host and prints their audit events, for the checker.

Every operation is logged whether it was admitted, refused (with the
generation its final decision saw) or failed with an error (which must have
written nothing: the checker finds any write nobody logged).
"""

import json
import os
import random
import sys
import uuid

import attrs

from nova_lite import conf, objects
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import NovaLiteError
from nova_lite.virt.fake import FakeMultiNodeDriver

HOSTS = ("chaos-a", "chaos-b")
NODES = ("n0", "n1")
SIZES = [dict(vcpus=8, memory_mb=8192, local_gb=80), dict(vcpus=4, memory_mb=4096, local_gb=40),
         dict(vcpus=12, memory_mb=16384, local_gb=120), dict(vcpus=2, memory_mb=2048,
                                                               local_gb=20)]
FLAVORS = [objects.Flavor(name=f"chaos.{v}.{m}.{d}", vcpus=v, memory_mb=m, root_gb=d)
           for v, m, d in ((1, 512, 5), (1, 1024, 10), (2, 2048, 10), (4, 4096, 20))]


class SharedNodesDriver(FakeMultiNodeDriver):
    """Fake nodes whose uuid is the node's own, whatever host reports them."""

    def node_uuid(self, nodename):
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"nova-lite-chaos/{nodename}"))


def settings(host):
    """Every amount is its own capacity: nothing reserved, ratios 1."""
    return conf.Settings(host=host, state_path="/tmp", reserved_host_memory_mb=0,
                         cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0,
                         disk_allocation_ratio=1.0)


def capacity(size):
    """The inventory capacities an audit of a node of ``size`` records."""
    return {"VCPU": size["vcpus"], "MEMORY_MB": size["memory_mb"],
            "DISK_GB": size["local_gb"]}


class Worker:
    """Two hosts' trackers on one store, and a log."""

    def __init__(self, url, log_path, seed):
        self.random = random.Random(seed)
        self.store = Store(url, busy_timeout=30)
        self.log = open(log_path, "a", buffering=1)
        self.pid = os.getpid()
        self.seq = 0
        self.sizes = {}
        self.trackers = {}
        for host in HOSTS:
            driver = SharedNodesDriver(settings=settings(host), nodes=list(NODES),
                                       **SIZES[0])
            driver.init_host(host)
            self.trackers[host] = ResourceTracker(host, driver, store=self.store,
                                                  settings=settings(host))

    def close(self):
        self.log.close()
        self.store.close()

    def write(self, **event):
        self.seq += 1
        self.log.write(json.dumps(dict(event, pid=self.pid, seq=self.seq), sort_keys=True)
                       + "\n")

    def node_uuid(self, nodename):
        return SharedNodesDriver.node_uuid(None, nodename)

    # -- operations ------------------------------------------------------------------
    def audit(self, host=None, node=None, size=None):
        host = host or self.random.choice(HOSTS)
        node = node or self.random.choice(NODES)
        size = size or self.random.choice(SIZES)
        rt = self.trackers[host]
        rt.driver.set_node_size(node, **size)
        try:
            result = rt.update_available_resource(nodename=node)
        except NovaLiteError as exc:
            return self.write(op="audit", host=host, node=node, result="error", error=str(exc))
        if node not in result.generations:
            return self.write(op="audit", host=host, node=node, result="error",
                              error=str(result.failed))
        self.write(op="audit", host=host, node=node, node_uuid=self.node_uuid(node),
                   capacity=capacity(size), generation=result.generations[node], result="ok")

    def _claim(self, op, host, node, instance, flavor, call):
        amounts = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb,
                   "DISK_GB": flavor.root_gb}
        base = dict(op=op, host=host, node=node, node_uuid=self.node_uuid(node),
                    instance=instance.uuid, amounts=amounts)
        try:
            claim = call()
        except ComputeResourcesUnavailable as exc:
            return self.write(**base, result="refused", generation=exc.generation,
                              reasons=exc.reasons)
        except NovaLiteError as exc:
            return self.write(**base, result="error", error=f"{type(exc).__name__}: {exc}")
        consumer = claim.migration.uuid if claim.migration is not None else instance.uuid
        self.write(**base, consumer=consumer, generation=claim.generation, result="admitted")

    def claim(self):
        host, node = self.random.choice(HOSTS), self.random.choice(NODES)
        flavor = self.random.choice(FLAVORS)
        instance = objects.Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id="chaos",
                                    vm_state="building")
        self._claim("claim", host, node, instance, flavor,
                    lambda: self.trackers[host].instance_claim(instance, node))

    def _pick(self, live=True):
        candidates = [i for i in self.store.list_instances(live_only=False)
                      if (i.vm_state not in objects.STATES_WITHOUT_RESOURCES) == live]
        return self.random.choice(candidates) if candidates else None

    def unshelve(self):
        stored = self._pick(live=False)
        if stored is None or stored.vm_state != objects.SHELVED_OFFLOADED:
            return
        host, node = self.random.choice(HOSTS), self.random.choice(NODES)
        instance = attrs.evolve(stored, task_state="spawning")
        claims = []
        self._claim("unshelve", host, node, instance, instance.flavor,
                    lambda: claims.append(self.trackers[host].instance_claim(instance, node))
                    or claims[0])
        if claims:   # spawned: active again (holds what it held; no generation moves)
            try:
                self.trackers[host].update_usage(attrs.evolve(
                    claims[0].instance, vm_state=objects.ACTIVE, task_state=None))
            except NovaLiteError:
                pass   # deleted meanwhile: deleted is final

    def resize(self):
        stored = self._pick()
        if stored is None:
            return
        host, node = self.random.choice(HOSTS), self.random.choice(NODES)
        flavor = self.random.choice(FLAVORS)
        self._claim("resize", host, node, stored, flavor,
                    lambda: self.trackers[host].resize_claim(stored, flavor, node))

    def _released(self, op, instance, call, **extra):
        try:
            released = call()
        except NovaLiteError as exc:
            return self.write(op=op, instance=instance, result="error",
                              error=f"{type(exc).__name__}: {exc}", **extra)
        self.write(op=op, instance=instance, result="ok", generations=released.generations,
                   migration=released.migration_uuid, **extra)

    def free(self, state):
        stored = self._pick()
        if stored is None:
            return
        rt = self.trackers[self.random.choice(HOSTS)]
        self._released("free", stored.uuid,
                       lambda: rt.update_usage(attrs.evolve(stored, vm_state=state)),
                       state=state)

    def finish_resize(self):
        moving = self.store.list_migrations(in_progress_only=True)
        if not moving:
            return
        migration = self.random.choice(moving)
        try:
            stored = self.store.get_instance(migration.instance_uuid)
        except NovaLiteError:
            return
        confirm = self.random.random() < 0.5
        node, flavor = ((migration.source_node, migration.old_flavor) if confirm
                        else (migration.dest_node, migration.new_flavor))
        owner = next((n.host for n in self.store.get_compute_nodes() if n.nodename == node),
                     HOSTS[0])
        rt = self.trackers.get(owner, self.trackers[HOSTS[0]])
        self._released("confirm" if confirm else "revert", stored.uuid,
                       lambda: rt.drop_move_claim(stored, node, flavor))

    def step(self):
        roll = self.random.random()
        if roll < 0.35:
            self.claim()
        elif roll < 0.47:
            self.free(objects.DELETED)
        elif roll < 0.52:
            self.free(objects.SHELVED_OFFLOADED)
        elif roll < 0.57:
            self.unshelve()
        elif roll < 0.72:
            self.resize()
        elif roll < 0.87:
            self.finish_resize()
        else:
            self.audit()


def records(store):
    """What the checker compares the history with, read after every worker stopped."""
    usage = {n.uuid: dict(n.usage) for n in store.get_compute_nodes()}
    deleted = {i.uuid for i in store.list_instances(live_only=False)
               if i.vm_state == objects.DELETED}
    holding = sorted({a.instance_uuid for a in store.list_allocations()} & deleted)
    moving = {}
    for migration in store.list_migrations(in_progress_only=True):
        moving[migration.instance_uuid] = moving.get(migration.instance_uuid, 0) + 1
    return {"usage": usage, "deleted_holding": holding,
            "double_moves": sorted(u for u, n in moving.items() if n > 1)}


def main(argv):
    command, url, log_path = argv[0], argv[1], argv[2]
    worker = Worker(url, log_path, seed=int(argv[3]) if len(argv) > 3 else 0)
    try:
        if command == "setup":
            for node in NODES:
                worker.audit(host=HOSTS[0], node=node, size=SIZES[0])
        else:
            print("ready", flush=True)
            for _ in range(int(argv[4])):
                worker.step()
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
