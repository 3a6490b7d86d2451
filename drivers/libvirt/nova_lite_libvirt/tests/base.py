"""Test cases that run one set of driver tests on each libvirt backend.

A test module writes its tests once, in a mixin, and binds it to both
backends::

    class HostModelFakeTest(HostModelTests, base.FakeBackendCase): pass
    class HostModelRealTest(HostModelTests, base.RealBackendCase): pass

``start_driver(spec, ...)`` loads the driver through its real entry point,
connected to the backend's host for ``spec``; ``self.spec`` is then the
host as the backend reports it (see ``backends.TEST_DRIVER_DIFFERENCES``).
"""

import os
import struct

import fixtures
import testtools

from nova_lite import conf
from nova_lite.virt import loader

from nova_lite_libvirt.testing import HostSpec
from nova_lite_libvirt.tests import backends

GiB = 1024 ** 3
MiB = 1024 ** 2
HOST = "test-host"


def write_meminfo(directory, free_kib, buffers_kib=0, cached_kib=0, name="meminfo"):
    """A /proc/meminfo look-alike; returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="ascii") as handle:
        handle.write(f"MemTotal:       99999999 kB\nMemFree:        {free_kib} kB\n"
                     f"MemAvailable:   99999999 kB\nBuffers:        {buffers_kib} kB\n"
                     f"Cached:         {cached_kib} kB\nSwapCached:            0 kB\n")
    return path


def fixed_statvfs(total_gb=100, used_gb=40, free_gb=50, frsize=4096):
    """A statvfs function reporting fixed sizes (GiB) for any path."""
    blocks, bfree, bavail = (g * GiB // frsize for g in (total_gb, total_gb - used_gb, free_gb))

    def statvfs(path):
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        return os.statvfs_result((frsize, frsize, blocks, bfree, bavail, 1000, 500, 500, 0,
                                  255))
    return statvfs


def write_sparse(path, size_bytes):
    """A raw disk image: ``size_bytes`` long, no block allocated."""
    with open(path, "wb") as handle:
        handle.truncate(size_bytes)
    return path


def write_qcow2(path, virtual_bytes, allocated_bytes):
    """A qcow2 header claiming ``virtual_bytes``, padded with real data to
    ``allocated_bytes`` (so the file occupies exactly that much)."""
    header = struct.pack(">4sIQIIQ", b"QFI\xfb", 3, 0, 0, 16, virtual_bytes)
    chunk = b"\x01" * MiB
    with open(path, "wb") as handle:
        handle.write(header)
        remaining = allocated_bytes - len(header)
        while remaining > 0:
            part = chunk[:min(remaining, len(chunk))]
            handle.write(part)
            remaining -= len(part)
    return path


class DriverCase(testtools.TestCase):
    """Base of backend-bound driver tests; subclasses set ``backend_class``."""

    backend_class = None

    def setUp(self):
        super().setUp()
        self.backend = self.backend_class()
        self.backend.check_available(self)
        self.tmp = self.useFixture(fixtures.TempDir()).path
        # 10 GiB available unless a test writes its own meminfo.
        self.meminfo_path = write_meminfo(self.tmp, free_kib=6 * GiB // 1024,
                                          buffers_kib=1 * GiB // 1024,
                                          cached_kib=3 * GiB // 1024)
        self.statvfs = fixed_statvfs()
        self.spec = None

    def require(self, feature):
        """Skip on a backend that cannot express ``feature``, citing why."""
        if feature in self.backend.lacks:
            self.skipTest(f"{self.backend.name} backend cannot express {feature}: "
                          f"{self.backend.lacks[feature]}")

    def libvirt_settings(self, uri, libvirt_options=None, sections=None, **options):
        """Settings for ``uri``: ``[libvirt]`` from ``libvirt_options``,
        other INI sections from ``sections`` (``{name: {option: value}}``)."""
        sections = {**(sections or {}), "libvirt": dict(libvirt_options or {})}
        return conf.Settings(host=HOST, state_path=self.tmp, libvirt_connection_uri=uri,
                             sections=sections, **options)

    def make_libvirt_driver(self, spec=None, libvirt_options=None, sections=None, **options):
        """Load the driver for ``spec`` on this backend (not yet init_host-ed)."""
        uri, self.spec = self.backend.start(self, spec if spec is not None else HostSpec())
        settings = self.libvirt_settings(uri, libvirt_options, sections, **options)
        driver = loader.load_driver("libvirt", settings=settings,
                                    meminfo_path=self.meminfo_path, statvfs=self.statvfs)
        self.addCleanup(driver.close)
        return driver

    def start_driver(self, spec=None, libvirt_options=None, sections=None, **options):
        """Load and ``init_host`` the driver; returns it."""
        driver = self.make_libvirt_driver(spec, libvirt_options, sections, **options)
        driver.init_host(HOST)
        return driver

    def report(self, driver):
        """The driver's NodeResources for its one node."""
        (node,) = driver.get_available_nodes()
        return driver.get_available_resource(node)


class FakeBackendCase(DriverCase):
    backend_class = backends.FakeBackend


class RealBackendCase(DriverCase):
    backend_class = backends.RealTestDriverBackend
