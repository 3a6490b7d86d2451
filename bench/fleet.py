"""Fleet: one service with M nodes, first and steady-state audit passes.

``fake.multinode`` with M nodes (Nova's default sizes each), no instances;
then 10,000 Ironic-like bare-metal nodes: the ``ironic`` driver over its
in-process fake Ironic (``FakeBaremetal`` behind the same proxy source the
REST API source uses), one custom resource class per node.  The first
``update_available_resource()`` creates every node record and its
inventories; the following ones find nothing changed (the steady state of a
periodic audit) and are timed ``repeat`` times.
"""

import sys

from bench import common

NAME = "fleet"
DEFAULT_SIZES = [100, 1000, 5000, 50000]
TINY_SIZES = [4]
IRONIC_NODES = 10000
STORES = ("sqlite-file",)
TARGETS = {"5000 nodes": {"steady_pass_ms": "<= 500"},
           "50000 nodes": {"steady_pass_ms": "linear: <= 5000", "peak_rss_mib": "<= 1024"}}


def cases(sizes):
    out = [{"store": store, "nodes": m, "driver": "fake.multinode",
            "repeat": 3 if m >= 10000 else 5}
           for m in sizes for store in STORES]
    ironic = min(IRONIC_NODES, max(sizes))
    return out + [{"store": store, "nodes": ironic, "driver": "ironic", "repeat": 3}
                  for store in STORES]


def node_names(count):
    return [f"node-{i:06d}" for i in range(count)]


def make_driver(case):
    """(driver, skip reason) for the case; the driver is not init_host-ed yet."""
    from nova_lite import conf
    from nova_lite.virt import loader
    settings = conf.Settings()
    if case["driver"] != "ironic":
        return loader.load_driver(case["driver"], settings=settings,
                                  nodes=node_names(case["nodes"])), None
    try:
        from nova_lite_ironic.driver import IronicDriver
        from nova_lite_ironic.peers import StaticInstanceView, StaticServiceView
        from nova_lite_ironic.sources.fake import FakeBaremetal
        from nova_lite_ironic.sources.proxy import ProxySource
    except ImportError as exc:
        return None, f"the ironic driver is not installed: {exc}"
    fake = FakeBaremetal()
    for i in range(case["nodes"]):
        fake.add(resource_class="baremetal", properties={
            "cpu_arch": "x86_64", "capabilities": f"rack:r{i % 40},boot_mode:uefi"})
    return IronicDriver(settings=settings, source=ProxySource(fake),
                        service_view=StaticServiceView([common.HOST]),
                        instance_view=StaticInstanceView({})), None


def run_case(case):
    from nova_lite.compute.resource_tracker import ResourceTracker
    from nova_lite.db import Store
    driver, skipped = make_driver(case)
    if skipped:
        return {"skipped": skipped}
    driver.init_host(common.HOST)
    with common.store_url(case["store"]) as url:
        store = Store(url)
        rt = ResourceTracker(common.HOST, driver, store=store, settings=driver.settings)
        try:
            first_sample, first = common.measure(rt.update_available_resource)
            samples = []
            for _ in range(case["repeat"]):
                sample, result = common.measure(rt.update_available_resource)
                samples.append(sample)
        finally:
            store.close()
    steady = common.timings(samples)
    return {"first_pass": common.timings([first_sample]), "steady_pass": steady,
            "steady_us_per_node": round(steady["median_ms"] * 1000 / case["nodes"], 2),
            "audited": len(result.audited), "failed": len(first.failed) + len(result.failed)}


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
