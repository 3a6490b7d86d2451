"""``IronicDriver``: one compute service, many bare-metal nodes.

Every node is reported as its own nodename, the node uuid.  See
:mod:`nova_lite_ironic.report` for what a node's record holds,
:mod:`nova_lite_ironic.cache` for which nodes a service takes, and
:mod:`nova_lite_ironic.sources` for where nodes come from.

Constructor keywords besides ``settings``:

- ``source``: a ready :class:`~nova_lite_ironic.sources.NodeSource`
  (otherwise built from ``[ironic] source``);
- ``store``: the core's ``Store``; live services and this host's instances
  are read from it (:meth:`IronicDriver.attach_store` does the same later);
- ``service_view`` / ``instance_view``: explicit
  :mod:`~nova_lite_ironic.peers` views (win over ``store``);
- any ``[ironic]`` option (``inventory_file="fleet.yaml"``, ...), which wins
  over the INI section.
"""

import logging
import os

import stevedore

from nova_lite.exception import NodeNotFound
from nova_lite.traits import capability_traits
from nova_lite.virt import driver as driver_api

from nova_lite_ironic import cache as cache_mod
from nova_lite_ironic import peers, report
from nova_lite_ironic.config import IronicConfig
from nova_lite_ironic.exception import ConfigError, DriverNotReady, SourceError

LOG = logging.getLogger(__name__)

#: Entry point group of node sources.
SOURCE_GROUP = "nova_lite_ironic.sources"


def load_source(config):
    """Build the source named by ``config.source`` from its entry point."""
    try:
        manager = stevedore.DriverManager(SOURCE_GROUP, config.source, invoke_on_load=False)
    except (stevedore.exception.NoMatches, RuntimeError) as exc:
        names = sorted(ep.name for ep in stevedore.ExtensionManager(SOURCE_GROUP).extensions)
        raise ConfigError("[ironic] source", config.source,
                          f"no such node source ({exc}); installed: {', '.join(names)}") \
            from None
    return manager.driver.from_config(config)


class _LocalInstances:
    """Instances this driver object deployed itself (an InstanceView)."""

    def __init__(self):
        self.by_host = {}

    def instance_uuids(self, host):
        return set(self.by_host.get(host, ()))


