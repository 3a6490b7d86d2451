"""Library misuse gets an error naming the argument and what it must be.

A wrong type raises :class:`~nova_lite.exception.InvalidType`, both an
InvalidInput and a TypeError, never a bare TypeError or AttributeError
from deep inside.
"""

import testtools

from nova_lite import conf, objects
from nova_lite.compute.manager import ComputeService
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import InvalidConfig, InvalidInput, InvalidType
from nova_lite.scheduler import HostManager, RequestSpec
from nova_lite.virt import fake, loader
from tests import base


class MisuseTestCase(base.TestCase):

    def assertNamed(self, words, call, *args, kind=InvalidType, **kwargs):
        """``call`` raises ``kind`` whose message holds every one of ``words``."""
        exc = self.assertRaises(kind, call, *args, **kwargs)
        for word in words:
            self.assertIn(word, str(exc))
        return exc


class TestInvalidType(testtools.TestCase):

    def test_is_an_invalid_input_and_a_type_error(self):
        self.assertTrue(issubclass(InvalidType, InvalidInput))
        self.assertTrue(issubclass(InvalidType, TypeError))


class TestRecords(MisuseTestCase):

    def test_instance(self):
        for value in (None, {"vcpus": 1}, "m1.small"):
            self.assertNamed(["Instance.flavor", "must be a Flavor", type(value).__name__],
                             objects.Instance, uuid="u", flavor=value)
        self.assertNamed(["Instance.numa_topology", "InstanceNUMATopology", "str"],
                         objects.Instance, uuid="u", flavor=base.flavor(), numa_topology="x")
        self.assertNamed(["pci_devices", "int"], objects.Instance, uuid="u",
                         flavor=base.flavor(), pci_devices=5)
        self.assertNamed(["Instance.pci_requests", "PciRequest", "str"], objects.Instance,
                         uuid="u", flavor=base.flavor(), pci_requests=["8086:1520"])
        self.assertNamed(["Instance.uuid", "NoneType"], objects.Instance, uuid=None,
                         flavor=base.flavor())

    def test_migration(self):
        fields = dict(uuid="m", instance_uuid="i", source_compute="h1", source_node="n1",
                      dest_compute="h2", dest_node="n2", old_flavor=base.flavor(),
                      new_flavor=base.flavor())
        self.assertNamed(["Migration.old_flavor", "Flavor", "NoneType"], objects.Migration,
                         **dict(fields, old_flavor=None))
        self.assertNamed(["Migration.dest_node"], objects.Migration,
                         **dict(fields, dest_node=""), kind=InvalidInput)

    def test_flavor(self):
        for value in (5, [("hw:cpu_policy", "dedicated")]):
            self.assertNamed(["Flavor.extra_specs", "mapping", type(value).__name__],
                             base.flavor, extra_specs=value)
        self.assertNamed(["Flavor.extra_specs", "keys must be strings"], base.flavor,
                         extra_specs={1: "x"})
        self.assertNamed(["Flavor.name"], base.flavor, name=None, kind=InvalidInput)

    def test_request_spec(self):
        for value in (None, {"vcpus": 1}):
            self.assertNamed(["RequestSpec.flavor", "must be a Flavor"], RequestSpec, value)
        self.assertNamed(["host name", "int"], RequestSpec, base.flavor(), ignore_hosts=5)
        self.assertNamed(["host names must be strings", "int"], RequestSpec, base.flavor(),
                         force_hosts=["h1", 2])
        self.assertNamed(["RequestSpec.pci_requests"], RequestSpec, base.flavor(),
                         pci_requests="x")
        self.assertEqual(("h1",), RequestSpec(base.flavor(), ignore_hosts="h1").ignore_hosts)

    def test_node_resources(self):
        self.assertNamed(["NodeResources.stats", "mapping", "list"], objects.NodeResources,
                         vcpus=1, memory_mb=1, local_gb=1, stats=["a"])
        self.assertNamed(["NodeResources.cpu_info", "CpuInfo", "dict"], objects.NodeResources,
                         vcpus=1, memory_mb=1, local_gb=1, cpu_info={"model": "x"})


class TestStore(MisuseTestCase):

    def test_url(self):
        for value in (None, 5, b"sqlite://"):
            self.assertNamed(["Store url", "must be a string", type(value).__name__],
                             Store, value)
        self.assertNamed(["Store url must not be empty"], Store, " ", kind=InvalidInput)

    def test_numbers(self):
        self.assertNamed(["Store claim_retries", "integer", "str"], Store, "sqlite://",
                         claim_retries="3")
        self.assertNamed(["Store claim_retries", ">= 0"], Store, "sqlite://",
                         claim_retries=-1, kind=InvalidInput)
        self.assertNamed(["Store busy_timeout", "seconds", "NoneType"], Store, "sqlite://",
                         busy_timeout=None)
        self.assertNamed(["Store busy_timeout", ">= 0"], Store, "sqlite://",
                         busy_timeout=-1, kind=InvalidInput)

    def test_record_instance_state(self):
        store = self.sqlite_store()
        self.assertNamed(["record_instance_state instance", "Instance", "str"],
                         store.record_instance_state, "uuid")


class TestServices(MisuseTestCase):

    def setUp(self):
        super().setUp()
        self.driver = fake.FakeDriver(settings=self.settings())
        self.store = self.sqlite_store()

    def test_resource_tracker_and_compute_service(self):
        for build in (ResourceTracker, ComputeService):
            name = build.__name__
            self.assertNamed([f"{name} host", "NoneType"], build, None, self.driver,
                             store=self.store)
            self.assertNamed([f"{name} driver", "ComputeDriver", "str 'fake'"], build, "h",
                             "fake", store=self.store)
            self.assertNamed([f"{name} store", "Store or None", "str"], build, "h",
                             self.driver, store="sqlite://")
            self.assertNamed([f"{name} settings", "Settings or None", "dict"], build, "h",
                             self.driver, store=self.store, settings={"host": "h"})
        self.assertEqual([], self.store.list_services())
        self.assertIsNone(self.driver.host)

    def test_claim_arguments(self):
        _, rt = self.make_tracker()
        self.assertNamed(["instance", "Instance", "NoneType"], rt.instance_claim, None,
                         self.host)
        self.assertNamed(["new_flavor", "Flavor"], rt.resize_claim, base.instance(), None,
                         self.host, kind=InvalidInput)

    def test_load_driver(self):
        self.assertNamed(["load_driver('fake') settings", "Settings or None", "dict"],
                         loader.load_driver, "fake", settings={})
        self.assertNamed(["FakeDriver settings", "Settings"], fake.FakeDriver, settings="x")

    def test_settings(self):
        self.assertNamed(["'host'", "NoneType"], conf.Settings, host=None, kind=InvalidConfig)

    def test_host_manager(self):
        self.assertNamed(["HostManager store", "Store", "NoneType"], HostManager, None)
        self.assertNamed(["HostManager store", "Store", "str"], HostManager, "sqlite://")
        self.assertNamed(["HostManager settings", "Settings or None", "dict"], HostManager,
                         self.store, {})
        self.assertNamed(["HostManager nodes_max_age", ">= 0"], HostManager, self.store,
                         nodes_max_age=-1, kind=InvalidInput)
        self.assertNamed(["HostManager services_max_age", "seconds", "str"], HostManager,
                         self.store, services_max_age="5")
        self.assertNamed(["request must be a RequestSpec or a Flavor"],
                         HostManager(self.store).select_destinations, None, kind=InvalidInput)
