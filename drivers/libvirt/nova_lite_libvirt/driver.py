"""``LibvirtDriver``: nova-lite's virt driver for a libvirt host.

One node per service, named after the hypervisor's hostname.  Settings:
see :mod:`nova_lite_libvirt.config`; the figures reported: see
:mod:`nova_lite_libvirt.host_model`; the traits: see
:mod:`nova_lite_libvirt.host_traits`.
"""

import logging
import os
import shutil

from nova_lite.exception import NodeNotFound
from nova_lite.objects import Overhead
from nova_lite.virt import driver

from nova_lite_libvirt import guest_xml
from nova_lite_libvirt.config import LibvirtConfig, LibvirtOptions
from nova_lite_libvirt.errors import GuestExists, LibvirtDriverError, SpawnFailed
from nova_lite_libvirt.host import Host
from nova_lite_libvirt.host_model import HostModel
from nova_lite_libvirt.meminfo import DEFAULT_MEMINFO_PATH

LOG = logging.getLogger(__name__)

#: Flavor extra spec asking for the emulator threads on a CPU of their own.
EMULATOR_THREADS_POLICY = "hw:emulator_threads_policy"


class LibvirtDriver(driver.ComputeDriver):
    """A libvirt host (QEMU/KVM, or any libvirt driver) as one nova-lite node.

    :param settings: :class:`nova_lite.conf.Settings`.
    :param meminfo_path: file read for host memory used (``/proc/meminfo``).
    :param statvfs: function returning filesystem figures for
        ``instances_path`` (``os.statvfs``).
    """

    api_versions = ("1.0",)
    # None of Nova's trait-bearing capabilities: spawn defines a guest from the
    # flavor alone (blank disks; no image, volume, interface, tag or firmware).
    capabilities = driver.Capabilities(
        supports_lifecycle=True, supports_numa=True, supports_pci=True, supports_pcpus=True)
    #: The ``[libvirt]`` options (see :mod:`nova_lite_libvirt.config`).
    options = LibvirtOptions

    def __init__(self, settings=None, meminfo_path=DEFAULT_MEMINFO_PATH, statvfs=None):
        super().__init__(settings=settings)
        self.config = LibvirtConfig.from_settings(self.settings)
        self.libvirt_host = Host(self.config.connection_uri)
        self.model = HostModel(self.libvirt_host, self.config, meminfo_path=meminfo_path,
                               statvfs=statvfs or os.statvfs)

    # -- required ----------------------------------------------------------
    def init_host(self, host):
        """Connect, create ``instances_path`` and check the CPU options.

        :raises CPUSetNotOnline: if a CPU option names CPUs not online.
        :raises LibvirtConnectionError: if libvirt cannot be reached.
        """
        self.host = host
        try:
            os.makedirs(self.config.instances_path, exist_ok=True)
        except OSError as exc:
            raise LibvirtDriverError(f"cannot create instances_path "
                                     f"{self.config.instances_path}: {exc.strerror}") from exc
        self.libvirt_host.ensure_connected()
        selection = self.model.cpu_selection()
        LOG.info("libvirt host %s at %s: %d shared and %d dedicated CPUs of %d online",
                 self.libvirt_host.hostname(), self.config.connection_uri, len(selection.shared),
                 len(selection.dedicated), len(selection.online))

    def get_available_nodes(self, refresh=False):
        """``[hostname]``: the single node of a libvirt host."""
        self.libvirt_host.ensure_connected()
        return [self.libvirt_host.hostname()]

    def get_available_resource(self, nodename):
        """:class:`NodeResources` of the host; ``nodename`` must be its name."""
        self.libvirt_host.ensure_connected()
        if nodename != self.libvirt_host.hostname():
            raise NodeNotFound(nodename, self.host)
        return self.model.resources()

    # -- optional ------------------------------------------------------------
    def estimate_instance_overhead(self, instance_or_flavor):
        """One extra vCPU with ``hw:emulator_threads_policy=isolate``, plus
        ``[libvirt] instance_memory_overhead_mb`` MiB per instance."""
        flavor = driver.instance_flavor(instance_or_flavor)
        isolate = str(flavor.extra_specs.get(EMULATOR_THREADS_POLICY, "")).lower() == "isolate"
        return Overhead(memory_mb=self.config.instance_memory_overhead_mb,
                        vcpus=1 if isolate else 0)

    # -- lifecycle --------------------------------------------------------------
    def spawn(self, instance):
        """Define and start a guest for ``instance`` (``defineXML`` + ``create``).

        :raises GuestExists: if a domain with the instance's uuid exists.
        :raises SpawnFailed: carrying libvirt's error; nothing is left behind.
        """
        self.libvirt_host.ensure_connected()
        if self.libvirt_host.lookup(instance.uuid) is not None:
            raise GuestExists(f"instance {instance.uuid} already has a libvirt domain")
        directory = guest_xml.instance_dir(self.config.instances_path, instance)
        guest_xml.create_disk_files(directory, guest_xml.disk_files(instance.flavor))
        xml = guest_xml.domain_xml(instance, self.config.virt_type, directory)
        libvirt = self.libvirt_host.libvirt
        dom = None
        try:
            dom = self.libvirt_host.define(xml)
            dom.create()
        except libvirt.libvirtError as exc:
            if dom is not None:
                self._undefine(dom)
            shutil.rmtree(directory, ignore_errors=True)
            raise SpawnFailed(f"libvirt could not start instance {instance.uuid}: {exc}") \
                from exc
        LOG.info("Spawned instance %s as domain %s", instance.uuid, dom.name())

    def destroy(self, instance):
        """Stop and undefine the guest, then remove its files.

        A guest that is already gone is not an error.
        """
        self.libvirt_host.ensure_connected()
        dom = self.libvirt_host.lookup(instance.uuid)
        if dom is not None:
            libvirt = self.libvirt_host.libvirt
            try:
                if dom.isActive():
                    dom.destroy()
            except libvirt.libvirtError as exc:
                if exc.get_error_code() not in (libvirt.VIR_ERR_OPERATION_INVALID,
                                                libvirt.VIR_ERR_NO_DOMAIN):
                    raise
            self._undefine(dom)
            LOG.info("Destroyed instance %s", instance.uuid)
        shutil.rmtree(guest_xml.instance_dir(self.config.instances_path, instance),
                      ignore_errors=True)

    def list_instances(self):
        """UUIDs of every guest, running or shut off."""
        self.libvirt_host.ensure_connected()
        return [g.uuid for g in self.libvirt_host.guests()]

    def close(self):
        """Close the libvirt connection (reopened on next use)."""
        self.libvirt_host.close()

    def _undefine(self, dom):
        libvirt = self.libvirt_host.libvirt
        try:
            dom.undefine()
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                raise
