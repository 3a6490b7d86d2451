"""``virConnect`` and ``virNodeDevice`` of the fake, and the ``open*`` functions.

Return shapes follow libvirt-python: ``getInfo()`` is ``[model, memory MiB,
active CPUs, MHz, NUMA nodes, sockets per node, cores per socket, threads
per core]``; ``getCPUMap()`` is ``(CPU count, [online flags], online
count)``; versions are ints (major * 1,000,000 + minor * 1,000 + release).
"""

from nova_lite_libvirt.testing.fakelibvirt import constants as c
from nova_lite_libvirt.testing.fakelibvirt import hypervisor as hv
from nova_lite_libvirt.testing.fakelibvirt.domain import virDomain
from nova_lite_libvirt.testing.fakelibvirt.errors import libvirtError, make_error

#: listAllDevices flags and the capability each filters on (those the fake has).
_CAP_FLAGS = ((c.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV, "pci"),
              (c.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES, "mdev_types"),
              (c.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV, "mdev"))

#: What the fake module's ``getVersion()`` reports as the library version.
FAKE_LIBRARY_VERSION = 9000000


class virNodeDevice:  # noqa: N801  (libvirt-python's name)
    """A node device handle: a PCI function, a GPU or a mediated device."""

    def __init__(self, conn, name):
        self._conn = conn
        self._name = name

    def _entry(self):
        entry = self._conn._hypervisor.node_devices().get(self._name)
        if entry is None:
            raise make_error(c.VIR_ERR_NO_NODE_DEVICE, f"Node device not found: no node "
                             f"device with matching name '{self._name}'", c.VIR_FROM_NODEDEV)
        return entry

    def name(self):
        return self._name

    def XMLDesc(self, flags=0):  # noqa: N802
        return self._entry()[0]

    def parent(self):
        return self._entry()[1]

    def listCaps(self):  # noqa: N802
        # As libvirt's test driver: the device's own capability only.
        return [self._entry()[2][0]]


