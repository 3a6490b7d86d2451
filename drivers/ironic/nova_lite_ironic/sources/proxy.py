"""``ProxySource``: a source over an openstacksdk-style baremetal proxy.

The proxy is openstacksdk's ``connection.baremetal`` (the ``api`` source) or
the in-process :class:`~nova_lite_ironic.sources.fake.FakeBaremetal` (the
``inventory`` source and unit tests).  Both answer the same calls:

- ``nodes(paginated=False, fields=[...], limit=N, marker=UUID, **filters)``:
  one request, one page of at most N nodes sorted by uuid after ``marker``;
- ``get_node(uuid, fields=[...])``: one GET, ``NotFoundException`` if absent;
- ``update_node(uuid, instance_id=...)`` and
  ``set_node_provision_state(uuid, target, wait=True, timeout=s)``.
"""

import logging

import keystoneauth1.exceptions
import requests
from openstack import exceptions as sdk_exc

from nova_lite_ironic import node as nodes
from nova_lite_ironic.exception import SourceError
from nova_lite_ironic.sources.base import NodeSource

LOG = logging.getLogger(__name__)

#: Ironic never returns more than this many nodes in one page.
MAX_PAGE_SIZE = 1000
#: Seconds a deploy or undeploy may take before it is reported failed.
DEFAULT_PROVISION_TIMEOUT = 600.0

#: Errors of the transport or the server that make a call fail.
BACKEND_ERRORS = (sdk_exc.SDKException, keystoneauth1.exceptions.ClientException,
                  requests.RequestException, OSError)


class ProxySource(NodeSource):
    """Nodes read through ``proxy``.

    ``page_size``: nodes per list request (1..1000).  ``filters``: query
    filters applied to the fleet (``conductor_group``, ``shard``); a node
    outside them is treated as not part of this fleet.  ``provision_timeout``:
    seconds allowed for a deploy or undeploy.  ``traits``: ask for the
    nodes' ``traits`` field (False for an Ironic API microversion below
    1.37, which refuses the field: nodes then have none).
    """

    name = "proxy"

    def __init__(self, proxy, page_size=MAX_PAGE_SIZE, filters=None,
                 provision_timeout=DEFAULT_PROVISION_TIMEOUT, where="baremetal proxy",
                 traits=True):
        if not 1 <= int(page_size) <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, got "
                             f"{page_size}")
        self._proxy = proxy
        self.page_size = int(page_size)
        self.filters = {k: v for k, v in (filters or {}).items() if v is not None}
        self.provision_timeout = provision_timeout
        self.where = where
        self.fields = [f for f in nodes.NODE_FIELDS if traits or f != nodes.TRAITS_FIELD] + [
            f for f in nodes.PARTITION_FIELDS if f in self.filters]

    @property
    def proxy(self):
        """The baremetal proxy the calls go to."""
        return self._get_proxy()

    def _get_proxy(self):
        return self._proxy

    def describe(self):
        """The proxy's location and filters, for logs."""
        if not self.filters:
            return self.where
        return f"{self.where} ({', '.join(f'{k}={v}' for k, v in self.filters.items())})"

    def list_nodes(self):
        """All nodes, one request per page; malformed entries are skipped with a WARNING.

        Pages are asked for explicitly (``limit`` and ``marker``) and the
        listing stops at the first page shorter than ``page_size``, so a fleet
        of N nodes costs ``N // page_size + 1`` requests.  ``page_size`` must
        not exceed the server's own cap (Ironic's ``[api] max_limit``, 1000).
        """
        found, marker = [], None
        try:
            while True:
                query = dict(self.filters, fields=self.fields, limit=self.page_size)
                if marker is not None:
                    query["marker"] = marker
                raw_page = list(self.proxy.nodes(paginated=False, **query))
                for raw in raw_page:
                    try:
                        found.append(nodes.BareMetalNode.from_api(raw))
                    except (ValueError, TypeError) as exc:
                        LOG.warning("Skipping malformed node %s from %s: %s",
                                    _raw_uuid(raw), self.describe(), exc)
                if len(raw_page) < self.page_size:
                    return found
                marker = _raw_uuid(raw_page[-1])
        except BACKEND_ERRORS as exc:
            raise SourceError(f"listing nodes from {self.describe()} failed: {exc}") from exc

    def get_node(self, node_uuid):
        """One node by uuid (one GET), or None if absent or outside the filters."""
        node = self._fetch(node_uuid)
        if node is not None and not self._matches(node):
            return None
        return node

    def node_exists(self, node_uuid):
        """True if the backend has the node at all, filters or not (one GET)."""
        return self._fetch(node_uuid) is not None

    def _fetch(self, node_uuid):
        try:
            raw = self.proxy.get_node(node_uuid, fields=self.fields)
        except sdk_exc.NotFoundException:
            return None
        except BACKEND_ERRORS as exc:
            raise SourceError(
                f"getting node {node_uuid} from {self.describe()} failed: {exc}") from exc
        try:
            return nodes.BareMetalNode.from_api(raw)
        except (ValueError, TypeError) as exc:
            raise SourceError(f"node {node_uuid} from {self.describe()} is malformed: "
                              f"{exc}") from exc

    def _matches(self, node):
        return all((getattr(node, key) or "") == (value or "")
                   for key, value in self.filters.items())

    def deploy(self, node_uuid, instance_uuid):
        """Set the node's instance_uuid, then provision it to ``active`` and wait."""
        try:
            self.proxy.update_node(node_uuid, retry_on_conflict=False, instance_id=instance_uuid)
        except BACKEND_ERRORS as exc:
            raise SourceError(f"cannot associate instance {instance_uuid} with node "
                              f"{node_uuid}: {exc}") from exc
        try:
            self.proxy.set_node_provision_state(node_uuid, "active", wait=True,
                                                timeout=self.provision_timeout)
        except BACKEND_ERRORS as exc:
            LOG.warning("Deploying instance %s on node %s failed; releasing the node",
                        instance_uuid, node_uuid)
            self._clear_instance(node_uuid)
            raise SourceError(f"deploying instance {instance_uuid} on node {node_uuid} "
                              f"failed: {exc}") from exc

    def undeploy(self, node_uuid):
        """Tear the node down to ``available`` (waits) and clear its instance_uuid."""
        node = self._fetch(node_uuid)
        if node is None:
            return
        if node.provision_state not in (nodes.AVAILABLE, nodes.MANAGEABLE, nodes.ENROLL):
            try:
                self.proxy.set_node_provision_state(node_uuid, "deleted", wait=True,
                                                    timeout=self.provision_timeout)
            except BACKEND_ERRORS as exc:
                raise SourceError(f"tearing down node {node_uuid} failed: {exc}") from exc
        self._clear_instance(node_uuid)

    def _clear_instance(self, node_uuid):
        try:
            node = self._fetch(node_uuid)
            if node is not None and node.instance_uuid:
                self.proxy.update_node(node_uuid, instance_id=None)
        except (SourceError,) + BACKEND_ERRORS as exc:
            LOG.warning("Could not clear the instance of node %s: %s", node_uuid, exc)


def _raw_uuid(raw):
    """The uuid of a node as the proxy gave it (a dict or an openstacksdk Node)."""
    return raw.get("uuid") if type(raw) is dict else raw.id  # noqa: E721
