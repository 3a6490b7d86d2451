"""A chaos worker: one process acting on shared nodes and instances at random,
logging every operation for :mod:`tests.reliability.history`.

``python -m tests.reliability.chaos work URL LOG SEED OPS`` runs ``OPS``
operations and writes one JSON object a line to ``LOG``.  Any process may
act on any instance, through either of two hosts' trackers: claims (new
instances and unshelves), deletes, shelve-offloads, resizes (to any node),
confirms and reverts, and audits that grow or shrink a node or move it to
the other host (the driver reports a node uuid that does not depend on the
host, as a bare-metal node's does).  ``setup`` records both nodes on the
first host and prints their audit events, for the checker.

Every node has two GPUs (child resource providers of ``VGPU`` inventory,
:data:`GPUS`: small and unequal, so they fill and claims are refused);
half the flavors ask ``resources:VGPU``, which a claim lands on one
GPU.  Each claim logs the child amounts it asked (``child_amounts``) and
where they landed (``providers``, the allocation's); each audit logs the
GPUs' capacities it reported (``children``), and an audit now and then
shrinks or grows a GPU (:data:`GPU_SIZES`) as it does the node.

Every node also reports PCI devices (:data:`PCI_DEVICES`: two ``type-PCI``
devices of one vendor/product and a PF with 2 VFs) with ``[pci]
report_in_placement`` on, so each is a child provider too (the VFs' one,
named after the PF, holds 2 units); ``[pci] alias`` names ``dev`` and
``vf``, and 30% of the flavors of claims and resizes ask one or two of
either with ``pci_passthrough:alias``.  A claim picks the devices (not "most
room"): it logs the units it asked per class (``pci_amounts``) and the
devices it picked (``pci_devices``, the allocation's addresses); an audit
logs the device providers' capacities among ``children`` and where each
device is counted (``pci_holders``, written out in :data:`PCI_HOLDERS`, not
derived by the product).

``churn`` is the mix run beside heal: no audits (an audit repairs
allocations too, which the history could not account for), unshelves that
stay offloaded with any task state until a later ``spawn``, and leaks (an
instance of its own marked deleted without freeing it, for heal to find).
Each churn worker first makes two consumers that live all along and that no
other worker touches (an unshelve placed but not spawned, a move in
progress), so that the last heal pass always has live consumers to leave
alone, a move it ends itself (so every run ends one), one leak holding a
vGPU and one holding a VF, so that heal always
frees one on a GPU and one on a PCI device provider (three later leaks in
four hold a vGPU or a device too).  Its ``setup-split`` gives each
host one node; both services beat.  :mod:`tests.reliability.healer` heals
beside it, in processes of its own.

A ``work`` run opens by pressing on its node (:meth:`Worker.press`):
claims asking both devices of a kind, then 2 vGPUs, until one of each is
refused, so every run has refusals of both kinds among its concurrent
claims.

Every operation is logged whether it was admitted, refused (with the
generation its final decision saw) or failed with an error (which must have
written nothing: the checker finds any write nobody logged).
"""

import json
import os
import random
import sys
import time
import uuid

import attrs
import sqlalchemy as sa

from nova_lite import conf, objects
from nova_lite.compute import moves
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, models
from nova_lite.exception import NovaLiteError
from nova_lite.objects import PciDevice
from nova_lite.pci_alias import flavor_pci_requests
from nova_lite.providers import NODE_CLASSES, ChildProvider
from nova_lite.resources import Inventory
from nova_lite.virt.fake import FakeMultiNodeDriver
from tests.base import write_instance_row
from tests.reliability import history

HOSTS = ("chaos-a", "chaos-b")
NODES = ("n0", "n1")
SIZES = [dict(vcpus=8, memory_mb=8192, local_gb=80), dict(vcpus=4, memory_mb=4096, local_gb=40),
         dict(vcpus=12, memory_mb=16384, local_gb=120), dict(vcpus=2, memory_mb=2048,
                                                               local_gb=20)]
