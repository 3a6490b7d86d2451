"""``Host``: one libvirt connection and typed answers from it.

The connection opens lazily (importing libvirt-python then, through
:mod:`nova_lite_libvirt.libvirt_api`) and is reused: libvirt connections are
thread-safe, and the ``test:///<file>`` driver keeps its state per
connection.  :meth:`Host.ensure_connected` reopens one libvirt reports dead.

Answers that only change when libvirt or QEMU does (the host CPU's
expanded features, domain capabilities) are asked once per connection:
a new connection (a restarted daemon, an upgrade) asks again.
"""

import logging
import threading

import attrs

from nova_lite_libvirt import host_traits, libvirt_api
from nova_lite_libvirt.capabilities import (
    cpu_definition_xml, parse_capabilities, parse_cpu_features)
from nova_lite_libvirt.cpus import online_cpus_from_map
from nova_lite_libvirt.domain_caps import parse_domain_capabilities
from nova_lite_libvirt.errors import LibvirtConnectionError
from nova_lite_libvirt.mdev import parse_mdev_parent, parse_mediated_device
from nova_lite_libvirt.nodedev import parse_pci_device

LOG = logging.getLogger(__name__)


@attrs.frozen
class NodeInfo:
    """``virConnect.getInfo()``: ``memory_mib`` MiB, ``mhz`` MHz; the CPU
    topology counts are per NUMA node (sockets) and per socket (cores)."""

    model: str
    memory_mib: int
    cpus: int
    mhz: int
    nodes: int
    sockets: int
    cores: int
    threads: int


@attrs.frozen
class GuestInfo:
    """One domain: ``memory_kib`` current memory in KiB, ``vcpus`` count."""

    uuid: str
    name: str
    running: bool
    memory_kib: int
    vcpus: int


