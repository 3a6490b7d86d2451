"""nova_lite.testing.DriverConformanceTests on both backends."""

from nova_lite.testing import DriverConformanceTests

from nova_lite_libvirt.testing import GuestSpec, HostSpec, PciDeviceSpec, PciVFSpec
from nova_lite_libvirt.tests import base

SPEC = HostSpec(
    numa_nodes=2, sockets=1, cores=2, threads=2,
    guests=[GuestSpec(name="resident", uuid="8f1b7e4c-2f6a-4a0e-9c55-1f7d3a1c2b01", vcpus=2)],
    pci_devices=[PciDeviceSpec("0000:81:00.0", "8086", "1572", numa_node=1,
                               vfs=[PciVFSpec("0000:81:02.0", "154c")])])


class ConformanceMixin(DriverConformanceTests):
    driver_name = "libvirt"

    def make_driver(self):
        return self.make_libvirt_driver(SPEC, cpu_shared_set="0", cpu_dedicated_set="2,4")


class ConformanceFakeTest(ConformanceMixin, base.FakeBackendCase):
    pass


class ConformanceRealTest(ConformanceMixin, base.RealBackendCase):
    pass
