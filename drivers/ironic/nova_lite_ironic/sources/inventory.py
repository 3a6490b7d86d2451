"""The ``inventory`` source: a fleet described by a YAML or JSON file.

For fleets without Ironic.  The file is read at start and again whenever it
changes (by modification time and size), so editing it adds, changes and
removes nodes.  Every entry is validated; an error names the file, the
entry's index and its uuid or name, and the problem.  A file that turns bad
while the service runs makes the driver "not ready" until it is fixed.

Format (YAML shown; JSON with the same keys works)::

    nodes:
      - uuid: 4f6b8a42-0d0e-4a8e-9d0a-0c1f2b3c4d5e   # required
        name: rack1-n01                              # optional
        resource_class: baremetal-gold              # the node's class
        cpu_arch: x86_64                            # -> properties.cpu_arch
        capabilities: "boot_mode:uefi,raid:1"       # or a mapping
        properties: {memory_mb: 262144}             # free-form, optional
        maintenance: false                          # default false
        power_state: power off                      # default "power off"
        provision_state: available                  # default "available"
        instance_uuid: null                         # default none
        traits: [CUSTOM_GOLD, HW_CPU_X86_AVX2]       # default none

``traits`` are checked as Ironic checks them: each a standard trait of
os-traits or ``CUSTOM_[A-Z0-9_]+``; a bad name is an error naming it.
"""

import json
import logging
import os
import threading
import uuid as uuidlib

import attrs
import yaml

from nova_lite.traits import trait_problem

from nova_lite_ironic import node as nodes
from nova_lite_ironic.exception import InventoryError, SourceError
from nova_lite_ironic.sources.fake import FakeBaremetal
from nova_lite_ironic.sources.proxy import ProxySource

LOG = logging.getLogger(__name__)

_KEYS = {"uuid", "name", "resource_class", "cpu_arch", "capabilities", "properties",
         "maintenance", "power_state", "provision_state", "instance_uuid",
         "conductor_group", "shard", "traits"}
_POWER_STATES = {nodes.POWER_ON, nodes.POWER_OFF, nodes.POWER_ERROR, None}