class virConnect:  # noqa: N801  (libvirt-python's name)
    """A connection to a :class:`~.hypervisor.FakeHypervisor`."""

    def __init__(self, uri, hypervisor):
        self._uri = uri
        self._hypervisor = hypervisor
        self._generation = hypervisor.generation
        self._closed = False

    def _check(self):
        if self._closed:
            raise make_error(c.VIR_ERR_INVALID_CONN, "invalid connection pointer in "
                             "virConnect", c.VIR_FROM_NONE)
        if self._generation != self._hypervisor.generation:
            raise make_error(c.VIR_ERR_SYSTEM_ERROR, "Cannot write data: Broken pipe",
                             c.VIR_FROM_RPC)

    # -- connection ---------------------------------------------------------
    def close(self):
        self._closed = True
        return 0

    def isAlive(self):  # noqa: N802
        return int(not self._closed and self._generation == self._hypervisor.generation)

    def getURI(self):  # noqa: N802
        self._check()
        return self._uri

    # -- host -----------------------------------------------------------------
    def getHostname(self):  # noqa: N802
        self._check()
        return self._hypervisor.spec.hostname

    def getType(self):  # noqa: N802
        self._check()
        return self._hypervisor.spec.hypervisor_type

    def getVersion(self):  # noqa: N802
        self._check()
        return self._hypervisor.spec.hypervisor_version

    def getLibVersion(self):  # noqa: N802
        self._check()
        return self._hypervisor.spec.lib_version

    def getInfo(self):  # noqa: N802
        self._check()
        return self._hypervisor.node_info()

    def getCPUMap(self, flags=0):  # noqa: N802
        self._check()
        return self._hypervisor.cpu_map()

    def getCapabilities(self):  # noqa: N802
        self._check()
        return self._hypervisor.capabilities()

    def getDomainCapabilities(self, emulatorbin=None, arch=None, machine=None,  # noqa: N802
                              virttype=None, flags=0):
        self._check()
        return self._hypervisor.domain_capabilities(emulatorbin, arch, machine, virttype)

    def baselineCPU(self, xmlCPUs, flags=0):  # noqa: N802, N803
        self._check()
        return self._hypervisor.baseline_cpu(list(xmlCPUs), flags)

    # -- domains ----------------------------------------------------------------
    def listAllDomains(self, flags=0):  # noqa: N802
        self._check()
        recs = self._hypervisor.domains()
        if flags & c.VIR_CONNECT_LIST_DOMAINS_ACTIVE and not \
                flags & c.VIR_CONNECT_LIST_DOMAINS_INACTIVE:
            recs = [r for r in recs if r.active]
        elif flags & c.VIR_CONNECT_LIST_DOMAINS_INACTIVE and not \
                flags & c.VIR_CONNECT_LIST_DOMAINS_ACTIVE:
            recs = [r for r in recs if not r.active]
        if flags & c.VIR_CONNECT_LIST_DOMAINS_PERSISTENT:
            recs = [r for r in recs if r.persistent]
        if flags & c.VIR_CONNECT_LIST_DOMAINS_TRANSIENT:
            recs = [r for r in recs if not r.persistent]
        return [virDomain(self, r.uuid) for r in recs]

    def listDomainsID(self):  # noqa: N802
        self._check()
        return [r.id for r in self._hypervisor.domains() if r.active]

    def listDefinedDomains(self):  # noqa: N802
        self._check()
        return [r.name for r in self._hypervisor.domains() if not r.active]

    def lookupByUUIDString(self, uuid):  # noqa: N802
        self._check()
        return virDomain(self, self._hypervisor.domain(uuid).uuid)

    def lookupByName(self, name):  # noqa: N802
        self._check()
        return virDomain(self, self._hypervisor.by_name(name).uuid)

    def lookupByID(self, dom_id):  # noqa: N802
        self._check()
        return virDomain(self, self._hypervisor.by_id(dom_id).uuid)

    def defineXML(self, xml):  # noqa: N802
        self._check()
        return virDomain(self, self._hypervisor.define(xml).uuid)

    def createXML(self, xml, flags=0):  # noqa: N802
        self._check()
        rec = self._hypervisor.define(xml, persistent=False)
        self._hypervisor.start(rec.uuid)
        return virDomain(self, rec.uuid)

    # -- node devices -------------------------------------------------------------
    def listAllDevices(self, flags=0):  # noqa: N802
        self._check()
        # A device matches when it has any capability the flags ask for.
        wanted = {cap for flag, cap in _CAP_FLAGS if flags & flag}
        return [virNodeDevice(self, name)
                for name, (_xml, _parent, caps) in self._hypervisor.node_devices().items()
                if not flags or wanted & set(caps)]

    def listDevices(self, cap, flags=0):  # noqa: N802
        self._check()
        return [name for name, (_xml, _parent, caps) in self._hypervisor.node_devices().items()
                if cap is None or cap in caps]

    def nodeDeviceLookupByName(self, name):  # noqa: N802
        self._check()
        dev = virNodeDevice(self, name)
        dev._entry()
        return dev


def open(uri=None):  # noqa: A001  (libvirt-python's name)
    """Connect to the fake hypervisor registered for ``uri``."""
    uri = uri or "qemu:///system"
    return virConnect(uri, hv.lookup(uri))


def openReadOnly(uri=None):  # noqa: N802
    return open(uri)


def openAuth(uri, auth=None, flags=0):  # noqa: N802
    return open(uri)


_error_handler = [None, None]


def registerErrorHandler(f, ctx):  # noqa: N802
    """Record the handler (the fake never prints errors); returns 1 like libvirt."""
    _error_handler[:] = [f, ctx]
    return 1


def getVersion(name=None):  # noqa: N802
    """The (fake) library version."""
    return FAKE_LIBRARY_VERSION


__all__ = ["libvirtError", "open", "openAuth", "openReadOnly", "registerErrorHandler",
           "getVersion", "virConnect", "virNodeDevice"]
