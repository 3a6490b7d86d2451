"""``DriverConformanceTests``: the checks every virt driver must pass.

Use it as a mixin beside ``testtools.TestCase``::

    class TestMyDriver(DriverConformanceTests, testtools.TestCase):
        driver_name = "mydriver"          # entry point name
        driver_kwargs = {"endpoint": "..."}

or override :meth:`DriverConformanceTests.make_driver`.  A capability the
driver does not declare is skipped, and the skip names it; a declared one
that raises NotImplementedError fails.

Every driver also makes a round trip through a real
:class:`~nova_lite.compute.resource_tracker.ResourceTracker` recording in a
SQLite file: an audit of every node, a claim that fits (flavor plus the
driver's overhead, counted in the usage and kept by the next audit), its
release, and a claim that does not fit, refused with the reason in Nova's
words and changing nothing.
"""

import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import fixtures

from nova_lite import conf
from nova_lite.compute import accounting
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.objects import ComputeNode, Flavor, Instance, NodeResources, Overhead
from nova_lite.virt import driver as driver_api
from nova_lite.virt import loader

_T = TypeVar("_T")

if TYPE_CHECKING:
    # What the mixin is used beside: gives the type checker its assertions.
    import testtools
    _TestCase = testtools.TestCase
else:
    _TestCase = object


