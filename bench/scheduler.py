"""Scheduler: ``select_destinations`` among N hosts with the default filters.

Set-up: one ``fake.multinode`` audit records N nodes (Nova's default fake
sizes); each node is then given its own host and compute service row, so
there are N hosts, each with a live heartbeat.  Timed:

- ``cold``: a new HostManager's first request (reads every node);
- ``steady``: back-to-back requests, nothing changed in the records (the
  view asks the change sequence what changed: nothing);
- ``after_claim``: a request after one real claim changed one node (the
  view re-reads that node only);
- ``after_1pct``: a request after 1% of the nodes changed, three times:
  every hundredth node is given an allocation (1 VCPU, 512 MB, 1 GB) and
  its generation bumped, in one transaction of two statements, as that
  many claims elsewhere would change them (their usage moves, so the
  scheduler's orders move; the database's triggers move their change
  sequence as a claim's bump does).

The default filters run (ComputeFilter, RamFilter, CoreFilter, DiskFilter,
ResourceClassFilter, NUMATopologyFilter, PciPassthroughFilter) and the RAM, CPU and disk weighers.

With ``"traits"``, every node reports 20 traits (two standard CPU traits
and 18 custom ones) and the steady requests are also timed for a flavor
that requires two of them (``traits_steady``, and ``traits_ratio``: its
median over the plain flavor's): ``"every"`` node has both,
``"one_in_ten"`` only every tenth node (the others lack them, so the
scheduler reads further down its orders).  ``"vgpus"``: every node also
has 8 GPUs (child providers of 16 vGPUs each), and the timed flavor asks
for the two traits and ``resources:VGPU=1`` (``vgpu_steady``;
``vgpu_ratio``: its median over the plain flavor's, goal at most 2).
"""

import sys
import time
import uuid

from bench import common

NAME = "scheduler"
DEFAULT_SIZES = [1000, 10000]
TINY_SIZES = [4]
STORES = ("sqlite-file",)
TARGETS = {"10000 hosts": {"steady_median_ms": "<= 20",
                           "traits_ratio (2 required traits)": "<= 2",
                           "vgpu_ratio (2 required traits, VGPU=1, 8 GPUs per node)": "<= 2"}}
#: GPUs per node and vGPUs per GPU with "vgpus".
GPUS, VGPUS_PER_GPU = 8, 16
#: The traits every node reports with "traits" (20), the first two required.
TRAITS = ("HW_CPU_X86_AVX2", "CUSTOM_RACK_A", "HW_CPU_X86_SSE42",
          *(f"CUSTOM_T{i:02d}" for i in range(17)))


def cases(sizes):
    found = []
    for n in sizes:
        for store in STORES:
            base = {"store": store, "nodes": n, "repeat": 50 if n <= 10000 else 10}
            found += [base, dict(base, traits="every"), dict(base, traits="one_in_ten"),
                      dict(base, traits="every", vgpus=True)]
    return found


def _spread_hosts(store, count):
    """Give every node its own host and a live compute service row."""
    import sqlalchemy as sa

    from nova_lite.db import models
    from nova_lite.db.store import COMPUTE_BINARY

    nodes, services = models.compute_nodes, models.services
    now = time.time()

    def op(conn):
        conn.execute(nodes.update().values(host=sa.literal("h-") + nodes.c.nodename))
        conn.execute(services.delete())
        names = [r.nodename for r in conn.execute(sa.select(nodes.c.nodename))]
        conn.execute(services.insert(), [
            {"host": f"h-{n}", "binary": COMPUTE_BINARY, "created_at": now, "updated_at": now,
             "report_count": 1, "disabled": False} for n in names])
        return len(names)
    return store.db.write("bench: spread hosts", op)


def _claim_on_every_hundredth(store, round_no):
    """Give every hundredth node (1%) a new allocation and bump its generation,
    in one transaction: the usage and generation that many claims leave."""
    import sqlalchemy as sa

    from nova_lite.db import models
    nodes, allocs = models.compute_nodes, models.allocations
    picked = sa.select(nodes.c.uuid).where(nodes.c.id % 100 == 0)
    consumer = sa.literal(f"b{round_no % 10}-") + sa.func.substr(nodes.c.uuid, 1, 33)

    def op(conn):
        conn.execute(allocs.insert().from_select(
            ["consumer_uuid", "node_uuid", "consumer_type", "instance_uuid", "vcpu", "pcpu",
             "memory_mb", "disk_gb", "flavor", "created_at"],
            sa.select(consumer, nodes.c.uuid, sa.literal("instance"), consumer, sa.literal(1),
                      sa.literal(0), sa.literal(512), sa.literal(1), sa.literal("{}"),
                      sa.literal(time.time())).where(nodes.c.uuid.in_(picked))))
        conn.execute(nodes.update().where(nodes.c.id % 100 == 0).values(
            generation=nodes.c.generation + 1))
    store.db.write("bench: claims on 1%", op)


