"""spawn / destroy / list_instances and overhead, on both backends."""

import os
import uuid

from nova_lite.objects import Flavor, Instance, Overhead

from nova_lite_libvirt import guest_xml
from nova_lite_libvirt.errors import GuestExists, SpawnFailed
from nova_lite_libvirt.testing import GuestSpec, HostSpec
from nova_lite_libvirt.tests import base

SMALL = Flavor(name="m1.small", vcpus=2, memory_mb=512, root_gb=1, ephemeral_gb=0, swap=0)
DISKLESS = Flavor(name="tiny", vcpus=1, memory_mb=64)


def instance(flavor=SMALL, **kwargs):
    return Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id="demo", **kwargs)


class LifecycleTests:

    def test_spawn_defines_and_starts_a_guest(self):
        driver = self.start_driver()
        before = self.report(driver)
        inst = instance()
        driver.spawn(inst)
        self.assertEqual([inst.uuid], driver.list_instances())
        dom = driver.libvirt_host.lookup(inst.uuid)
        self.assertTrue(dom.isActive())
        self.assertEqual(guest_xml.domain_name(inst), dom.name())
        state, max_kib, mem_kib, vcpus, _ = dom.info()
        self.assertEqual((512 * 1024, 512 * 1024, 2), (max_kib, mem_kib, vcpus))
        after = self.report(driver)
        self.assertEqual(before.vcpus_used + 2, after.vcpus_used)
        # The sparse 1 GiB root disk is over-committed in full.
        self.assertEqual(before.disk_available_least - 1, after.disk_available_least)
        root = os.path.join(driver.config.instances_path, inst.uuid, "disk")
        self.assertEqual(1024 ** 3, os.path.getsize(root))

    def test_destroy_removes_guest_and_files_and_is_idempotent(self):
        driver = self.start_driver()
        inst = instance()
        driver.spawn(inst)
        driver.destroy(inst)
        self.assertEqual([], driver.list_instances())
        self.assertIsNone(driver.libvirt_host.lookup(inst.uuid))
        self.assertFalse(os.path.exists(os.path.join(driver.config.instances_path, inst.uuid)))
        driver.destroy(inst)  # already gone: not an error

    def test_destroy_of_a_shut_off_guest(self):
        driver = self.start_driver()
        inst = instance(DISKLESS)
        driver.spawn(inst)
        driver.libvirt_host.lookup(inst.uuid).destroy()
        self.assertEqual([inst.uuid], driver.list_instances())
        driver.destroy(inst)
        self.assertEqual([], driver.list_instances())

    def test_spawn_twice_is_refused(self):
        driver = self.start_driver()
        inst = instance(DISKLESS)
        driver.spawn(inst)
        self.assertRaises(GuestExists, driver.spawn, inst)

    def test_spawn_failure_leaves_nothing_behind(self):
        inst = instance()
        # Another guest already holds the domain name, with another uuid.
        clash = GuestSpec(name=guest_xml.domain_name(inst), uuid=str(uuid.uuid4()))
        driver = self.start_driver(HostSpec(guests=[clash]))
        exc = self.assertRaises(SpawnFailed, driver.spawn, inst)
        self.assertIn(inst.uuid, str(exc))
        self.assertEqual([clash.uuid], driver.list_instances())
        self.assertFalse(os.path.exists(os.path.join(driver.config.instances_path, inst.uuid)))

    def test_driver_reconnects_after_a_daemon_restart(self):
        self.require("reconnect")
        driver = self.start_driver()
        inst = instance(DISKLESS)
        driver.spawn(inst)
        old = driver.libvirt_host.connection()
        self.backend.fixture.restart_daemon()
        self.assertFalse(old.isAlive())
        self.assertEqual(1, self.report(driver).vcpus_used)
        self.assertEqual([inst.uuid], driver.list_instances())
        self.assertIsNot(old, driver.libvirt_host.connection())

    def test_list_instances_includes_shut_off_guests(self):
        on = GuestSpec(name="on", uuid=str(uuid.uuid4()))
        off = GuestSpec(name="off", uuid=str(uuid.uuid4()), running=False)
        driver = self.start_driver(HostSpec(guests=[on, off]))
        self.assertEqual(sorted([on.uuid, off.uuid]), sorted(driver.list_instances()))

    def test_overhead_isolated_emulator_threads_cost_one_vcpu(self):
        driver = self.start_driver()
        isolated = Flavor(name="pinned", vcpus=4, memory_mb=1024, extra_specs={
            "hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"})
        self.assertEqual(Overhead(vcpus=1), driver.estimate_instance_overhead(isolated))
        self.assertEqual(Overhead(vcpus=1),
                         driver.estimate_instance_overhead(instance(isolated)))
        self.assertEqual(Overhead(), driver.estimate_instance_overhead(SMALL))

    def test_overhead_configured_memory(self):
        driver = self.start_driver(libvirt_options={"instance_memory_overhead_mb": "64"})
        self.assertEqual(Overhead(memory_mb=64), driver.estimate_instance_overhead(SMALL))


class LifecycleFakeTest(LifecycleTests, base.FakeBackendCase):
    pass


class LifecycleRealTest(LifecycleTests, base.RealBackendCase):
    pass
