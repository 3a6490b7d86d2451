"""Claims: 1,000 claims of 1 vCPU / 512 MB / 1 GB onto one FakeDriver node.

One FakeDriver node of Nova's default sizes (1000 vCPU x 4.0, 800000 MB,
600000 GB), default settings, audited once; then ``claims`` instance claims
one after another, each timed.  Reported per store: claims per second and
the latency percentiles.

``"vgpu": true`` cases claim a flavor asking ``resources:VGPU=1`` too, on a
node whose driver reports 8 GPUs (child providers of 128 vGPUs each): each
claim lands on a child, in the node's transaction.  The same number of
plain claims runs in alternating rounds (4, each on a fresh store of the
same kind), and
``child_over_root_p50`` is the median child claim's time over the median
plain one's (goal: at most 1.5 on each backend).

``store_only_per_s`` splits the cost: the same number of claims written by
``Store.claim`` alone, each with a plan built beforehand (no tracker: no
lock, no placement, no records built), on a fresh store of the same kind.
It is the ceiling the tracker's own Python work is measured against.
"""

import sys
import time

from bench import common

NAME = "claims"
DEFAULT_SIZES = [1000]
TINY_SIZES = [5]
STORES = ("memory", "sqlite-file", "postgresql")
TARGETS = {"memory": {"claims_per_s": ">= 20000"}, "sqlite-file": {"claims_per_s": ">= 2000"},
           "vgpu (each store)": {"child_over_root_p50": "<= 1.5"}}
#: GPUs per node and vGPUs per GPU in the "vgpu" cases.
GPUS, VGPUS_PER_GPU = 8, 128


def cases(sizes):
    return ([{"store": store, "claims": n} for n in sizes for store in STORES]
            + [{"store": store, "claims": min(n, GPUS * VGPUS_PER_GPU), "vgpu": True}
               for n in sizes for store in STORES])


def _gpus():
    from nova_lite.providers import ChildProvider
    from nova_lite.resources import Inventory
    return [ChildProvider(name=f"{common.HOST}_pci_0000_{0x81 + i:02x}_00_0",
                          inventories={"VGPU": Inventory(total=VGPUS_PER_GPU,
                                                         max_unit=VGPUS_PER_GPU)})
            for i in range(GPUS)]


def _timed_claims(store_kind, count, vgpu):
    """Latencies (s) of ``count`` claims on a fresh store; with ``vgpu`` the
    flavor asks one VGPU too, which lands on one of the node's GPUs."""
    import attrs
    with common.store_url(store_kind) as url:
        rt, driver, store = common.make_tracker(url, providers=_gpus())
        try:
            rt.update_available_resource()
            instances = common.make_instances(count)
            if vgpu:
                flavor = attrs.evolve(instances[0].flavor, extra_specs={"resources:VGPU": "1"})
                instances = [attrs.evolve(i, flavor=flavor) for i in instances]
            latencies = []
            clock = time.perf_counter
            common.settle_heap()
            for inst in instances:
                t0 = clock()
                claim = rt.instance_claim(inst, common.HOST)
                latencies.append(clock() - t0)
                if vgpu and not claim.allocation.providers:
                    raise RuntimeError("a VGPU claim landed on no GPU")
            held = sum(per.get("VGPU", 0) for per in
                       rt.get_node(common.HOST).provider_usage.values())
            if held != (count if vgpu else 0):
                raise RuntimeError(f"{held} VGPU held after {count} claims")
        finally:
            store.close()
    return sorted(latencies)


#: Alternating rounds of plain and child claims in a "vgpu" case, so a
#: machine whose load drifts weighs on both alike.
VGPU_ROUNDS = 4


def _run_vgpu(case):
    per_round = max(1, case["claims"] // VGPU_ROUNDS)
    root, child = [], []
    for i in range(VGPU_ROUNDS):
        for vgpu in ((False, True) if i % 2 == 0 else (True, False)):
            (child if vgpu else root).extend(
                _timed_claims(case["store"], per_round, vgpu=vgpu))
    root.sort()
    child.sort()
    root_p50 = common.percentile(root, 0.5)
    child_p50 = common.percentile(child, 0.5)
    return {"root_p50_ms": round(root_p50 * 1000, 4), "child_p50_ms": round(child_p50 * 1000, 4),
            "root_p99_ms": round(common.percentile(root, 0.99) * 1000, 4),
            "child_p99_ms": round(common.percentile(child, 0.99) * 1000, 4),
            "child_over_root_p50": round(child_p50 / root_p50, 2) if root_p50 else None,
            "gpus": GPUS, "vgpus_per_gpu": VGPUS_PER_GPU}


def run_case(case):
    if case["store"] == "postgresql":
        reason = common.postgresql_available()
        if reason:
            return {"skipped": reason}
    if case.get("vgpu"):
        return _run_vgpu(case)
    with common.store_url(case["store"]) as url:
        rt, driver, store = common.make_tracker(url)
        try:
            rt.update_available_resource()
            instances = common.make_instances(case["claims"])
            latencies = []
            clock = time.perf_counter
            common.settle_heap()
            cpu_start, start = time.process_time(), clock()
            for inst in instances:
                t0 = clock()
                rt.instance_claim(inst, common.HOST)
                latencies.append(clock() - t0)
            elapsed, cpu = clock() - start, time.process_time() - cpu_start
            used = rt.get_node(common.HOST).used("VCPU")
        finally:
            store.close()
    store_only = _store_only_per_s(case["store"], case["claims"])
    latencies.sort()
    return {
        "claims_per_s": round(len(instances) / elapsed, 1),
        "elapsed_s": round(elapsed, 4),
        "claims_per_cpu_s": round(len(instances) / cpu, 1) if cpu else None,
        "latency_ms": {"p50": round(common.percentile(latencies, 0.5) * 1000, 4),
                       "p99": round(common.percentile(latencies, 0.99) * 1000, 4),
                       "max": round(latencies[-1] * 1000, 4)},
        "vcpus_used_after": used,
        "store_only_per_s": store_only,
        "store_share_of_time": round(len(instances) / elapsed / store_only, 3),
    }


def _store_only_per_s(store_kind, count):
    """Claims per second of ``Store.claim`` with ready plans (see the module docstring)."""
    import attrs
    from nova_lite.compute import accounting
    from nova_lite.db.store import ClaimPlan, ClaimRequest
    from nova_lite.objects import Allocation, ZERO_OVERHEAD
    with common.store_url(store_kind) as url:
        rt, driver, store = common.make_tracker(url)
        try:
            rt.update_available_resource()
            node = rt.get_node(common.HOST)
            plans = []
            for inst in common.make_instances(count):
                placed = attrs.evolve(inst, host=common.HOST, node=common.HOST)
                plans.append(ClaimPlan(allocation=Allocation(
                    consumer_uuid=inst.uuid, consumer_type="instance", instance_uuid=inst.uuid,
                    node_uuid=node.uuid, flavor=inst.flavor,
                    resources=accounting.requested_resources(inst.flavor, ZERO_OVERHEAD)),
                    instance=placed))
            common.settle_heap()
            start = time.perf_counter()
            for plan in plans:
                node, _ = store.claim(node, [ClaimRequest(plan.allocation.instance_uuid)],
                                      lambda _node, p=plan: (p,))
            elapsed = time.perf_counter() - start
        finally:
            store.close()
    return round(count / elapsed, 1)


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
