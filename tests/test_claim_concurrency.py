"""Claims from many processes on one node: exactly the capacity is admitted.

4 processes (spawn context, each with its own driver, Store and
ResourceTracker, each auditing on start) each make 500 claims of 1 VCPU on one node whose VCPU
capacity is 1,000: exactly 1,000 are admitted, every other one is rejected
with its reason, and the stored usage is exactly 1,000.  Run against a
SQLite file and against real PostgreSQL.
"""

import traceback
import uuid

from nova_lite import conf, objects
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.testing import databases
from nova_lite.virt import loader
from tests import base, processes

HOST = "host1"
PROCESSES = 4
CLAIMS_PER_PROCESS = 500
CAPACITY = 1000
REASON = "Free vcpu 0.00 VCPU < requested 1 VCPU"
TIMEOUT_S = 120


def _settings(state_path):
    return conf.Settings(host=HOST, state_path=state_path, cpu_allocation_ratio=1.0,
                         reserved_host_memory_mb=0)


def _tracker(url, state_path):
    settings = _settings(state_path)
    driver = loader.load_driver("fake", settings=settings, vcpus=CAPACITY)
    driver.init_host(HOST)
    store = Store(url)
    return store, ResourceTracker(HOST, driver, store=store, settings=settings)


def claim_worker(url, state_path, worker, barrier, results):
    """Child process: make CLAIMS_PER_PROCESS claims, report what happened."""
    admitted, rejected, errors = [], [], []
    try:
        store, rt = _tracker(url, state_path)
        flavor = objects.Flavor(name="one", vcpus=1, memory_mb=1, root_gb=0)
        barrier.wait(timeout=60)
        # Every process audits on start, racing the others' audits and claims.
        failed = rt.update_available_resource().failed
        if failed:
            errors.append(f"audit failed: {dict(failed)}")
        for _ in range(CLAIMS_PER_PROCESS):
            inst = objects.Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id="p")
            try:
                claim = rt.instance_claim(inst, HOST)
            except ComputeResourcesUnavailable as exc:
                rejected.append("; ".join(exc.reasons))
            except Exception as exc:   # noqa: BLE001 - reported to the parent
                errors.append(f"{type(exc).__name__}: {exc}")
            else:
                admitted.append(claim.instance.uuid)
        store.close()
    except Exception:   # noqa: BLE001
        errors.append(traceback.format_exc())
    results.put((worker, admitted, rejected, errors))


class ConcurrentClaimTests:

    def make_url(self):
        raise NotImplementedError

    def test_exactly_capacity_is_admitted(self):
        url = self.make_url()
        store, rt = _tracker(url, self.state_path)
        self.addCleanup(store.close)

        outcomes = processes.run_together(
            self, claim_worker, [(url, self.state_path, i) for i in range(PROCESSES)],
            timeout=TIMEOUT_S)

        errors = [e for _, _, _, errs in outcomes for e in errs]
        self.assertEqual([], errors)
        admitted = [u for _, adm, _, _ in outcomes for u in adm]
        rejected = [r for _, _, rej, _ in outcomes for r in rej]
        self.assertEqual(CAPACITY, len(admitted))
        self.assertEqual(CAPACITY, len(set(admitted)))
        self.assertEqual(PROCESSES * CLAIMS_PER_PROCESS - CAPACITY, len(rejected))
        self.assertEqual({REASON}, set(rejected))
        # They really raced: claims of more than one process were admitted.
        # (Not "every process": on a loaded 2-core machine one process can
        # sleep through the ~0.3 s the others need to fill the node.)
        self.assertGreaterEqual(len([1 for _, adm, _, _ in outcomes if adm]), 2)

        node = store.get_compute_node(HOST, HOST)
        self.assertEqual(CAPACITY, node.capacity("VCPU"))
        self.assertEqual(CAPACITY, node.used("VCPU"))
        self.assertEqual(CAPACITY, node.used("MEMORY_MB"))
        self.assertEqual(0, node.free("VCPU"))
        allocations = store.list_allocations(node_uuid=node.uuid)
        self.assertEqual(set(admitted), {a.consumer_uuid for a in allocations})
        self.assertEqual(CAPACITY, len(store.list_instances(host=HOST, node=HOST)))
        # the parent's tracker reads what the children did, and an audit agrees
        self.assertEqual(CAPACITY, rt.get_node(HOST).used("VCPU"))
        rt.update_available_resource()
        self.assertEqual(CAPACITY, rt.get_node(HOST).used("VCPU"))

class TestConcurrentClaimsSQLite(ConcurrentClaimTests, base.TestCase):

    def make_url(self):
        return self.useFixture(databases.SQLiteFile()).url


class TestConcurrentClaimsPostgreSQL(ConcurrentClaimTests, base.TestCase):

    def make_url(self):
        databases.use_postgresql(self)
        return self.useFixture(databases.PostgreSQLDatabase()).url
