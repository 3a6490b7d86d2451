"""nova-lite-noop: a virt driver for one node that runs nothing.

Register it in the distribution's setup.cfg::

    [options.entry_points]
    nova_lite.virt.drivers =
        noop = nova_lite_noop:NoopDriver
"""

from nova_lite.virt import driver


class NoopDriver(driver.ComputeDriver):
    """One node named after the host; guests are remembered, never run."""

    api_versions = ("1.0",)                       # contract versions spoken
    capabilities = driver.Capabilities(supports_lifecycle=True, supports_pci=True)

    def __init__(self, settings=None, vcpus=8, memory_mb=16384, local_gb=100):
        super().__init__(settings=settings)       # keeps settings, sets host
        self.sizes = (vcpus, memory_mb, local_gb)
        self.guests = {}                          # instance uuid -> Flavor

    def init_host(self, host):
        self.host = host

    def get_available_nodes(self, refresh=False):
        return [self.host]

    def get_available_resource(self, nodename):
        if nodename != self.host:
            raise LookupError(f"noop node {nodename!r} does not exist")
        vcpus, memory_mb, local_gb = self.sizes
        flavors = list(self.guests.values())
        return driver.NodeResources(
            vcpus=vcpus, memory_mb=memory_mb, local_gb=local_gb,
            vcpus_used=sum(f.vcpus for f in flavors),
            memory_mb_used=sum(f.memory_mb for f in flavors),
            local_gb_used=sum(f.root_gb + f.ephemeral_gb for f in flavors),
            hypervisor_type="noop", hypervisor_version=1,
            hypervisor_hostname=nodename,
            pci_devices=[driver.PciDevice(address="0000:81:00.0", vendor_id="10de",
                                          product_id="1db4",   # for passthrough
                                          traits={"CUSTOM_NOOP_GPU"})],
            traits={"CUSTOM_NOOP"},   # os-traits names or CUSTOM_*
            providers=[driver.ChildProvider(name=f"{nodename}_gpu0",   # a vGPU device
                                            inventories={"VGPU": driver.Inventory(total=2)})])

    def estimate_instance_overhead(self, instance_or_flavor):
        return driver.Overhead(memory_mb=0)       # a real hypervisor: its footprint

    def spawn(self, instance):
        self.guests[instance.uuid] = instance.flavor

    def destroy(self, instance):
        self.guests.pop(instance.uuid, None)

    def list_instances(self):
        return sorted(self.guests)
