"""The scheduler view reads the records the tracker wrote."""

import uuid

import testtools

from nova_lite import conf
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.objects import Flavor, Instance
from nova_lite.scheduler.host_manager import HostManager
from nova_lite.scheduler.weighers import ram_weigher
from nova_lite.testing import FakeDriverFixture


class TestHostManager(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.settings = conf.Settings(reserved_host_memory_mb=0, cpu_allocation_ratio=1.0)
        self.store = Store("sqlite://")
        self.trackers = {}
        for host, name in (("big", "fake.medium"), ("small", "fake.small")):
            fx = self.useFixture(FakeDriverFixture(name=name, host=host, settings=self.settings))
            rt = ResourceTracker(host, fx.driver, store=self.store, settings=self.settings)
            rt.update_available_resource()
            self.store.heartbeat(host)
            self.trackers[host] = rt

    def test_picks_host_with_room_and_limits_follow_inventory(self):
        flavor = Flavor(name="m2", vcpus=2, memory_mb=1024, root_gb=1)
        chosen = HostManager(self.store, self.settings).select_destinations(flavor, count=2)
        self.assertEqual(["big"], [c.host for c in chosen])   # small has 1 vCPU
        self.assertEqual(10.0, chosen[0].limits["vcpu"])

    def test_spreads_by_free_memory(self):
        flavor = Flavor(name="m1", vcpus=1, memory_mb=4096, root_gb=1)
        self.trackers["big"].instance_claim(
            Instance(uuid=str(uuid.uuid4()), flavor=flavor), "big")
        manager = HostManager(self.store, self.settings, weighers=((ram_weigher, 1.0),))
        chosen = manager.select_destinations(flavor, count=2)
        self.assertEqual(["small", "big"], [c.host for c in chosen])

    def test_down_service_is_filtered(self):
        settings = conf.Settings(service_down_time=0.000001)
        flavor = Flavor(name="m1", vcpus=1, memory_mb=64)
        self.assertEqual([], HostManager(self.store, settings).select_destinations(flavor))