def run_case(case):
    from nova_lite import conf, objects
    from nova_lite.compute.resource_tracker import ResourceTracker
    from nova_lite.db import Store
    from nova_lite.scheduler import HostManager
    from nova_lite.virt import loader

    settings = conf.Settings(service_down_time=3600)
    names = [f"node-{i:06d}" for i in range(case["nodes"])]
    driver = loader.load_driver("fake.multinode", settings=settings, nodes=names)
    driver.init_host(common.HOST)
    flavor = objects.Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)
    traited = objects.Flavor(name="m1.small.rack-a", vcpus=1, memory_mb=2048, root_gb=20,
                             extra_specs={f"trait:{t}": "required" for t in TRAITS[:2]})
    vgpu_flavor = objects.Flavor(name="m1.small.vgpu", vcpus=1, memory_mb=2048, root_gb=20,
                                 extra_specs={"resources:VGPU": "1",
                                              **{f"trait:{t}": "required" for t in TRAITS[:2]}})
    if case.get("traits"):
        for i, name in enumerate(names):
            has = case["traits"] == "every" or i % 10 == 0
            driver.set_node_traits(name, TRAITS if has else TRAITS[2:])
    if case.get("vgpus"):
        from nova_lite.providers import ChildProvider
        from nova_lite.resources import Inventory
        for name in names:
            driver.set_node_providers(name, [
                ChildProvider(name=f"{name}_pci_0000_{0x81 + g:02x}_00_0",
                              inventories={"VGPU": Inventory(total=VGPUS_PER_GPU,
                                                             max_unit=VGPUS_PER_GPU)})
                for g in range(GPUS)])
    with common.store_url(case["store"]) as url:
        store = Store(url)
        try:
            ResourceTracker(common.HOST, driver, store=store,
                            settings=settings).update_available_resource()
            hosts = _spread_hosts(store, case["nodes"])
            manager = HostManager(store, settings)
            cold, first = common.measure(manager.select_destinations, flavor)
            steady = []
            for _ in range(case["repeat"]):
                sample, _ = common.measure(manager.select_destinations, flavor)
                steady.append(sample)
            with_traits = []
            if case.get("traits"):
                for _ in range(case["repeat"]):
                    sample, picked = common.measure(manager.select_destinations, traited)
                    with_traits.append(sample)
                chosen = store.get_compute_node(picked[0].host, picked[0].nodename)
                if not set(TRAITS[:2]) <= chosen.traits:
                    raise RuntimeError(f"node {chosen.nodename} was chosen without the "
                                       f"required traits {TRAITS[:2]}")
            with_vgpus = []
            if case.get("vgpus"):
                for _ in range(case["repeat"]):
                    sample, picked = common.measure(manager.select_destinations, vgpu_flavor)
                    with_vgpus.append(sample)
                chosen = store.get_compute_node(picked[0].host, picked[0].nodename)
                if not chosen.resources or len(chosen.resources.providers) != GPUS:
                    raise RuntimeError(f"node {chosen.nodename} was chosen without its GPUs")
            pct = []
            for round_no in range(3):
                _claim_on_every_hundredth(store, round_no)
                sample, _ = common.measure(manager.select_destinations, flavor)
                pct.append(sample)
            rt = ResourceTracker(f"h-{names[0]}", driver, store=store, settings=settings)
            after = []
            for _ in range(min(10, case["repeat"])):
                rt.instance_claim(objects.Instance(uuid=str(uuid.uuid4()), flavor=flavor),
                                  names[0])
                sample, _ = common.measure(manager.select_destinations, flavor)
                after.append(sample)
        finally:
            store.close()
    steady_t = common.timings(steady)
    out = {"hosts": hosts, "cold": common.timings([cold]), "steady": steady_t,
           "steady_median_ms": steady_t["median_ms"],
           "after_claim": common.timings(after), "after_1pct": common.timings(pct),
           "alternates": len(first[0].alternates)}
    if with_vgpus:
        vgpu_t = common.timings(with_vgpus)
        out.update(vgpu_steady=vgpu_t, vgpu_ratio=round(
            vgpu_t["median_ms"] / steady_t["median_ms"], 2) if steady_t["median_ms"] else None)
    if with_traits:
        traits_t = common.timings(with_traits)
        out.update(traits_steady=traits_t, traits_ratio=round(
            traits_t["median_ms"] / steady_t["median_ms"], 2) if steady_t["median_ms"] else None)
    return out


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