#: Project of the instances a churn worker leaks: no other operation picks them.
LEAK_PROJECT = "chaos-leak"
#: Project of the instances a churn worker keeps live all along: no other picks them.
KEPT_PROJECT = "chaos-kept"
#: task_states an unshelve claim is made with (a claim places the instance, whatever its task).
UNSHELVE_TASKS = ("spawning", "unshelving", None)
#: The size of each node of a churn (one per host).
CHURN_SIZE = dict(vcpus=24, memory_mb=24576, local_gb=240)
#: vGPUs of each GPU of a chaos node (``{GPU: vGPUs}``), named ``<node>_<GPU>``.
GPUS = {"gpu0": 3, "gpu1": 2}
#: What an audit reports of the GPUs: mostly :data:`GPUS`, now and then one shrunk or grown.
GPU_SIZES = [GPUS, GPUS, GPUS, {"gpu0": 1, "gpu1": 2}, {"gpu0": 3, "gpu1": 4},
             {"gpu0": 2, "gpu1": 1}]
FLAVORS = [objects.Flavor(name=f"chaos.{v}.{m}.{d}", vcpus=v, memory_mb=m, root_gb=d)
           for v, m, d in ((1, 512, 5), (1, 1024, 10), (2, 2048, 10), (4, 4096, 20))]
#: Flavors asking vGPUs (an amount lands whole on one GPU); half the claims use one.
VGPU_FLAVORS = [objects.Flavor(name=f"chaos.vgpu{g}", vcpus=1, memory_mb=512, root_gb=5,
                               extra_specs={"resources:VGPU": str(g)}) for g in (1, 2)]

#: PCI device classes (``CUSTOM_PCI_<VENDOR>_<PRODUCT>``) of the chaos nodes' devices.
DEV_CLASS, PF_CLASS, VF_CLASS = ("CUSTOM_PCI_10DE_1EB8", "CUSTOM_PCI_8086_1572",
                                 "CUSTOM_PCI_8086_154C")
#: Every chaos node's PCI devices: two of one vendor/product and a PF with 2 VFs.
PCI_DEVICES = (
    PciDevice(address="0000:81:00.0", vendor_id="10de", product_id="1eb8"),
    PciDevice(address="0000:82:00.0", vendor_id="10de", product_id="1eb8"),
    PciDevice(address="0000:83:00.0", vendor_id="8086", product_id="1572", dev_type="type-PF"),
    *(PciDevice(address=f"0000:83:02.{i}", vendor_id="8086", product_id="154c",
                dev_type="type-VF", parent_addr="0000:83:00.0") for i in range(2)))
#: Where each device is counted, written out here (not derived by the product):
#: ``{address: (provider address, class)}``; a provider is named ``<node>_<address>``.
PCI_HOLDERS = {"0000:81:00.0": ("0000:81:00.0", DEV_CLASS),
               "0000:82:00.0": ("0000:82:00.0", DEV_CLASS),
               "0000:83:00.0": ("0000:83:00.0", PF_CLASS),
               "0000:83:02.0": ("0000:83:00.0", VF_CLASS),
               "0000:83:02.1": ("0000:83:00.0", VF_CLASS)}
#: ``[pci] alias`` of the chaos hosts, and the class each alias is counted in.
PCI_ALIAS = json.dumps([
    {"name": "dev", "vendor_id": "10de", "product_id": "1eb8", "device_type": "type-PCI"},
    {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}])
ALIAS_CLASSES = {"dev": DEV_CLASS, "vf": VF_CLASS}
#: Flavors asking PCI devices (``pci_passthrough:alias``); 30% of the claims use one.
PCI_FLAVORS = [objects.Flavor(name=f"chaos.pci.{spec.replace(':', '')}", vcpus=1,
                              memory_mb=512, root_gb=5,
                              extra_specs={"pci_passthrough:alias": spec})
               for spec in ("dev:1", "dev:2", "vf:1", "vf:2")]


class SharedNodesDriver(FakeMultiNodeDriver):
    """Fake nodes whose uuid is the node's own, whatever host reports them."""

    def node_uuid(self, nodename):
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"nova-lite-chaos/{nodename}"))


def gpus(node, sizes=GPUS):
    """The child providers of ``node``: one GPU of ``VGPU`` inventory per item of ``sizes``."""
    return [ChildProvider(name=f"{node}_{gpu}", inventories={"VGPU": Inventory(total=n)})
            for gpu, n in sorted(sizes.items())]


def child_capacity(node, sizes):
    """``{child name: {rc: capacity}}`` an audit of ``node`` with GPUs ``sizes``
    records: its GPUs and its PCI device providers (one unit per device)."""
    out = {f"{node}_{gpu}": {"VGPU": n} for gpu, n in sorted(sizes.items())}
    for provider, rc in PCI_HOLDERS.values():
        per = out.setdefault(f"{node}_{provider}", {})
        per[rc] = per.get(rc, 0) + 1
    return out


