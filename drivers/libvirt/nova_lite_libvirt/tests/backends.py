"""The two libvirt backends the driver tests run on, and how they differ.

- ``fake``: the pure-Python fake libvirt (``FakeLibvirtFixture``), given the
  test's :class:`HostSpec` as it is.
- ``real``: libvirt-python on libvirt's built-in test driver,
  ``test:///<node file>`` (in-process, no daemon), the node file rendered
  per test from the same spec by :func:`node_xml`.

:data:`TEST_DRIVER_DIFFERENCES` is THE list of what the test driver cannot
express; :func:`as_test_driver_reports` applies it to a spec, giving the host
the real backend actually reports.  Tests compute their expectations from
that effective spec, so a difference is never hidden: the fake, given the
effective spec, must report exactly what the real library reports
(``test_fidelity``).  Tests that need a feature the test driver lacks call
``require(feature)``, which skips on the real backend citing the entry here.

The real tier FAILS, never skips, when libvirt-python is missing and
``NOVA_LITE_REQUIRE_ALL=1`` (CI sets it).
"""

import os

import attrs
import fixtures

from nova_lite_libvirt import libvirt_api
from nova_lite_libvirt.testing import FakeLibvirtFixture, node_xml

REQUIRE_ALL_ENV = "NOVA_LITE_REQUIRE_ALL"

#: What libvirt's test driver (``test:///<node file>``) cannot express.
#: Keys are the feature names tests pass to ``require()``.
TEST_DRIVER_DIFFERENCES = {
    "online_cpus": "getCPUMap always answers 8 CPUs with 0, 2 and 4 online, whatever the "
                   "node file says",
    "numa": "capabilities of a node file have no NUMA cells (only test:///default has "
            "its two fixed cells), so no NUMA topology, sibling sets or page counts",
    "cpu_model": "the host CPU in capabilities is always arch i686 with no model, vendor or "
                 "topology, and features pae and nonpae (the topology then comes from "
                 "getInfo, which does follow the node file); with no model there is "
                 "nothing for baselineCPU to expand (baselineCPU itself works, on libvirt's "
                 "real CPU map: test_real_defaults)",
    "guest_types": "capabilities offer i686 guests of OS types hvm and xen, domain type test, "
                   "emulator /usr/bin/test-hv and no machine types",
    "domain_capabilities": "getDomainCapabilities is not supported (VIR_ERR_NO_SUPPORT), so "
                           "no storage bus, graphics model or emulated arch traits",
    "hostname": "getHostname is the machine's own hostname",
    "versions": "getType is TEST, getVersion 2, getLibVersion the library's own version",
    "host_changes": "the node file is read once per connection, so host facts (hostname, "
                    "online CPUs) cannot change under a connected driver",
    "reconnect": "each test:///<file> connection has its own state, so a driver that "
                 "reconnects finds the node file's host again, without its guests",
    "start_running_error": "create() of a running domain fails with VIR_ERR_INTERNAL_ERROR; "
                           "QEMU and the fake say VIR_ERR_OPERATION_INVALID",
}


def require_all():
    """True when every test tier must run (``NOVA_LITE_REQUIRE_ALL=1``)."""
    return os.environ.get(REQUIRE_ALL_ENV, "").strip() == "1"


def real_libvirt_or_none():
    """(module, None) if real libvirt-python imports, else (None, reason)."""
    try:
        module = libvirt_api.import_libvirt()
    except libvirt_api.LibvirtUnavailable as exc:
        return None, str(exc)
    if getattr(module, "IS_FAKE", False):
        return None, "the fake libvirt module is installed in sys.modules"
    return module, None


def probe_test_driver(spec, directory):
    """What libvirt's test driver reports for facts a node file cannot set."""
    libvirt, why = real_libvirt_or_none()
    if libvirt is None:
        raise RuntimeError(why)
    path = os.path.join(directory, "probe-node.xml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(node_xml(attrs.evolve(spec, guests=())))
    libvirt_api.silence_default_error_handler(libvirt)
    conn = libvirt.open(f"test://{path}")
    try:
        _count, flags, _online = conn.getCPUMap()
        return {"hostname": conn.getHostname(), "hypervisor_type": conn.getType(),
                "hypervisor_version": conn.getVersion(), "lib_version": conn.getLibVersion(),
                "online_cpus": frozenset(i for i, up in enumerate(flags) if up)}
    finally:
        conn.close()


def as_test_driver_reports(spec, probed):
    """``spec`` as libvirt's test driver reports it (applies the differences)."""
    return attrs.evolve(
        spec,
        online_cpus=probed["online_cpus"],                          # online_cpus
        numa_in_capabilities=False,                                 # numa
        cpu_model="", cpu_vendor="", arch="i686",                   # cpu_model
        cpu_features=frozenset({"pae", "nonpae"}), cpu_model_features=frozenset(),
        guest_arch="i686", guest_os_types=("hvm", "xen"),           # guest_types
        domain_types=("test",), emulator="/usr/bin/test-hv", machines=(),
        domain_capabilities=False,                                  # domain_capabilities
        hostname=probed["hostname"],                                # hostname
        hypervisor_type=probed["hypervisor_type"],                  # versions
        hypervisor_version=probed["hypervisor_version"],
        lib_version=probed["lib_version"])


class FakeBackend:
    """The pure-Python fake libvirt."""

    name = "fake"
    lacks = {}

    def check_available(self, test):
        """Nothing to check: the fake always runs."""

    def start(self, test, spec):
        """Install the fake host; returns ``(uri, effective spec)``."""
        self.fixture = test.useFixture(FakeLibvirtFixture(spec))
        return "qemu:///system", spec


class RealTestDriverBackend:
    """libvirt-python on libvirt's ``test:///<node file>`` driver."""

    name = "real"
    lacks = TEST_DRIVER_DIFFERENCES

    def check_available(self, test):
        """Fail (CI) or skip (elsewhere) without real libvirt-python."""
        libvirt, why = real_libvirt_or_none()
        if libvirt is not None:
            return
        if require_all():
            test.fail(f"{REQUIRE_ALL_ENV}=1 but the real libvirt tier cannot run: {why}")
        test.skipTest(f"real libvirt tier skipped: {why} (set {REQUIRE_ALL_ENV}=1 to make "
                      "this a failure)")

    def start(self, test, spec):
        """Write the node file; returns ``(uri, effective spec)``."""
        directory = test.useFixture(fixtures.TempDir()).path
        path = os.path.join(directory, "node.xml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(node_xml(spec))
        return f"test://{path}", as_test_driver_reports(spec, probe_test_driver(spec,
                                                                               directory))
