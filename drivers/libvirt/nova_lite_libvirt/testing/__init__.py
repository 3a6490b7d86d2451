"""Test helpers for the libvirt driver, importable by other projects.

- :class:`HostSpec` (with :class:`PciDeviceSpec`, :class:`PciVFSpec`,
  :class:`GpuSpec`, :class:`MdevTypeSpec`, :class:`MdevSpec`,
  :class:`GuestSpec`, :class:`DiskSpec`, :class:`MachineSpec`): one record
  describing a host;
- :class:`FakeLibvirtFixture`: the pure-Python fake libvirt, driven by a spec;
- :func:`node_xml`: the same host as a node file for libvirt's own
  ``test:///<file>`` driver, and :func:`spec_from_node_xml` the way back.
"""

from nova_lite_libvirt.testing.fixture import FakeLibvirtFixture
from nova_lite_libvirt.testing.node_file import spec_from_node_xml
from nova_lite_libvirt.testing.spec import (
    DiskSpec, GpuSpec, GuestSpec, HostSpec, MachineSpec, MdevSpec, MdevTypeSpec, PciDeviceSpec,
    PciVFSpec)
from nova_lite_libvirt.testing.xml import node_xml

__all__ = ["DiskSpec", "FakeLibvirtFixture", "GpuSpec", "GuestSpec", "HostSpec", "MachineSpec",
           "MdevSpec", "MdevTypeSpec", "PciDeviceSpec", "PciVFSpec", "node_xml",
           "spec_from_node_xml"]
