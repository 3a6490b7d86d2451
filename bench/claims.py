"""Claims: 1,000 claims of 1 vCPU / 512 MB / 1 GB onto one FakeDriver node.

One FakeDriver node of Nova's default sizes (1000 vCPU x 4.0, 800000 MB,
600000 GB), default settings, audited once; then ``claims`` instance claims
one after another, each timed.  Reported per store: claims per second and
the latency percentiles.

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
TARGETS = {"memory": {"claims_per_s": ">= 20000"}, "sqlite-file": {"claims_per_s": ">= 2000"}}


def cases(sizes):
    return [{"store": store, "claims": n} for n in sizes for store in STORES]


def run_case(case):
    if case["store"] == "postgresql":
        reason = common.postgresql_available()
        if reason:
            return {"skipped": reason}
    with common.store_url(case["store"]) as url:
        rt, driver, store = common.make_tracker(url)
        try:
            rt.update_available_resource()
            instances = common.make_instances(case["claims"])
            latencies = []
            clock = time.perf_counter
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