class IronicDriver(driver_api.ComputeDriver):
    """Bare-metal nodes from Ironic (or an inventory file) as compute nodes."""

    api_versions = ("1.0",)
    # The trait-bearing capabilities are Nova's IronicDriver's: Ironic attaches
    # network interfaces (VIFs) to nodes and deploys AMI, qcow2 and raw images;
    # a node is never resized onto itself, has no volume multi-attach, no
    # dedicated-CPU inventory.  The core adds their COMPUTE_* traits.
    capabilities = driver_api.Capabilities(
        supports_lifecycle=True, supports_node_deletion_check=True,
        supports_attach_interface=True, supports_image_type_ami=True,
        supports_image_type_qcow2=True, supports_image_type_raw=True)

    def __init__(self, settings=None, source=None, store=None, service_view=None,
                 instance_view=None, **options):
        super().__init__(settings=settings)
        self.config = IronicConfig.from_options(
            self.settings.section("ironic"), check_source=source is None, **options)
        self.source = source
        self._local = _LocalInstances()
        # node uuid -> the names of its traits left out of its report, last
        # logged: a WARNING per audit per node would drown a fleet's log.
        self._traits_warned = {}
        self._declared_traits = capability_traits(self.capabilities)
        self.store = None
        self.cache = None
        self._explicit_services = self._explicit_instances = None
        self._views_checked = False
        self.service_view = peers.StaticServiceView()
        self.instance_view = peers.UnionInstanceView(self._local)
        if service_view is not None:
            self._explicit_services = peers.as_service_view(service_view)
            self._set_service_view(self._explicit_services)
        if instance_view is not None:
            self.attach_instance_view(instance_view)
        if store is not None:
            self.attach_store(store)

    # -- wiring ------------------------------------------------------------
    def attach_store(self, store):
        """Read live services and this host's instances from the core's ``store``.

        Explicit ``service_view``/``instance_view`` given to the constructor win.
        """
        self.store = store
        if self._explicit_services is None:
            self._set_service_view(peers.StoreServiceView(
                store, service_down_time=self.settings.service_down_time))
        if self._explicit_instances is None:
            self._set_instance_view(peers.StoreInstanceView(store))

    def attach_service_view(self, view):
        """Use ``view`` (a ServiceView, or a callable returning live hosts) for the ring."""
        self._explicit_services = view = peers.as_service_view(view)
        self._set_service_view(view)

    def attach_instance_view(self, view):
        """Use ``view`` (an InstanceView, or a callable ``host -> uuids``)."""
        self._explicit_instances = view = peers.as_instance_view(view)
        self._set_instance_view(view)

    def _set_service_view(self, view):
        self.service_view = view
        if self.cache is not None:
            self.cache.service_view = view

    def _set_instance_view(self, view):
        self.instance_view = peers.UnionInstanceView(view, self._local)
        if self.cache is not None:
            self.cache.instance_view = self.instance_view

    def init_host(self, host):
        """Build the node source (without contacting it) for service ``host``."""
        self.host = host
        if self.source is None:
            self.source = load_source(self.config)
        self.cache = cache_mod.NodeCache(self.source, host, self.service_view,
                                         self.instance_view,
                                         ring_points=self.config.hash_ring_points)

    def _require_host(self):
        if self.cache is None:
            raise RuntimeError("IronicDriver.init_host() must be called first")
        return self.cache

    # -- nodes -------------------------------------------------------------
    def _configured_store(self):
        """The Store of ``settings.database_url`` if it already exists, else None.

        Used only when nothing attached views: a tracker built without a
        ComputeService still sees the services table of its database.
        """
        url = self.settings.database_url
        if not url or url in ("sqlite://", "sqlite:///:memory:"):
            return None
        if url.startswith("sqlite:///") and not os.path.exists(url[len("sqlite:///"):]):
            return None
        from nova_lite.db import Store
        LOG.info("Reading compute services and instances from %s",
                 self.settings.redacted_database_url())
        return Store(url, claim_retries=self.settings.claim_retries,
                     pooler=self.settings.database_pooler)

    def _ensure_views(self):
        self._views_checked = True
        if self.store is not None or self._explicit_services is not None:
            return
        try:
            store = self._configured_store()
        except Exception as exc:  # noqa: BLE001  (the driver works alone without it)
            LOG.warning("Cannot open %s to read the compute services (%s); this service "
                        "takes the whole fleet", self.settings.redacted_database_url(), exc)
            return
        if store is not None:
            self.attach_store(store)

    def refresh(self):
        """Refresh the cache now; raises :class:`DriverNotReady` if the fleet cannot be read."""
        cache = self._require_host()
        try:
            if not self._views_checked:
                self._ensure_views()
            return cache.refresh()
        except (SourceError, DriverNotReady) as exc:
            # The core's audit logs the one WARNING and skips the pass.
            raise DriverNotReady(f"cannot refresh the bare-metal nodes: {exc}") from exc

    def get_available_nodes(self, refresh=False):
        """UUIDs of this service's nodes; lists the fleet (once per call, as Nova does).

        Raises :class:`DriverNotReady` if the source fails, so the core's audit
        skips this pass (one WARNING) instead of taking every node for gone.
        """
        self.refresh()
        return self.cache.nodenames()

    def _node(self, nodename):
        """This service's cached node, or one GET on a cache miss (never a
        listing of the fleet, even before the first refresh)."""
        cache = self._require_host()
        node = cache.get(nodename)
        if node is not None:
            return node
        try:
            return self.source.get_node(nodename)
        except SourceError as exc:
            raise DriverNotReady(str(exc)) from exc

    def get_available_resource(self, nodename):
        """The ``NodeResources`` of node ``nodename`` (a node uuid).

        Its ``traits`` are the node's own (Ironic's ``traits`` field); a name
        that is not a trait, or the trait of a capability this driver does
        not declare, is left out with a WARNING naming it and the node
        (:func:`~nova_lite_ironic.report.node_traits`).

        Raises ``NodeNotFound`` for an unknown node and
        ``NodeConfigurationError`` for a node without a resource class.
        """
        node = self._node(nodename)
        if node is None:
            raise NodeNotFound(nodename, self.host)
        return report.node_resources(node, declared=self._declared_traits,
                                     warned=self._traits_warned)

    def node_is_available(self, nodename):
        """True if the node exists: from the cache, else one GET."""
        try:
            return self._node(nodename) is not None
        except DriverNotReady:
            return False

    def is_node_deleted(self, nodename):
        """True only if the source has no node ``nodename`` (one GET; never on doubt)."""
        cache = self._require_host()
        if cache.get(nodename) is not None:
            return False
        try:
            exists = (self.source.node_exists(nodename) if hasattr(self.source, "node_exists")
                      else self.source.get_node(nodename) is not None)
        except SourceError as exc:
            LOG.warning("Cannot tell whether bare-metal node %s was deleted (%s); keeping "
                        "its record", nodename, exc)
            return False
        if not exists:
            LOG.info("Bare-metal node %s is gone from %s", nodename, self.source.describe())
        return not exists

    # -- lifecycle ---------------------------------------------------------
    def spawn(self, instance):
        """Deploy ``instance`` on node ``instance.node`` (a node uuid) and wait for it."""
        cache = self._require_host()
        if not instance.node:
            raise ValueError(f"instance {instance.uuid} names no bare-metal node")
        self._local.by_host.setdefault(self.host, set()).add(instance.uuid)
        try:
            self.source.deploy(instance.node, instance.uuid)
        except Exception:
            self._local.by_host[self.host].discard(instance.uuid)
            raise
        node = self.source.get_node(instance.node)
        if node is not None:
            cache.put(node)

    def destroy(self, instance):
        """Tear down ``instance``'s node; a node without it is left alone."""
        cache = self._require_host()
        node_uuid = instance.node or next(
            (n.uuid for n in (cache.view.nodes.values() if cache.view else ())
             if n.instance_uuid == instance.uuid), None)
        if node_uuid is not None:
            node = self.source.get_node(node_uuid)
            if node is not None and node.instance_uuid == instance.uuid:
                self.source.undeploy(node_uuid)
                node = self.source.get_node(node_uuid)
                if node is not None:
                    cache.put(node)
        self._local.by_host.get(self.host, set()).discard(instance.uuid)

    def list_instances(self):
        """UUIDs of the instances on this service's nodes (from the cache)."""
        cache = self._require_host()
        if cache.view is None:
            return []
        return sorted(n.instance_uuid for n in cache.view.nodes.values() if n.instance_uuid)