def pci_holders(node):
    """``{address: [provider name, rc]}`` of the PCI devices of ``node``."""
    return {address: [f"{node}_{provider}", rc]
            for address, (provider, rc) in sorted(PCI_HOLDERS.items())}


def pci_request(flavor):
    """``{rc: devices}`` ``flavor`` asks with ``pci_passthrough:alias``."""
    out = {}
    spec = (flavor.extra_specs or {}).get("pci_passthrough:alias", "")
    for item in filter(None, (part.strip() for part in spec.split(","))):
        alias, _, count = item.partition(":")
        rc = ALIAS_CLASSES[alias]
        out[rc] = out.get(rc, 0) + int(count or 1)
    return out


def child_request(flavor):
    """``{rc: amount}`` of ``flavor``'s classes only children offer (its ``resources:`` specs)."""
    out = {}
    for key, value in (flavor.extra_specs or {}).items():
        if key.startswith("resources:") and key[len("resources:"):] not in NODE_CLASSES:
            out[key[len("resources:"):]] = int(value)
    return out


def node_owners(store):
    """``{nodename: host}`` of the compute node records, from one statement.

    Only the owners: a worker asks whose tracker ends a move, and reads no
    usage for it (``Store.get_compute_nodes`` sums a node's usage over two
    statements, which on PostgreSQL may see two states beside a claim).
    """
    T = models.compute_nodes
    return store.db.read("chaos node owners", lambda conn: {
        r.nodename: r.host for r in conn.execute(sa.select(T.c.nodename, T.c.host))})


def settings(host, **extra):
    """Every amount is its own capacity: nothing reserved, ratios 1."""
    return conf.Settings(host=host, state_path="/tmp", reserved_host_memory_mb=0,
                         cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0,
                         disk_allocation_ratio=1.0, pci_alias=PCI_ALIAS,
                         pci_report_in_placement=True, **extra)


def holds(instance):
    """Whether the record of ``instance`` holds resources (the history's rule)."""
    return history.holds_resources(instance.vm_state, instance.node)


def capacity(size):
    """The inventory capacities an audit of a node of ``size`` records."""
    return {"VCPU": size["vcpus"], "MEMORY_MB": size["memory_mb"],
            "DISK_GB": size["local_gb"]}


class EventLog:
    """A process with a store and a JSON-lines log of its events, numbered by
    (pid, seq) for :mod:`tests.reliability.history`."""

    def open_log(self, log_path):
        self.log = open(log_path, "a", buffering=1)
        self.pid = os.getpid()
        self.seq = 0

    def close(self):
        self.log.close()
        self.store.close()

    def write(self, **event):
        self.seq += 1
        self.log.write(json.dumps(dict(event, pid=self.pid, seq=self.seq), sort_keys=True)
                       + "\n")


