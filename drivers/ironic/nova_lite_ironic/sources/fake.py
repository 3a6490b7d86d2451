"""``FakeBaremetal``: an in-process stand-in for openstacksdk's baremetal proxy.

It answers the calls :class:`~nova_lite_ironic.sources.proxy.ProxySource`
makes, with the same shapes and errors as the real proxy against a real
Ironic: pages of at most ``limit`` nodes sorted by uuid with a marker,
``fields`` filtering, ``NotFoundException`` for an unknown node,
``ConflictException`` for a provision action the node's state forbids.
It counts the calls (``list_calls`` counts pages, ``get_calls`` single GETs)
and can be told to fail, so tests can hold the driver to its call budget.

It also backs the ``inventory`` source, so it stays small and exact.
"""

import threading
import uuid as uuidlib

import attrs
from openstack import exceptions as sdk_exc

from nova_lite_ironic import node as nodes

# Provision actions the fake understands: target -> (allowed from, end state).
_ACTIONS = {
    "manage": ({nodes.ENROLL, nodes.MANAGEABLE, nodes.AVAILABLE}, nodes.MANAGEABLE),
    "provide": ({nodes.MANAGEABLE}, nodes.AVAILABLE),
    "active": ({nodes.AVAILABLE}, nodes.ACTIVE),
    "deleted": ({nodes.ACTIVE, nodes.DEPLOYFAIL, "error"}, nodes.AVAILABLE),
}


class FakeBaremetal:
    """In-memory nodes behind the baremetal proxy calls.

    ``nodes`` (an iterable of ``BareMetalNode``) seeds the fleet.
    """

    def __init__(self, initial=()):
        self._lock = threading.RLock()
        self._nodes = {}
        self.list_calls = 0
        self.get_calls = 0
        self.write_calls = 0
        self.list_error = None
        self.get_error = None
        self.deploy_error = None
        for node in initial:
            self.add(node)

    # -- test controls ----------------------------------------------------
    def add(self, node=None, **fields):
        """Add ``node`` (or one built from ``fields``; a uuid is made up); returns it."""
        if node is None:
            fields.setdefault("uuid", str(uuidlib.uuid4()))
            fields.setdefault("power_state", nodes.POWER_OFF)
            fields.setdefault("provision_state", nodes.AVAILABLE)
            fields.setdefault("resource_class", "baremetal")
            node = nodes.BareMetalNode(**fields)
        with self._lock:
            self._nodes[node.uuid] = node
        return node

    def set(self, node_uuid, **changes):
        """Change fields of a node (``maintenance=True``, ...); returns the new record."""
        with self._lock:
            node = attrs.evolve(self._nodes[node_uuid], **changes)
            self._nodes[node_uuid] = node
            return node

    def remove(self, node_uuid):
        """Delete a node from the fleet."""
        with self._lock:
            self._nodes.pop(node_uuid, None)

    def node(self, node_uuid):
        """The current record of a node (KeyError if absent)."""
        with self._lock:
            return self._nodes[node_uuid]

    def all(self):
        """Every node, sorted by uuid."""
        with self._lock:
            return [self._nodes[k] for k in sorted(self._nodes)]

    def reset_counters(self):
        """Zero ``list_calls``, ``get_calls`` and ``write_calls``."""
        self.list_calls = self.get_calls = self.write_calls = 0

    # -- the proxy calls ----------------------------------------------------
    def nodes(self, details=False, fields=None, limit=None, marker=None, paginated=True,
              **filters):
        """Yield node dicts sorted by uuid, after ``marker``, ``limit`` a page.

        Each page fetched counts as one call in ``list_calls``.  With
        ``paginated=False`` only the first page is returned (as openstacksdk
        does); otherwise pages follow each other until a short one.
        """
        page_size = limit or 1000
        while True:
            with self._lock:
                self.list_calls += 1
                if self.list_error is not None:
                    raise self.list_error
                ordered = [n for n in self.all() if _matches(n, filters)]
                if marker is not None:
                    ordered = [n for n in ordered if n.uuid > marker]
                page = ordered[:page_size]
            for node in page:
                yield _shape(node, fields)
            if not paginated or len(page) < page_size:
                return
            marker = page[-1].uuid

    def get_node(self, node, fields=None):
        """One node dict by uuid or name; ``NotFoundException`` if absent."""
        with self._lock:
            self.get_calls += 1
            if self.get_error is not None:
                raise self.get_error
            found = self._nodes.get(node) or next(
                (n for n in self._nodes.values() if n.name and n.name == node), None)
            if found is None:
                raise sdk_exc.NotFoundException(f"Node {node} could not be found.")
            return _shape(found, fields)

    def update_node(self, node, retry_on_conflict=True, **attrs_):
        """Patch ``instance_id`` (the only field the driver writes)."""
        with self._lock:
            self.write_calls += 1
            current = self._require(node)
            if set(attrs_) - {"instance_id"}:
                raise sdk_exc.BadRequestException(
                    f"the fake only updates instance_id, got {sorted(attrs_)}")
            instance = attrs_["instance_id"]
            if instance and current.instance_uuid and current.instance_uuid != instance:
                raise sdk_exc.ConflictException(
                    f"Node {node} is associated with instance {current.instance_uuid}.")
            self._nodes[current.uuid] = attrs.evolve(current, instance_uuid=instance)
            return _shape(self._nodes[current.uuid], None)

    def set_node_provision_state(self, node, target, wait=False, timeout=None, **kwargs):
        """Apply a provision action at once (the fake has no asynchronous steps)."""
        with self._lock:
            self.write_calls += 1
            current = self._require(node)
            if target not in _ACTIONS:
                raise sdk_exc.BadRequestException(f"the fake does not know action {target!r}")
            allowed, end = _ACTIONS[target]
            if current.provision_state not in allowed:
                raise sdk_exc.ConflictException(
                    f"The requested action \"{target}\" can not be performed on node "
                    f"\"{current.uuid}\" while it is in state \"{current.provision_state}\".")
            if target == "active":
                if current.maintenance:
                    raise sdk_exc.BadRequestException(f"Node {current.uuid} is in maintenance")
                if self.deploy_error is not None:
                    self._nodes[current.uuid] = attrs.evolve(
                        current, provision_state=nodes.DEPLOYFAIL)
                    raise self.deploy_error
                changes = {"provision_state": end, "power_state": nodes.POWER_ON}
            elif target == "deleted":
                changes = {"provision_state": end, "power_state": nodes.POWER_OFF,
                           "instance_uuid": None}
            else:
                changes = {"provision_state": end}
            self._nodes[current.uuid] = attrs.evolve(current, **changes)
            return _shape(self._nodes[current.uuid], None)

    def _require(self, node):
        found = self._nodes.get(node)
        if found is None:
            raise sdk_exc.NotFoundException(f"Node {node} could not be found.")
        return found


def _matches(node, filters):
    for key, value in filters.items():
        if value is None:
            continue
        if (getattr(node, key, None) or "") != value:
            return False
    return True


def _shape(node, fields):
    data = node.to_api()
    if fields:
        data = {k: v for k, v in data.items() if k in fields}
    return data
