"""``Fleet``: enroll and move nodes of a real (test) Ironic through its REST API.

Used by the functional tests and the bench.  Nodes use the ``fake-hardware``
type; actions are sent to every node first and then awaited together with
one listing per poll, so a batch of N nodes costs N requests per action plus
a few polls.
"""

import concurrent.futures
import time
import uuid as uuidlib

import openstack.connection

#: Microversion the helper speaks (shards need 1.82).
FLEET_API_VERSION = "1.82"


class FleetTimeout(AssertionError):
    """Nodes did not reach a state in time; the message lists the laggards."""


class Fleet:
    """Enrolment helper bound to one Ironic ``endpoint`` (no auth).

    ``shard`` (optional) is set on every node enrolled, so that tests sharing
    one Ironic keep to their own nodes.
    """

    def __init__(self, endpoint, shard=None, timeout=120.0, workers=1):
        self.workers = workers
        self.endpoint = endpoint
        self.shard = shard
        self.timeout = timeout
        self.conn = openstack.connection.Connection(
            auth_type="none", baremetal_endpoint_override=endpoint,
            baremetal_api_version=FLEET_API_VERSION)
        self.bm = self.conn.baremetal

    def close(self):
        """Close the HTTP session."""
        self.conn.close()

    def enroll(self, count, resource_class="baremetal", cpu_arch="x86_64",
               capabilities=None, provide=True, properties=None, traits=None):
        """Enroll ``count`` nodes; with ``provide`` bring them to ``available``.

        ``traits``: trait names set on every node (one request a node).
        Power is set off first (the fake power interface starts with no
        state).  Returns the node uuids.
        """
        props = dict(properties or {})
        if cpu_arch is not None:
            props["cpu_arch"] = cpu_arch
        if capabilities is not None:
            props["capabilities"] = capabilities
        attrs = {"driver": "fake-hardware", "properties": props}
        if resource_class is not None:
            attrs["resource_class"] = resource_class
        if self.shard:
            attrs["shard"] = self.shard
        uuids = [str(uuidlib.uuid4()) for _ in range(count)]
        self._each(lambda u: self.bm.create_node(uuid=u, **attrs), uuids)
        if traits:
            self._each(lambda u: self.set_traits(u, traits), uuids)
        self._each(lambda u: self.bm.set_node_power_state(u, "power off"), uuids)
        self.wait(uuids, power_state="power off")
        if provide:
            self.action(uuids, "manage", "manageable")
            self.action(uuids, "provide", "available")
        return uuids

    def action(self, uuids, target, end_state):
        """Send provision action ``target`` to every node, then wait for ``end_state``."""
        self._each(lambda u: self.bm.set_node_provision_state(u, target), uuids)
        self.wait(uuids, provision_state=end_state)

    def _each(self, call, uuids):
        """Run ``call(uuid)`` for every uuid on a few threads; re-raises the first error."""
        if len(uuids) <= 1:
            for node_uuid in uuids:
                call(node_uuid)
            return
        with concurrent.futures.ThreadPoolExecutor(min(self.workers, len(uuids))) as pool:
            for future in [pool.submit(call, u) for u in uuids]:
                future.result()

    def deploy(self, node_uuid, instance_uuid=None):
        """Associate an instance (made up if None) and deploy; returns the instance uuid."""
        instance_uuid = instance_uuid or str(uuidlib.uuid4())
        self.bm.update_node(node_uuid, instance_id=instance_uuid)
        self.action([node_uuid], "active", "active")
        return instance_uuid

    def maintenance(self, node_uuid, on=True, reason="nova-lite test"):
        """Set or unset maintenance."""
        if on:
            self.bm.set_node_maintenance(node_uuid, reason=reason)
        else:
            self.bm.unset_node_maintenance(node_uuid)

    def set_traits(self, node_uuid, traits):
        """Replace the node's traits (``PUT /v1/nodes/<uuid>/traits``)."""
        self.bm.set_node_traits(node_uuid, list(traits))

    def delete(self, node_uuid):
        """Delete a node from Ironic."""
        self.bm.delete_node(node_uuid)

    def get(self, node_uuid):
        """The openstacksdk Node."""
        return self.bm.get_node(node_uuid)

    def wait(self, uuids, timeout=None, **wanted):
        """Poll (one listing per poll) until every node has the ``wanted`` fields."""
        pending = set(uuids)
        deadline = time.monotonic() + (timeout or self.timeout)
        query = {"fields": ["uuid", "power_state", "provision_state", "last_error"],
                 "limit": 1000}
        if self.shard:
            query["shard"] = self.shard
        while True:
            states = {}
            for node in self.bm.nodes(**query):
                states[node.id] = node
            pending = {u for u in pending if u not in states or any(
                getattr(states[u], k) != v for k, v in wanted.items())}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise FleetTimeout(
                    f"{len(pending)} node(s) did not reach {wanted}: " + "; ".join(
                        f"{u}: {getattr(states.get(u), 'provision_state', 'missing')} "
                        f"{getattr(states.get(u), 'last_error', '')}"
                        for u in sorted(pending)[:5]))
            time.sleep(0.1)