class Worker(EventLog):
    """Two hosts' trackers on one store, and a log."""

    def __init__(self, url, log_path, seed):
        self.random = random.Random(seed)
        self.store = Store(url, busy_timeout=30)
        self.open_log(log_path)
        self.churn = False   # the mix run beside heal (``churn``)
        self.seed = seed
        self.refused_for = []   # the reasons of this worker's last refused claim
        self.steps = 0
        self.sizes = {}
        self.trackers = {}
        for host in HOSTS:
            driver = SharedNodesDriver(settings=settings(host), nodes=list(NODES),
                                       pci_devices=PCI_DEVICES, **SIZES[0])
            driver.init_host(host)
            for node in NODES:
                driver.set_node_providers(node, gpus(node))
            self.trackers[host] = ResourceTracker(host, driver, store=self.store,
                                                  settings=settings(host))

    def node_uuid(self, nodename):
        return SharedNodesDriver.node_uuid(None, nodename)

    # -- operations ------------------------------------------------------------------
    def audit(self, host=None, node=None, size=None, gpu_sizes=None):
        host = host or self.random.choice(HOSTS)
        node = node or self.random.choice(NODES)
        size = size or self.random.choice(SIZES)
        gpu_sizes = gpu_sizes or self.random.choice(GPU_SIZES)
        rt = self.trackers[host]
        rt.driver.set_node_size(node, **size)
        rt.driver.set_node_providers(node, gpus(node, gpu_sizes))
        try:
            result = rt.update_available_resource(nodename=node)
        except NovaLiteError as exc:
            return self.write(op="audit", host=host, node=node, result="error", error=str(exc))
        if node not in result.generations:
            return self.write(op="audit", host=host, node=node, result="error",
                              error=str(result.failed))
        self.write(op="audit", host=host, node=node, node_uuid=self.node_uuid(node),
                   capacity=capacity(size), children=child_capacity(node, gpu_sizes),
                   pci_holders=pci_holders(node), generation=result.generations[node], result="ok")

    def _claim(self, op, host, node, instance, flavor, call):
        amounts = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb,
                   "DISK_GB": flavor.root_gb}
        base = dict(op=op, host=host, node=node, node_uuid=self.node_uuid(node),
                    instance=instance.uuid, amounts=amounts, child_amounts=child_request(flavor),
                    pci_amounts=pci_request(flavor))
        try:
            claim = call()
        except ComputeResourcesUnavailable as exc:
            self.refused_for = list(exc.reasons)
            return self.write(**base, result="refused", generation=exc.generation,
                              reasons=exc.reasons)
        except NovaLiteError as exc:
            return self.write(**base, result="error", error=f"{type(exc).__name__}: {exc}")
        consumer = claim.migration.uuid if claim.migration is not None else instance.uuid
        providers = {name: dict(per) for name, per in claim.allocation.providers.items()}
        self.write(**base, consumer=consumer, generation=claim.generation, result="admitted",
                   providers=providers, pci_devices=list(claim.allocation.pci_devices))
        return claim

    def flavor(self):
        """A flavor for a claim or a resize: one asking vGPUs half the
        time, one asking PCI devices 30% of the time."""
        roll = self.random.random()
        return self.random.choice(VGPU_FLAVORS if roll < 0.5 else PCI_FLAVORS if roll < 0.8
                                  else FLAVORS)

    def _place(self, node=None):
        """A host and ``node`` (default one at random) to claim on (in a
        churn, each host claims on its own node)."""
        node = node or self.random.choice(NODES)
        if self.churn:
            return HOSTS[NODES.index(node)], node
        return self.random.choice(HOSTS), node

    def claim(self, project="chaos", flavor=None, node=None):
        host, node = self._place(node)
        flavor = flavor or self.flavor()
        instance = objects.Instance(
            uuid=str(uuid.uuid4()), flavor=flavor, project_id=project, vm_state="building",
            pci_requests=flavor_pci_requests(flavor.extra_specs,
                                             self.trackers[host].settings.pci_aliases))
        return self._claim("claim", host, node, instance, flavor,
                           lambda: self.trackers[host].instance_claim(instance, node))

    def _pick(self, live=True, test=None):
        if test is None:
            def test(i):
                return (i.vm_state not in objects.STATES_WITHOUT_RESOURCES) == live
        candidates = [i for i in self.store.list_instances(live_only=False)
                      if i.project_id not in (LEAK_PROJECT, KEPT_PROJECT) and test(i)]
        return self.random.choice(candidates) if candidates else None

    def unshelve(self, stored=None, task=None, spawn=None):
        if stored is not None:
            pass
        elif self.churn:
            stored = self._pick(test=lambda i: i.vm_state == objects.SHELVED_OFFLOADED
                                and i.node is None)
            task = self.random.choice(UNSHELVE_TASKS)
        else:
            stored, task = self._pick(live=False), "spawning"
        if stored is None or stored.vm_state != objects.SHELVED_OFFLOADED:
            return
        host, node = self._place()
        instance = attrs.evolve(stored, task_state=task)
        claim = self._claim("unshelve", host, node, instance, instance.flavor,
                            lambda: self.trackers[host].instance_claim(instance, node))
        # Spawned at once (a churn leaves half of them placed but offloaded
        # for a later spawn): active again, holding what it held.
        if spawn is None:
            spawn = not self.churn or self.random.random() < 0.5
        if claim is not None and spawn:
            self._spawn(host, claim.instance)
        return claim

    def _spawn(self, host, instance):
        try:   # no generation moves: the claim is what it holds
            self.trackers[host].update_usage(attrs.evolve(
                instance, vm_state=objects.ACTIVE, task_state=None))
        except NovaLiteError as exc:
            return self.write(op="spawn", instance=instance.uuid, result="error",
                              error=f"{type(exc).__name__}: {exc}")
        self.write(op="spawn", instance=instance.uuid, result="ok")

    def spawn(self):
        """Finish an unshelve left offloaded on its node."""
        stored = self._pick(test=lambda i: i.vm_state == objects.SHELVED_OFFLOADED
                            and i.node is not None)
        if stored is not None:
            self._spawn(self.random.choice(HOSTS), stored)

    def leak(self, flavor=None):
        """Claim an instance of our own (of ``flavor``, default a small one with
        or without a vGPU or a PCI device), then mark it deleted without
        freeing it; returns the claim."""
        claim = self.claim(project=LEAK_PROJECT, flavor=flavor or self.random.choice(
            (FLAVORS[0], VGPU_FLAVORS[0], PCI_FLAVORS[0], PCI_FLAVORS[2])))
        if claim is None:
            return None
        started = time.time()
        write_instance_row(self.store, attrs.evolve(claim.instance, vm_state=objects.DELETED))
        self.write(op="leak", instance=claim.instance.uuid, result="ok", started=started,
                   ended=time.time())
        return claim

    def heartbeat(self):
        for host in HOSTS:
            self.store.heartbeat(host)

    def resize(self, stored=None, flavor=None):
        stored = stored or self._pick()
        if stored is None:
            return
        host, node = self._place()
        flavor = flavor or self.flavor()
        rt = self.trackers[host]
        asking = attrs.evolve(stored, pci_requests=moves.resize_pci_requests(
            stored, flavor, rt.settings))
        return self._claim("resize", host, node, stored, flavor,
                           lambda: rt.resize_claim(asking, flavor, node))

    def _released(self, op, instance, call, **extra):
        try:
            released = call()
        except NovaLiteError as exc:
            return self.write(op=op, instance=instance, result="error",
                              error=f"{type(exc).__name__}: {exc}", **extra)
        if released.migration_uuid is not None:   # what became of it (final: read after)
            extra["status"] = next((m.status for m in self.store.list_migrations(instance)
                                    if m.uuid == released.migration_uuid), None)
        self.write(op=op, instance=instance, result="ok", generations=released.generations,
                   migration=released.migration_uuid, **extra)

    def free(self, state, stored=None):
        stored = stored or (self._pick(test=holds) if self.churn else self._pick())
        if stored is None:
            return
        rt = self.trackers[self.random.choice(HOSTS)]
        gone = attrs.evolve(stored, vm_state=state,
                            task_state=None if self.churn else stored.task_state)
        self._released("free", stored.uuid, lambda: rt.update_usage(gone), state=state)

    def finish_resize(self, instance_uuid=None):
        """Confirm or revert (at random) a move in progress: ``instance_uuid``'s,
        else any but those of a churn's kept instances."""
        if instance_uuid is not None:
            moving = self.store.list_migrations(instance_uuid=instance_uuid,
                                                in_progress_only=True)
        else:
            kept = {i.uuid for i in self.store.list_instances(live_only=False)
                    if i.project_id == KEPT_PROJECT} if self.churn else set()
            moving = [m for m in self.store.list_migrations(in_progress_only=True)
                      if m.instance_uuid not in kept]
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
        owner = node_owners(self.store).get(node, HOSTS[0])
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

    def churn_step(self):
        """One operation of the mix run beside heal (no audits)."""
        if self.steps % 20 == 0:   # both services stay up: heal ends no move
            self.heartbeat()
        self.steps += 1
        roll = self.random.random()
        for share, op in ((0.22, self.claim), (0.16, lambda: self.free(objects.DELETED)),
                          (0.08, lambda: self.free(objects.SHELVED_OFFLOADED)),
                          (0.11, self.unshelve), (0.05, self.spawn), (0.17, self.resize),
                          (0.16, self.finish_resize), (0.05, self.leak)):
            if roll < share:
                return op()
            roll -= share
        return None

    def press(self, tries=8):
        """Open a run by claiming on this worker's node (the workers share the
        two nodes evenly) until a claim is refused for want of a PCI device,
        and then until one is refused for want of a GPU with room.

        Every run so has, among its concurrent claims, devices and vGPUs
        landed on each node's child providers (the second device of a kind
        too) and refusals of both kinds, whatever the random mix does
        later: a run left to chance missed one of them about one time in
        ten.  ``tries`` bounds each: another worker may free a holder
        between two claims.
        """
        node = NODES[self.seed % len(NODES)]
        for flavor, wanted in ((PCI_FLAVORS[1], "Claim pci failed"),
                               (VGPU_FLAVORS[1], "no child provider has room")):
            for _ in range(tries):
                self.refused_for = []
                if (self.claim(flavor=flavor, node=node) is None
                        and any(wanted in reason for reason in self.refused_for)):
                    break

    def keep(self):
        """Start a churn with two consumers heal must never free, that no other
        worker touches: an unshelve placed but not spawned (task ``unshelving``)
        and a move in progress; then end a move of its own (no other worker
        touches that one either: a run left to the mix ended none about one
        time in twenty-five); then leak an instance holding a vGPU and one
        holding a VF.  Deletes make room where a claim is refused."""
        placed = self._with_room(lambda: self.claim(project=KEPT_PROJECT, flavor=FLAVORS[0]))
        if placed is not None:
            uuid_ = placed.instance.uuid
            self.free(objects.SHELVED_OFFLOADED, stored=self.store.get_instance(uuid_))
            self._with_room(lambda: self.unshelve(stored=self.store.get_instance(uuid_),
                                                  task="unshelving", spawn=False))
        moved = self._with_room(lambda: self.claim(project=KEPT_PROJECT, flavor=FLAVORS[0]))
        if moved is not None:
            self._with_room(lambda: self.resize(self.store.get_instance(moved.instance.uuid),
                                                flavor=FLAVORS[0]))
        # And one move of its own ended (confirmed or reverted), so every
        # run ends a move whatever the mix picks later: no other worker
        # touches it, and both services are up (heal ends no move).
        ended = self._with_room(lambda: self.claim(project=KEPT_PROJECT, flavor=FLAVORS[0]))
        if ended is not None and self._with_room(lambda: self.resize(
                self.store.get_instance(ended.instance.uuid), flavor=FLAVORS[0])) is not None:
            self.finish_resize(instance_uuid=ended.instance.uuid)
        # And one leak on a GPU and one on a PCI device (a VF), so heal
        # always has a vGPU and a device to free.
        self._with_room(lambda: self.leak(flavor=VGPU_FLAVORS[0]))
        self._with_room(lambda: self.leak(flavor=PCI_FLAVORS[2]))

    def _with_room(self, attempt, tries=8):
        """``attempt()`` until it gives a claim, deleting an instance after each refusal."""
        for _ in range(tries):
            claim = attempt()
            if claim is not None:
                return claim
            self.free(objects.DELETED)
        return None