class Host:
    """A lazily opened libvirt connection to ``uri``."""

    def __init__(self, uri):
        self.uri = uri
        self._conn = None
        self._libvirt = None
        self._hostname = None
        self._lock = threading.Lock()
        #: Answers kept for the life of the connection (see the module docstring).
        self._per_connection = {}
        #: Counts the connections opened; the number of the current one.
        self.connection_number = 0

    # -- connection --------------------------------------------------------
    @property
    def libvirt(self):
        """The libvirt module in use (real, or the fake a fixture installed)."""
        if self._libvirt is None:
            self._libvirt = libvirt_api.import_libvirt()
        return self._libvirt

    def connection(self):
        """The open ``virConnect``, opened on first use.

        :raises LibvirtConnectionError: naming the URI and libvirt's error.
        :raises LibvirtUnavailable: if libvirt-python is not installed.
        """
        with self._lock:
            if self._conn is None:
                libvirt = self.libvirt
                libvirt_api.silence_default_error_handler(libvirt)
                try:
                    self._conn = libvirt.open(self.uri)
                except libvirt.libvirtError as exc:
                    raise LibvirtConnectionError(
                        f"cannot connect to libvirt at {self.uri}: {exc}") from exc
                self._per_connection = {}
                self.connection_number += 1
                LOG.info("Connected to libvirt at %s", self.uri)
            return self._conn

    def ensure_connected(self):
        """Open the connection, or reopen it if libvirt says it is dead.

        Called once at the start of each driver operation, so a restarted
        daemon is picked up without a liveness round trip on every call.
        """
        with self._lock:
            conn = self._conn
        if conn is not None and not self._alive(conn):
            LOG.warning("libvirt connection to %s is dead; reconnecting", self.uri)
            with self._lock:
                if self._conn is conn:
                    self._conn = None
        return self.connection()

    def _alive(self, conn):
        try:
            return bool(conn.isAlive())
        except self.libvirt.libvirtError:
            return False

    def close(self):
        """Close the connection if open (a later call reopens it)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except self.libvirt.libvirtError as exc:
                LOG.debug("Closing libvirt connection to %s: %s", self.uri, exc)

    def is_missing_domain(self, exc):
        """True if ``exc`` is libvirt's "no such domain" error."""
        return isinstance(exc, self.libvirt.libvirtError) and \
            exc.get_error_code() == self.libvirt.VIR_ERR_NO_DOMAIN

    # -- host facts ----------------------------------------------------------
    def hostname(self):
        """The hypervisor's hostname as first seen.

        A later change is logged at ERROR and ignored: the node keeps its
        name until the service restarts.
        """
        current = self.connection().getHostname()
        if self._hostname is None:
            self._hostname = current
        elif current != self._hostname:
            LOG.error("libvirt at %s now reports hostname %r instead of %r; keeping %r "
                      "until the service restarts", self.uri, current, self._hostname,
                      self._hostname)
        return self._hostname

    def node_info(self):
        """``getInfo()`` as a :class:`NodeInfo`."""
        model, memory, cpus, mhz, nodes, sockets, cores, threads = \
            self.connection().getInfo()[:8]
        return NodeInfo(model=model, memory_mib=memory, cpus=cpus, mhz=mhz, nodes=nodes,
                        sockets=sockets, cores=cores, threads=threads)

    def online_cpus(self):
        """Online host CPU ids, from ``getCPUMap()``."""
        return online_cpus_from_map(self.connection().getCPUMap())

    def capabilities(self):
        """Parsed ``getCapabilities()``."""
        return parse_capabilities(self.connection().getCapabilities())

    def hypervisor_type(self):
        """``getType()``: "QEMU", "LXC", "TEST", ..."""
        return self.connection().getType()

    def hypervisor_version(self):
        """``getVersion()``: major * 1,000,000 + minor * 1,000 + release."""
        return self.connection().getVersion()

    def lib_version(self):
        """``getLibVersion()``, same encoding as :meth:`hypervisor_version`."""
        return self.connection().getLibVersion()

    def _kept(self, key, compute):
        """``compute()``, asked once per connection for ``key``."""
        cache = self._per_connection
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    def expanded_cpu_features(self, caps):
        """The host CPU's features with those its model implies, or None.

        ``baselineCPU`` of the host CPU of ``caps`` with
        ``VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES``, as Nova asks it.  None
        (use the capabilities' list) for a CPU without a model, on aarch64
        (libvirt expands no features there), or when libvirt cannot answer:
        that is logged at WARNING once per connection, and never raised.
        """
        flag = getattr(self.libvirt, "VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES", None)
        if not caps.model or caps.arch == "aarch64" or flag is None:
            return None
        definition = cpu_definition_xml(caps)
        return self._kept(("baseline", definition), lambda: self._baseline(definition, flag))

    def _baseline(self, definition, flag):
        libvirt = self.libvirt
        try:
            answer = self.connection().baselineCPU([definition], flag)
            return parse_cpu_features(answer)
        except (libvirt.libvirtError, ValueError, TypeError) as exc:
            LOG.warning("libvirt at %s cannot expand the host CPU's features (%s); the CPU "
                        "feature traits are those the capabilities list", self.uri, exc)
            return None

    def domain_capabilities(self, caps, virt_type):
        """:class:`~nova_lite_libvirt.domain_caps.DomainCapabilities` of every
        guest arch of ``caps`` offering ``virt_type``, asked once per
        connection for the arch's default machine type and each alias.

        An answer libvirt refuses (the test driver has none; KVM may not
        serve a foreign arch) or that does not parse is logged at DEBUG and
        left out.
        """
        return self._kept(("domain_caps", virt_type),
                          lambda: tuple(self._domain_capabilities(caps, virt_type)))

    def _domain_capabilities(self, caps, virt_type):
        libvirt = self.libvirt
        asked, answers = set(), []
        for guest in caps.guests:
            domain = guest.domain(virt_type)
            if domain is None:
                continue
            for machine in host_traits.machine_types(guest.arch, domain.machine_aliases):
                if (guest.arch, machine) in asked:
                    continue
                asked.add((guest.arch, machine))
                try:
                    answer = parse_domain_capabilities(self.connection().getDomainCapabilities(
                        domain.emulator or None, guest.arch, machine, virt_type, 0))
                except (libvirt.libvirtError, ValueError, TypeError) as exc:
                    LOG.debug("No domain capabilities from libvirt at %s for arch %s, "
                              "machine type %s, domain type %s: %s", self.uri, guest.arch,
                              machine, virt_type, exc)
                    continue
                if answer not in answers:
                    answers.append(answer)
        return answers

    # -- guests ----------------------------------------------------------------
    def domains(self, only_running=False):
        """Guest domains (Xen's Domain-0, ID 0, is not a guest)."""
        libvirt = self.libvirt
        flags = libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE if only_running else 0
        return [d for d in self.connection().listAllDomains(flags) if d.ID() != 0]

    def guests(self, only_running=False):
        """:class:`GuestInfo` of each guest; one that vanishes meanwhile is skipped."""
        result = []
        for dom in self.domains(only_running=only_running):
            try:
                state, _max_kib, mem_kib, vcpus, _cpu_ns = dom.info()
                result.append(GuestInfo(
                    uuid=dom.UUIDString(), name=dom.name(),
                    running=state != self.libvirt.VIR_DOMAIN_SHUTOFF,
                    memory_kib=mem_kib, vcpus=vcpus))
            except self.libvirt.libvirtError as exc:
                if not self.is_missing_domain(exc):
                    raise
                LOG.debug("Guest vanished while listing: %s", exc)
        return result

    def guest_xmls(self):
        """``(name, XML)`` of every guest, running or shut off."""
        result = []
        for dom in self.domains():
            try:
                result.append((dom.name(), dom.XMLDesc(0)))
            except self.libvirt.libvirtError as exc:
                if not self.is_missing_domain(exc):
                    raise
                LOG.debug("Guest vanished while reading its XML: %s", exc)
        return result

    def lookup(self, uuid):
        """The domain with ``uuid``, or None."""
        try:
            return self.connection().lookupByUUIDString(uuid)
        except self.libvirt.libvirtError as exc:
            if self.is_missing_domain(exc):
                return None
            raise

    def define(self, xml):
        """``defineXML``: a persistent, shut-off domain."""
        return self.connection().defineXML(xml)

    # -- devices -----------------------------------------------------------------
    def _list_devices(self, flag_name, what):
        """``listAllDevices`` with the capability flag ``flag_name``; [] (with
        a WARNING) when libvirt cannot list node devices or has no such flag."""
        libvirt = self.libvirt
        flag = getattr(libvirt, flag_name, None)
        if flag is None:
            LOG.warning("libvirt-python %s cannot list %s (it has no %s)",
                        getattr(libvirt, "getVersion", lambda: "?")(), what, flag_name)
            return []
        try:
            return self.connection().listAllDevices(flag)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT:
                LOG.warning("libvirt at %s cannot list %s: %s", self.uri, what, exc)
                return []
            raise

    def _parsed_devices(self, flag_name, parse, what):
        """``parse(XML, name)`` of each device listed with ``flag_name``.

        A device that vanishes meanwhile is skipped (DEBUG); one whose XML
        ``parse`` refuses is logged at WARNING, naming it, and left out.
        """
        libvirt = self.libvirt
        result = []
        for dev in self._list_devices(flag_name, what):
            try:
                name = dev.name()
                parsed = parse(dev.XMLDesc(0), name)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_NODE_DEVICE:
                    raise
                LOG.debug("Node device vanished while listing %s: %s", what, exc)
                continue
            except ValueError as exc:
                LOG.warning("Skipping %s: %s", what.rstrip("s"), exc)
                continue
            if parsed is not None:
                result.append(parsed)
        return result

    def mdev_parents(self):
        """:class:`~nova_lite_libvirt.mdev.MdevParent` of every node device
        offering mediated device types, by name (``listAllDevices`` with
        ``VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES``)."""
        return sorted(self._parsed_devices("VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES",
                                           parse_mdev_parent, "mediated device parents"),
                      key=lambda p: p.name)

    def mediated_devices(self):
        """:class:`~nova_lite_libvirt.mdev.MediatedDevice` of every mediated
        device created, by name (``VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV``)."""
        return sorted(self._parsed_devices("VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV",
                                           parse_mediated_device, "mediated devices"),
                      key=lambda m: m.name)

    def pci_devices(self):
        """:class:`~nova_lite.objects.PciDevice` records of the host, by address.

        A device whose XML cannot be parsed is logged and left out.
        """
        libvirt = self.libvirt
        try:
            devices = self.connection().listAllDevices(
                libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT:
                LOG.warning("libvirt at %s cannot list node devices: %s", self.uri, exc)
                return []
            raise
        result = []
        for dev in devices:
            try:
                parsed = parse_pci_device(dev.XMLDesc(0))
            except ValueError as exc:
                LOG.warning("Skipping PCI device: %s", exc)
                continue
            if parsed is not None:
                result.append(parsed)
        return sorted(result, key=lambda d: d.address)
