"""Bench: one compute service auditing a bare-metal fleet in one pass.

Not a test.  Prints one JSON object with, per case, the first audit pass
(records created), the steady pass (nothing changed), and the listing
requests one pass made.

    python bench/ironic_fleet.py                    # 10,000 fake nodes
    python bench/ironic_fleet.py --nodes 2000
    python bench/ironic_fleet.py --real --nodes 300 # a real Ironic (enrolling
                                                     # costs ~0.1-0.3 s a node)

``fake`` serves the nodes from the in-process FakeBaremetal through the
same source code the ``api`` source uses; ``--real`` starts a standalone
Ironic (tools/ironic-venv.sh) and enrolls the nodes first.
"""

import argparse
import json
import logging
import os
import platform
import resource
import sys
import tempfile
import time

from nova_lite import conf
from nova_lite.compute.manager import ComputeService
from nova_lite.db import Store

from nova_lite_ironic.driver import IronicDriver
from nova_lite_ironic.sources.fake import FakeBaremetal
from nova_lite_ironic.sources.proxy import ProxySource


def audit(driver, tmp, repeat):
    """(first pass s, [steady pass s], audited count) on a fresh SQLite file."""
    settings = conf.Settings(host="bench-host", state_path=tmp)
    store = Store("sqlite:///" + os.path.join(tmp, "bench.db"))
    try:
        service = ComputeService("bench-host", driver, store=store, settings=settings)
        t0 = time.perf_counter()
        first = service.run_once()
        first_s = time.perf_counter() - t0
        steady = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = service.run_once()
            steady.append(time.perf_counter() - t0)
        assert not first.failed and not result.failed, (first.failed, result.failed)
        return first_s, steady, len(result.audited)
    finally:
        store.close()


def fake_case(nodes, repeat, tmp):
    fake = FakeBaremetal()
    for i in range(nodes):
        fake.add(resource_class="baremetal", properties={
            "cpu_arch": "x86_64", "capabilities": f"rack:r{i % 40},boot_mode:uefi"})
    driver = IronicDriver(settings=conf.Settings(host="bench-host", state_path=tmp),
                          source=ProxySource(fake))
    first_s, steady, audited = audit(driver, tmp, repeat)
    return {"source": "fake", "nodes": nodes, "audited": audited,
            "first_pass_ms": round(first_s * 1000, 1),
            "steady_pass_ms": [round(s * 1000, 1) for s in steady],
            "list_requests_per_pass": fake.list_calls // (repeat + 1)}


def real_case(nodes, repeat, tmp):
    from nova_lite_ironic.testing.fleet import Fleet
    from nova_lite_ironic.testing.ironic_server import IronicServer
    with IronicServer() as server:
        fleet = Fleet(server.endpoint)
        t0 = time.perf_counter()
        fleet.enroll(nodes)
        enroll_s = time.perf_counter() - t0
        settings = conf.Settings(host="bench-host", state_path=tmp, sections={
            "ironic": {"endpoint_override": server.endpoint}})
        driver = IronicDriver(settings=settings)
        first_s, steady, audited = audit(driver, tmp, repeat)
        fleet.close()
        return {"source": "real-ironic", "nodes": nodes, "audited": audited,
                "ironic_startup_s": round(server.startup_seconds, 1),
                "enroll_to_available_ms_per_node": round(enroll_s * 1000 / nodes, 1),
                "first_pass_ms": round(first_s * 1000, 1),
                "steady_pass_ms": [round(s * 1000, 1) for s in steady]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--real", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    nodes = args.nodes or (300 if args.real else 10000)
    with tempfile.TemporaryDirectory() as tmp:
        case = (real_case if args.real else fake_case)(nodes, args.repeat, tmp)
    case["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps({"bench": "ironic_fleet", "date": time.strftime("%Y-%m-%d"),
                      "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                      "case": case}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