def records(store):
    """What the checker compares the history with, read after every worker stopped."""
    nodes = store.get_compute_nodes()
    usage = {n.uuid: dict(n.usage) for n in nodes}
    provider_usage = {n.uuid: {name: dict(per) for name, per in n.provider_usage.items()}
                      for n in nodes}
    children = {node_uuid: {c.provider.name: c.generation for c in found}
                for node_uuid, found in store.child_providers([n.uuid for n in nodes]).items()}
    names = {n.uuid: n.nodename for n in nodes}
    every = store.list_instances(live_only=False)
    deleted = {i.uuid for i in every if i.vm_state == objects.DELETED}
    allocations = store.list_allocations()
    holding = sorted({a.instance_uuid for a in allocations} & deleted)
    moving = {}
    migrations = store.list_migrations(in_progress_only=True)
    for migration in migrations:
        moving[migration.instance_uuid] = moving.get(migration.instance_uuid, 0) + 1
    return {"usage": usage, "provider_usage": provider_usage, "children": children,
            "deleted_holding": holding,
            "double_moves": sorted(u for u, n in moving.items() if n > 1),
            "instances": [dict(uuid=i.uuid, vm_state=i.vm_state, task_state=i.task_state,
                               host=i.host, node=i.node) for i in every],
            "migrations": [dict(uuid=m.uuid, instance=m.instance_uuid, status=m.status,
                                dest_compute=m.dest_compute, dest_node=m.dest_node)
                           for m in migrations],
            "allocations": [[a.consumer_uuid, names.get(a.node_uuid, a.node_uuid)]
                            for a in allocations]}


def main(argv):
    command, url, log_path = argv[0], argv[1], argv[2]
    seed = int(argv[3]) if len(argv) > 3 else 0
    worker = Worker(url, log_path, seed=seed)
    worker.churn = command in ("churn", "setup-split")
    try:
        if command == "setup":
            for node in NODES:
                worker.audit(host=HOSTS[0], node=node, size=SIZES[0], gpu_sizes=GPUS)
        elif command == "setup-split":
            worker.heartbeat()
            for host, node in zip(HOSTS, NODES):
                worker.audit(host=host, node=node, size=CHURN_SIZE, gpu_sizes=GPUS)
        else:
            print("ready", flush=True)
            if worker.churn:
                worker.keep()
            else:
                worker.press()
            step = worker.churn_step if worker.churn else worker.step
            for _ in range(int(argv[4])):
                step()
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
