"""Audit: one node with N tracked instances, one steady-state audit.

One FakeDriver node holding N claimed (and spawned) instances of 1 vCPU /
512 MB / 1 GB; allocation ratios cpu 16 and ram 4 so 5,000 fit.  After two
warm-up audits, ``update_available_resource()`` is timed ``repeat`` times:
nothing changes between them, which is the steady state of a periodic audit.
"""

import sys
import time

from bench import common

NAME = "audit"
DEFAULT_SIZES = [100, 1000, 5000]
TINY_SIZES = [3]
STORES = ("memory", "sqlite-file")
REPEAT = 15
TARGETS = {"5000 instances": {"audit_ms": "<= 25"}}


def cases(sizes):
    return [{"store": store, "instances": n, "repeat": REPEAT if n > 10 else 2}
            for n in sizes for store in STORES]


def run_case(case):
    from nova_lite import conf
    settings = conf.Settings(cpu_allocation_ratio=16.0, ram_allocation_ratio=4.0)
    with common.store_url(case["store"]) as url:
        rt, driver, store = common.make_tracker(url, settings=settings)
        try:
            rt.update_available_resource()
            start = time.perf_counter()
            for inst in common.make_instances(case["instances"]):
                claim = rt.instance_claim(inst, common.HOST)
                driver.spawn(claim.instance)
            setup_s = time.perf_counter() - start
            for _ in range(2):
                rt.update_available_resource()
            samples = []
            for _ in range(case["repeat"]):
                sample, result = common.measure(rt.update_available_resource)
                samples.append(sample)
            node = rt.get_node(common.HOST)
        finally:
            store.close()
    return {"audit": common.timings(samples), "audited": list(result.audited),
            "vcpus_used": node.used("VCPU"), "setup_claims_s": round(setup_s, 3)}


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