def load_inventory(path):
    """Read and validate ``path``; returns a list of ``BareMetalNode``.

    Raises :class:`InventoryError` naming the file and the bad entry.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise InventoryError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InventoryError(f"{path}: is not valid {'JSON' if path.endswith('.json') else 'YAML'}"
                             f": {exc}") from None
    if isinstance(data, dict) and set(data) == {"nodes"}:
        entries = data["nodes"]
    else:
        raise InventoryError(f"{path}: expected a mapping with one key 'nodes', got "
                             f"{_brief(data)}")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise InventoryError(f"{path}: 'nodes' must be a list, got {_brief(entries)}")
    result, seen = [], {}
    for index, entry in enumerate(entries):
        node = _entry(path, index, entry)
        if node.uuid in seen:
            raise InventoryError(f"{path}: nodes[{index}] (uuid {node.uuid}) repeats the uuid "
                                 f"of nodes[{seen[node.uuid]}]")
        seen[node.uuid] = index
        result.append(node)
    return result


def _brief(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _entry(path, index, entry):
    label = f"{path}: nodes[{index}]"
    if not isinstance(entry, dict):
        raise InventoryError(f"{label}: must be a mapping, got {_brief(entry)}")
    ident = entry.get("uuid") or entry.get("name")
    if ident:
        label += f" ({ident})"

    def bad(key, why):
        return InventoryError(f"{label}: {key!r} {why}, got {_brief(entry.get(key))}")

    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise InventoryError(f"{label}: unknown key(s) {', '.join(map(repr, unknown))}; "
                             f"known keys: {', '.join(sorted(_KEYS))}")
    try:
        node_uuid = str(uuidlib.UUID(str(entry["uuid"])))
    except KeyError:
        raise InventoryError(f"{label}: 'uuid' is required") from None
    except ValueError:
        raise bad("uuid", "must be a UUID") from None
    for key in ("name", "resource_class", "cpu_arch", "provision_state", "instance_uuid",
                "conductor_group", "shard"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise bad(key, "must be a string")
    if entry.get("resource_class") is not None and not entry["resource_class"].strip():
        raise bad("resource_class", "must not be blank")
    if entry.get("instance_uuid"):
        try:
            uuidlib.UUID(entry["instance_uuid"])
        except ValueError:
            raise bad("instance_uuid", "must be a UUID") from None
    maintenance = entry.get("maintenance", False)
    if not isinstance(maintenance, bool):
        raise bad("maintenance", "must be true or false")
    power = entry.get("power_state", nodes.POWER_OFF)
    if power not in _POWER_STATES:
        raise bad("power_state", f"must be one of {sorted(p for p in _POWER_STATES if p)} "
                                 "or null")
    properties = entry.get("properties") or {}
    if not isinstance(properties, dict):
        raise bad("properties", "must be a mapping")
    properties = dict(properties)
    capabilities = entry.get("capabilities")
    if isinstance(capabilities, dict):
        capabilities = ",".join(f"{k}:{v}" for k, v in capabilities.items())
    elif capabilities is not None and not isinstance(capabilities, str):
        raise bad("capabilities", "must be a 'k1:v1,k2:v2' string or a mapping")
    if capabilities is not None:
        properties["capabilities"] = capabilities
    if entry.get("cpu_arch") is not None:
        properties["cpu_arch"] = entry["cpu_arch"]
    traits = entry.get("traits")
    if traits is None:
        traits = []
    if not isinstance(traits, list):
        raise bad("traits", "must be a list of trait names")
    for name in traits:
        problem = trait_problem(name)
        if problem is not None:
            raise InventoryError(f"{label}: 'traits': {problem}")
    return nodes.BareMetalNode(
        uuid=node_uuid, name=entry.get("name"), resource_class=entry.get("resource_class"),
        power_state=power, provision_state=entry.get("provision_state", nodes.AVAILABLE),
        maintenance=maintenance, instance_uuid=entry.get("instance_uuid"),
        properties=properties, conductor_group=entry.get("conductor_group"),
        shard=entry.get("shard"), traits=traits)


class InventorySource(ProxySource):
    """Nodes from an inventory file, served by an in-process :class:`FakeBaremetal`.

    ``path``: the YAML (``.yaml``/``.yml``) or JSON (``.json``) file.  The file
    is validated at construction (an :class:`InventoryError` names the bad
    entry).  Deployments made through the driver live in memory and survive
    reloads of the file while the node stays ``available`` there.
    """

    name = "inventory"

    @classmethod
    def from_config(cls, config):
        """An InventorySource for an :class:`~nova_lite_ironic.config.IronicConfig`."""
        return cls(config.inventory_file, filters=config.filters,
                   provision_timeout=config.provision_timeout)

    def __init__(self, path, filters=None, **kwargs):
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._stamp = None
        self._deployed = {}
        super().__init__(FakeBaremetal(), filters=filters, where=f"inventory {self.path}",
                         **kwargs)
        self.reload(force=True)

    def _file_stamp(self):
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise InventoryError(f"{self.path}: cannot be read: {exc.strerror}") from None
        return (st.st_mtime_ns, st.st_size)

    def reload(self, force=False):
        """Re-read the file if it changed (or ``force``); True if it was read."""
        with self._lock:
            stamp = self._file_stamp()
            if not force and stamp == self._stamp:
                return False
            fleet = load_inventory(self.path)
            fake = FakeBaremetal(fleet)
            for node_uuid, instance_uuid in list(self._deployed.items()):
                try:
                    current = fake.node(node_uuid)
                except KeyError:
                    del self._deployed[node_uuid]
                    continue
                if current.provision_state == nodes.AVAILABLE and not current.instance_uuid:
                    fake.set(node_uuid, instance_uuid=instance_uuid,
                             provision_state=nodes.ACTIVE, power_state=nodes.POWER_ON)
                else:
                    del self._deployed[node_uuid]
            self._proxy, self._stamp = fake, stamp
            LOG.info("Read %d node(s) from inventory %s", len(fleet), self.path)
            return True

    def _refresh(self):
        try:
            self.reload()
        except InventoryError as exc:
            raise SourceError(str(exc)) from exc

    def list_nodes(self):
        """Every node of the file (re-read first if it changed)."""
        self._refresh()
        return super().list_nodes()

    def get_node(self, node_uuid):
        """One node of the file (re-read first if it changed), or None."""
        self._refresh()
        return super().get_node(node_uuid)

    def deploy(self, node_uuid, instance_uuid):
        """Mark the node active with ``instance_uuid`` (in memory)."""
        super().deploy(node_uuid, instance_uuid)
        self._deployed[node_uuid] = instance_uuid

    def undeploy(self, node_uuid):
        """Bring the node back to available (in memory)."""
        super().undeploy(node_uuid)
        self._deployed.pop(node_uuid, None)


def dump_inventory(fleet):
    """A YAML text for ``fleet`` (``BareMetalNode`` records) that :func:`load_inventory` reads."""
    entries = []
    for node in fleet:
        entry = {k: v for k, v in attrs.asdict(node).items() if v is not None}
        entry["properties"] = dict(node.properties)
        if node.traits:
            entry["traits"] = list(node.traits)
        else:
            entry.pop("traits", None)
        entries.append(entry)
    return yaml.safe_dump({"nodes": entries}, sort_keys=False)
