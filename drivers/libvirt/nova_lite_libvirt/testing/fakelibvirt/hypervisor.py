"""``FakeHypervisor``: the state behind fake connections, built from a HostSpec.

Like a libvirt daemon, a hypervisor outlives connections: every connection
opened on its URI sees the same domains.  ``register``/``unregister`` map
URIs to hypervisors (``None`` answers every URI).
"""

import itertools
import threading
import xml.etree.ElementTree as ET

from nova_lite_libvirt.testing import xml as specxml
from nova_lite_libvirt.testing.fakelibvirt import constants as c
from nova_lite_libvirt.testing.fakelibvirt.domain import DomainRecord
from nova_lite_libvirt.testing.fakelibvirt.errors import make_error

_REGISTRY = {}
_REGISTRY_LOCK = threading.Lock()


def register(uri, hypervisor):
    """Answer connections to ``uri`` (None: any URI) with ``hypervisor``."""
    with _REGISTRY_LOCK:
        _REGISTRY[uri] = hypervisor


def unregister(uri, hypervisor):
    """Undo :func:`register` (only if ``uri`` still maps to ``hypervisor``)."""
    with _REGISTRY_LOCK:
        if _REGISTRY.get(uri) is hypervisor:
            del _REGISTRY[uri]


def lookup(uri):
    """The hypervisor for ``uri``; raises libvirtError like a missing daemon."""
    with _REGISTRY_LOCK:
        hypervisor = _REGISTRY.get(uri) or _REGISTRY.get(None)
    if hypervisor is None:
        raise make_error(c.VIR_ERR_NO_CONNECT,
                         f"Failed to connect socket to '{uri}': No such file or directory",
                         c.VIR_FROM_REMOTE)
    return hypervisor