class DriverConformanceTests(_TestCase):
    """Mixin of conformance tests; see the module docstring."""

    #: Entry point name of the driver under test.
    driver_name: str | None = None
    #: Extra keyword arguments for ``load_driver``.
    driver_kwargs: dict[str, object] = {}
    #: Host name passed to ``init_host``.
    conformance_host = "conformance-host"

    def make_settings(self) -> conf.Settings:
        """Settings for the driver (override to customise)."""
        state_path = self.useFixture(fixtures.TempDir()).path
        return conf.Settings(host=self.conformance_host, state_path=state_path)

    def make_driver(self) -> driver_api.ComputeDriver:
        """Build the driver under test (not yet ``init_host``-ed)."""
        if not self.driver_name:
            raise AssertionError(
                f"{type(self).__name__} must set driver_name or override make_driver()")
        return loader.load_driver(self.driver_name, settings=self.make_settings(),
                                  **dict(self.driver_kwargs))

    def setUp(self) -> None:
        super().setUp()
        #: The driver under test, ``init_host``-ed.
        self.driver: driver_api.ComputeDriver = self.make_driver()
        self.driver.init_host(self.conformance_host)

    # -- helpers ----------------------------------------------------------
    def _require(self, capability: str) -> None:
        caps = self.driver.capabilities
        if not getattr(caps, capability, False):
            self.skipTest(f"capability {capability} not declared by "
                          f"{type(self.driver).__name__}")

    def _call_declared(self, capability: str, func: Callable[..., _T], *args: Any) -> _T:
        try:
            return func(*args)
        except NotImplementedError:
            self.fail(f"{type(self.driver).__name__} declares {capability} but "
                      f"{func.__name__} raises NotImplementedError")

    def _nodes(self) -> list[str]:
        nodes = self.driver.get_available_nodes()
        self.assertIsInstance(nodes, list, "get_available_nodes must return a list")
        self.assertTrue(nodes, "get_available_nodes returned no node")
        return nodes

    def _report(self, nodename: str) -> NodeResources:
        report = self.driver.get_available_resource(nodename)
        if isinstance(report, dict):
            report = NodeResources.from_dict(report, nodename=nodename)
        self.assertIsInstance(report, NodeResources,
                              f"get_available_resource({nodename!r}) must return NodeResources")
        return cast(NodeResources, report)

    @staticmethod
    def _flavor() -> Flavor:
        return Flavor(name="conformance.tiny", vcpus=1, memory_mb=64, root_gb=0)

    # -- the tracker round trip: hooks -------------------------------------
    def make_tracker(self) -> ResourceTracker:
        """A ResourceTracker over the driver, recording in a fresh SQLite file.

        The conformance host is registered as a live compute service first,
        as ``nova-lite compute`` does, so drivers that share nodes between
        services (bare metal) see it.
        """
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, "conformance.db")
        store = Store(f"sqlite:///{path}")
        self.addCleanup(store.close)
        store.heartbeat(self.conformance_host)
        return ResourceTracker(self.conformance_host, self.driver, store=store,
                               settings=self.driver.settings)

    def conformance_flavor(self, node: ComputeNode) -> Flavor:
        """The small Flavor the round trip claims on ``node`` (a ComputeNode).

        A node offering a ``CUSTOM_*`` class (bare metal) gets one unit of it
        and nothing else, as Nova's bare-metal flavors ask; any other node
        gets 1 vCPU, 64 MB and no disk.  Override for a driver whose nodes
        need another shape.
        """
        custom = sorted(rc for rc in node.inventories if str(rc).startswith("CUSTOM_"))
        if custom:
            return Flavor(name="conformance.baremetal", vcpus=1, memory_mb=1, extra_specs={
                f"resources:{custom[0]}": "1", "resources:VCPU": "0",
                "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"})
        return self._flavor()

    # -- the tracker round trip: helpers -----------------------------------
    def _audited_tracker(self) -> tuple[ResourceTracker, list[str]]:
        rt = self.make_tracker()
        nodes = sorted(self._nodes())
        result = rt.update_available_resource()
        self.assertIsNone(result.skipped, f"the audit was skipped: {result.skipped}")
        self.assertEqual({}, dict(result.failed), "the audit failed nodes")
        self.assertEqual(tuple(nodes), tuple(result.audited))
        return rt, nodes

    def _requested(self, instance: Instance) -> dict[str, int]:
        overhead = self.driver.estimate_instance_overhead(instance)
        return accounting.requested_resources(instance.flavor, overhead)

    def _claimable_node(self, rt: ResourceTracker, nodes: Iterable[str]) -> tuple[str, Flavor]:
        """``(nodename, flavor)``: the first node with room for its conformance flavor."""
        seen = []
        for nodename in nodes:
            node = rt.get_node(nodename)
            flavor = self.conformance_flavor(node)
            requested = self._requested(self._instance(flavor))
            free = {rc: node.free(rc) for rc in requested}
            if all(free[rc] >= amount for rc, amount in requested.items()):
                return nodename, flavor
            seen.append(f"{nodename}: requested {requested}, free {free}")
        self.fail("no node has room for the conformance flavor: " + "; ".join(seen))

    @staticmethod
    def _instance(flavor: Flavor) -> Instance:
        return Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id="conformance")

    def _assert_usage(self, rt: ResourceTracker, nodename: str, expected: Mapping[str, int],
                      when: str) -> None:
        node = rt.get_node(nodename)
        for rc, amount in expected.items():
            self.assertEqual(amount, node.used(rc), f"{nodename} {rc} used {when}")

    # -- the contract -----------------------------------------------------
    def test_is_a_compute_driver(self) -> None:
        self.assertIsInstance(self.driver, driver_api.ComputeDriver)
        self.assertIsInstance(self.driver.capabilities, driver_api.Capabilities)
        self.assertIn(self.driver.api_version, driver_api.SUPPORTED_API_VERSIONS)

    def test_node_names_are_unique_strings(self) -> None:
        nodes = self._nodes()
        for name in nodes:
            self.assertIsInstance(name, str)
            self.assertTrue(name.strip(), "node names must not be blank")
        self.assertEqual(len(nodes), len(set(nodes)), f"duplicate node names: {nodes}")

    def test_node_list_is_stable(self) -> None:
        first = sorted(self._nodes())
        self.assertEqual(first, sorted(self.driver.get_available_nodes()))
        self.assertEqual(first, sorted(self.driver.get_available_nodes(refresh=True)))

    def test_resource_report_schema_for_every_node(self) -> None:
        for nodename in self._nodes():
            report = self._report(nodename)
            self.assertTrue(report.hypervisor_type, f"{nodename}: empty hypervisor_type")
            self.assertTrue(report.hypervisor_hostname,
                            f"{nodename}: empty hypervisor_hostname")
            self.assertTrue(report.totals(), f"{nodename}: the report offers no resource")
            # The record must survive its own serialisation.
            self.assertEqual(report, NodeResources.from_dict(report.to_dict()))

    def test_resource_report_is_deterministic(self) -> None:
        for nodename in self._nodes():
            self.assertEqual(self._report(nodename), self._report(nodename))

    def test_node_is_available(self) -> None:
        for nodename in self._nodes():
            self.assertTrue(self.driver.node_is_available(nodename))
        self.assertFalse(self.driver.node_is_available(f"no-such-node-{uuid.uuid4()}"))

    def test_overhead_is_non_negative_and_deterministic(self) -> None:
        flavor = self._flavor()
        inst = Instance(uuid=str(uuid.uuid4()), flavor=flavor, host=self.conformance_host)
        for subject in (flavor, inst):
            first = self.driver.estimate_instance_overhead(subject)
            self.assertIsInstance(first, Overhead)
            for value in (first.memory_mb, first.disk_gb, first.vcpus):
                self.assertGreaterEqual(value, 0)
            self.assertEqual(first, self.driver.estimate_instance_overhead(subject))

    # -- a round trip through a real ResourceTracker ----------------------------
    def test_tracker_audit_claim_and_free(self) -> None:
        rt, nodes = self._audited_tracker()
        nodename, flavor = self._claimable_node(rt, nodes)
        before = rt.get_node(nodename)
        baseline = {rc: before.used(rc) for rc in before.inventories}
        inst = self._instance(flavor)
        requested = self._requested(inst)
        claim = rt.instance_claim(inst, nodename=nodename)
        self.assertEqual(requested, claim.claimed,
                         "the claim holds the flavor plus the driver's overhead")
        self.assertEqual((self.conformance_host, nodename),
                         (claim.instance.host, claim.instance.node))
        held = {rc: baseline.get(rc, 0) + requested.get(rc, 0)
                for rc in set(baseline) | set(requested)}
        self._assert_usage(rt, nodename, held, "after the claim")
        # The audit rebuilds usage from the records: the claim still counts,
        # with the same overhead (the driver's estimate is deterministic).
        rt.update_available_resource()
        self._assert_usage(rt, nodename, held, "after the next audit")
        rt.update_usage(attrs.evolve(claim.instance, vm_state="deleted"))
        self._assert_usage(rt, nodename, baseline, "after the instance was deleted")
        rt.update_available_resource()
        self._assert_usage(rt, nodename, baseline, "after the audit that followed")

    def test_tracker_refuses_a_claim_that_does_not_fit(self) -> None:
        rt, nodes = self._audited_tracker()
        nodename, flavor = self._claimable_node(rt, nodes)
        node = rt.get_node(nodename)
        spec = next((k for k in flavor.extra_specs if k.startswith("resources:CUSTOM_")), None)
        if spec is not None:
            rc = spec.split(":", 1)[1]
            big = attrs.evolve(flavor, name="conformance.too-big", extra_specs=dict(
                flavor.extra_specs, **{spec: str(node.free(rc) + 1)}))
            words = f"Free {rc} {node.free(rc):.2f} {rc} < requested {node.free(rc) + 1} {rc}"
        else:
            big = attrs.evolve(flavor, name="conformance.too-big",
                               memory_mb=node.free("MEMORY_MB") + 1)
            inst = self._instance(big)
            wanted = self._requested(inst)["MEMORY_MB"]
            words = (f"Free memory {node.free('MEMORY_MB'):.2f} MB < requested "
                     f"{wanted} MB")
        inst = self._instance(big)
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim, inst,
                                nodename=nodename)
        self.assertIn(words, exc.reasons)
        self.assertTrue(str(exc).startswith("Insufficient compute resources: "), str(exc))
        self.assertIn(words, str(exc))
        after = rt.get_node(nodename)
        self.assertEqual((node.generation, dict(node.usage)),
                         (after.generation, dict(after.usage)),
                         "a refused claim changed the node")
        self.assertEqual([], rt.store.list_allocations(instance_uuid=inst.uuid))
        # and what fits is still admitted
        claim = rt.instance_claim(self._instance(flavor), nodename=nodename)
        self.assertTrue(claim.claimed)

    # -- optional capabilities -----------------------------------------------
    def test_lifecycle(self) -> None:
        self._require("supports_lifecycle")
        nodename = self._nodes()[0]
        inst = Instance(uuid=str(uuid.uuid4()), flavor=self._flavor(),
                        host=self.conformance_host, node=nodename)
        before = self._call_declared("supports_lifecycle", self.driver.list_instances)
        self.assertNotIn(inst.uuid, before)
        self._call_declared("supports_lifecycle", self.driver.spawn, inst)
        try:
            self.assertIn(inst.uuid, self.driver.list_instances())
        finally:
            self._call_declared("supports_lifecycle", self.driver.destroy, inst)
        self.assertNotIn(inst.uuid, self.driver.list_instances())

    def test_numa_topology(self) -> None:
        self._require("supports_numa")
        for nodename in self._nodes():
            topo = self._report(nodename).numa_topology
            if topo is None:
                continue  # a driver may report NUMA only where the host has it
            self.assertTrue(topo.cells, f"{nodename}: NUMA topology without cells")
            for cell in topo.cells:
                self.assertFalse(cell.cpuset & cell.pcpuset,
                                 f"{nodename}: cell {cell.id} has CPUs both shared and "
                                 "dedicated")

    def test_pci_devices(self) -> None:
        self._require("supports_pci")
        for nodename in self._nodes():
            devices = self._report(nodename).pci_devices
            addresses = [d.address for d in devices]
            self.assertEqual(len(addresses), len(set(addresses)),
                             f"{nodename}: duplicate PCI addresses")
            known = set(addresses)
            for dev in devices:
                if dev.dev_type == "type-VF" and dev.parent_addr:
                    self.assertIn(dev.parent_addr, known,
                                  f"{nodename}: VF {dev.address} names unknown PF")

    def test_pcpus(self) -> None:
        self._require("supports_pcpus")
        for nodename in self._nodes():
            self.assertGreaterEqual(self._report(nodename).pcpus, 0)

    def test_is_node_deleted_is_false_for_live_nodes(self) -> None:
        self._require("supports_node_deletion_check")
        for nodename in self._nodes():
            self.assertFalse(self._call_declared(
                "supports_node_deletion_check", self.driver.is_node_deleted, nodename))
