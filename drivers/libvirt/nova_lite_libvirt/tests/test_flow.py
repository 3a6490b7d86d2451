"""A whole build flow through the ResourceTracker, on both backends.

audit -> claim -> spawn -> audit -> destroy -> update_usage -> audit; the
tracked usage, the inventory and the hypervisor view agree at every step.
"""

import uuid

import attrs

from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.objects import Flavor, Instance

from nova_lite_libvirt.testing import HostSpec
from nova_lite_libvirt.tests import base

FLAVOR = Flavor(name="m1.pinned", vcpus=2, memory_mb=2048, root_gb=1,
                extra_specs={"hw:emulator_threads_policy": "isolate"})


class FlowTests:

    def usage(self, rt, nodename):
        node = rt.get_node(nodename)
        return {rc: node.used(rc) for rc in ("VCPU", "MEMORY_MB", "DISK_GB")}

    def test_build_and_delete_flow(self):
        driver = self.start_driver(HostSpec(memory_mib=16384),
                                   libvirt_options={"instance_memory_overhead_mb": "64"})
        rt = ResourceTracker(base.HOST, driver)
        (nodename,) = driver.get_available_nodes()

        rt.update_available_resource()
        node = rt.get_node(nodename)
        self.assertEqual(len(self.spec.online), node.inventory("VCPU").total)
        self.assertEqual(16384, node.inventory("MEMORY_MB").total)
        self.assertEqual(512, node.inventory("MEMORY_MB").reserved)
        self.assertEqual(100, node.inventory("DISK_GB").total)
        self.assertEqual({"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}, self.usage(rt, nodename))
        self.assertEqual(0, self.report(driver).vcpus_used)

        inst = Instance(uuid=str(uuid.uuid4()), flavor=FLAVOR, project_id="demo")
        with rt.instance_claim(inst, nodename=nodename):
            driver.spawn(inst)
        # Flavor + overhead (1 vCPU for isolated emulator threads, 64 MiB).
        expected = {"VCPU": 3, "MEMORY_MB": 2048 + 64, "DISK_GB": 1}
        self.assertEqual(expected, self.usage(rt, nodename))

        rt.update_available_resource()
        self.assertEqual(expected, self.usage(rt, nodename))
        report = self.report(driver)
        self.assertEqual(2, report.vcpus_used)       # the hypervisor's own view
        self.assertEqual(49, report.disk_available_least)
        self.assertEqual([inst.uuid], driver.list_instances())

        driver.destroy(inst)
        rt.update_usage(attrs.evolve(inst, vm_state="deleted"))
        zero = {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}
        self.assertEqual(zero, self.usage(rt, nodename))

        rt.update_available_resource()
        self.assertEqual(zero, self.usage(rt, nodename))
        report = self.report(driver)
        self.assertEqual((0, 50), (report.vcpus_used, report.disk_available_least))
        self.assertEqual([], driver.list_instances())


class FlowFakeTest(FlowTests, base.FakeBackendCase):
    pass


class FlowRealTest(FlowTests, base.RealBackendCase):
    pass