class FakeHypervisor:
    """Domains, node devices and host facts of one fake host."""

    def __init__(self, spec):
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._domains = {}
        self.spec = spec
        #: Bumped by :meth:`restart`; connections from before it are dead.
        self.generation = 0
        for guest in spec.guests:
            rec = self.define(specxml.guest_xml(guest, spec.domain_types[0]
                                                if spec.domain_types else "kvm"))
            if guest.running:
                self.start(rec.uuid)

    def restart(self):
        """Like a daemon restart: open connections die, guests stay."""
        with self.lock:
            self.generation += 1

    def update_spec(self, spec):
        """Change the host (hostname, online CPUs, ...); domains are kept."""
        with self.lock:
            self.spec = spec

    # -- host ------------------------------------------------------------------
    def node_info(self):
        s = self.spec
        return [s.arch, s.memory_mib, len(s.online), s.cpu_mhz, s.numa_nodes, s.sockets,
                s.cores, s.threads]

    def cpu_map(self):
        s = self.spec
        count = max(len(s.cpu_ids), max(s.online, default=-1) + 1)
        return count, [i in s.online for i in range(count)], len(s.online)

    def capabilities(self):
        return specxml.capabilities_xml(self.spec)

    def domain_capabilities(self, emulatorbin, arch, machine, virttype):
        """Domain capabilities, with the QEMU driver's errors for what the
        host does not offer."""
        s = self.spec
        if not s.domain_capabilities:
            raise make_error(c.VIR_ERR_NO_SUPPORT, "this function is not supported by the "
                             "connection driver: virConnectGetDomainCapabilities",
                             c.VIR_FROM_DOMAIN)
        if emulatorbin and emulatorbin != s.emulator_path:
            raise make_error(c.VIR_ERR_INVALID_ARG, f"invalid argument: unable to find any "
                             f"emulator to serve '{emulatorbin}'")
        if arch and arch != s.guest_arch_name:
            raise make_error(c.VIR_ERR_INVALID_ARG, f"invalid argument: unable to find any "
                             f"emulator to serve '{arch}' architecture")
        virttype = virttype or ("kvm" if "kvm" in s.domain_types else "qemu")
        if virttype not in s.domain_types:
            raise make_error(c.VIR_ERR_INVALID_ARG, f"invalid argument: {virttype.upper()} is "
                             f"not supported by '{s.emulator_path}' on this host")
        spec_machine = s.machine(machine)
        if spec_machine is None:
            raise make_error(c.VIR_ERR_INVALID_ARG, f"invalid argument: the machine "
                             f"'{machine}' is not supported by emulator '{s.emulator_path}'")
        return specxml.domain_capabilities_xml(s, spec_machine, virttype)

    def baseline_cpu(self, cpus, flags):
        """The baseline of CPU definitions of the host's own model: the
        features all of them have (with the model's when expanding)."""
        s = self.spec
        if not cpus:
            raise make_error(c.VIR_ERR_INVALID_ARG, "invalid argument: no CPUs given",
                             c.VIR_FROM_CPU)
        common, vendor = None, None
        for text in cpus:
            try:
                cpu = ET.fromstring(text)
            except ET.ParseError as exc:
                raise make_error(c.VIR_ERR_XML_DETAIL, f"(CPU_definition): {exc}",
                                 c.VIR_FROM_CPU) from None
            model = (cpu.findtext("model") or "").strip()
            if not model:
                raise make_error(c.VIR_ERR_XML_ERROR, "XML error: Missing CPU model name",
                                 c.VIR_FROM_CPU)
            if model != s.cpu_model:
                raise make_error(c.VIR_ERR_INTERNAL_ERROR,
                                 f"internal error: Unknown CPU model {model}", c.VIR_FROM_CPU)
            features = {f.get("name") for f in cpu.findall("feature") if f.get("name")}
            if flags & c.VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES:
                features |= s.cpu_model_features
            common = features if common is None else common & features
            vendor = vendor or (cpu.findtext("vendor") or "").strip()
        return specxml.baseline_cpu_xml(s.cpu_model, vendor, common)

    def node_devices(self):
        """``{name: (xml, parent name, caps)}`` of the node devices (PCI
        functions, GPUs and mediated devices); ``caps`` are those a listing
        filter matches."""
        result = {}
        for element, parent, caps in specxml.device_elements(self.spec):
            result[element.findtext("name")] = (specxml.device_xml(element), parent, caps)
        return result

    # -- domains -----------------------------------------------------------------
    def domain(self, uuid):
        with self.lock:
            rec = self._domains.get(uuid)
        if rec is None:
            raise make_error(c.VIR_ERR_NO_DOMAIN,
                             f"Domain not found: no domain with matching uuid '{uuid}'")
        return rec

    def domains(self):
        with self.lock:
            return list(self._domains.values())

    def by_name(self, name):
        with self.lock:
            for rec in self._domains.values():
                if rec.name == name:
                    return rec
        raise make_error(c.VIR_ERR_NO_DOMAIN,
                         f"Domain not found: no domain with matching name '{name}'")

    def by_id(self, dom_id):
        with self.lock:
            for rec in self._domains.values():
                if rec.active and rec.id == dom_id:
                    return rec
        raise make_error(c.VIR_ERR_NO_DOMAIN,
                         f"Domain not found: no domain with matching id {dom_id}")

    def define(self, xml_text, persistent=True):
        new = DomainRecord(xml_text)
        with self.lock:
            for rec in self._domains.values():
                if rec.name == new.name and rec.uuid != new.uuid:
                    raise make_error(c.VIR_ERR_OPERATION_FAILED,
                                     f"operation failed: domain '{rec.name}' already exists "
                                     f"with uuid {rec.uuid}", c.VIR_FROM_DOMAIN)
            old = self._domains.get(new.uuid)
            if old is not None:
                if old.name != new.name:
                    raise make_error(c.VIR_ERR_OPERATION_FAILED,
                                     f"operation failed: domain '{old.name}' is already "
                                     f"defined with uuid {old.uuid}", c.VIR_FROM_DOMAIN)
                new.state, new.reason, new.id = old.state, old.reason, old.id
                new.cpu_time_ns = old.cpu_time_ns
            new.persistent = persistent or (old is not None and old.persistent)
            self._domains[new.uuid] = new
            return new

    def start(self, uuid):
        with self.lock:
            rec = self.domain(uuid)
            if rec.active:
                raise make_error(c.VIR_ERR_OPERATION_INVALID,
                                 "Requested operation is not valid: domain is already running")
            rec.state, rec.reason = c.VIR_DOMAIN_RUNNING, c.VIR_DOMAIN_RUNNING_BOOTED
            rec.id = next(self._ids)
            rec.cpu_time_ns = 1000000

    def stop(self, uuid):
        with self.lock:
            rec = self.domain(uuid)
            if not rec.active:
                raise make_error(c.VIR_ERR_OPERATION_INVALID,
                                 "Requested operation is not valid: domain is not running")
            rec.state, rec.reason, rec.id = c.VIR_DOMAIN_SHUTOFF, \
                c.VIR_DOMAIN_SHUTOFF_DESTROYED, -1
            if not rec.persistent:
                del self._domains[uuid]

    def undefine(self, uuid):
        with self.lock:
            rec = self.domain(uuid)
            if not rec.persistent:
                raise make_error(c.VIR_ERR_OPERATION_INVALID,
                                 "Requested operation is not valid: cannot undefine "
                                 "transient domain")
            if rec.active:
                rec.persistent = False  # keeps running, gone once stopped
            else:
                del self._domains[uuid]
