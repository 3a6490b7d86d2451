"""The ``api`` source: the OpenStack Ironic REST API through openstacksdk.

Every request carries the configured microversion
(``X-OpenStack-Ironic-API-Version``), asks only for the fields the driver
uses (the nodes' ``traits`` among them from microversion 1.37), and lists
the fleet in pages of at most 1,000 nodes.

Auth, from ``[ironic]``:

- ``auth_type = none`` (or ``noauth``) with ``endpoint_override``;
- ``auth_type = http_basic`` with ``endpoint_override``, ``username`` and
  ``password``;
- ``cloud = NAME``: a cloud of clouds.yaml (``clouds_yaml`` names the file;
  otherwise openstacksdk's usual search path), with its own auth.
"""

import logging
import threading

import openstack.config
import openstack.connection

from nova_lite_ironic.config import TRAITS_API_VERSION
from nova_lite_ironic.exception import SourceError
from nova_lite_ironic.sources.proxy import BACKEND_ERRORS, ProxySource

LOG = logging.getLogger(__name__)


def connect(config):
    """An ``openstack.connection.Connection`` for an :class:`IronicConfig`."""
    common = {"baremetal_api_version": config.effective_api_version,
              "api_timeout": config.timeout,
              # Fail fast: a listing that cannot be made makes the driver "not
              # ready" for this audit; the next audit tries again.
              "baremetal_status_code_retries": config.api_max_retries,
              "baremetal_connect_retries": config.api_max_retries}
    if config.endpoint_override:
        common["baremetal_endpoint_override"] = config.endpoint_override
    if config.insecure:
        common["verify"] = False
    elif config.cafile:
        common["cacert"] = config.cafile
    if config.region_name:
        common["region_name"] = config.region_name
    if config.cloud:
        files = [config.clouds_yaml] if config.clouds_yaml else None
        loader = openstack.config.OpenStackConfig(config_files=files) if files else \
            openstack.config.OpenStackConfig()
        region = loader.get_one(cloud=config.cloud, **common)
        return openstack.connection.Connection(config=region)
    if config.auth_type == "http_basic":
        return openstack.connection.Connection(
            auth_type="http_basic",
            auth={"username": config.username, "password": config.password,
                  "endpoint": config.endpoint_override},
            **common)
    return openstack.connection.Connection(auth_type="none", **common)


class ApiSource(ProxySource):
    """Nodes from Ironic's REST API.

    Build with :meth:`from_config`, or pass a ready ``connection`` (an
    ``openstack.connection.Connection``).
    """

    name = "api"

    def __init__(self, connection, page_size=1000, filters=None, provision_timeout=600.0,
                 where=None, traits=True):
        self.connection = connection
        self._proxy_lock = threading.Lock()
        super().__init__(None, page_size=page_size, filters=filters,
                         provision_timeout=provision_timeout,
                         where=where or "Ironic API", traits=traits)

    def _get_proxy(self):
        # openstacksdk discovers the endpoint's versions when the proxy is
        # first made: do it on first use, so a service starts while Ironic is
        # down and becomes ready when it comes back.
        with self._proxy_lock:
            if self._proxy is None:
                try:
                    self._proxy = self.connection.baremetal
                except BACKEND_ERRORS as exc:
                    raise SourceError(f"cannot reach {self.describe()}: {exc}") from exc
            return self._proxy

    @classmethod
    def from_config(cls, config):
        """An ApiSource for an :class:`~nova_lite_ironic.config.IronicConfig`."""
        where = f"Ironic API {config.endpoint_override or 'of cloud ' + str(config.cloud)}"
        source = cls(connect(config), page_size=config.api_page_size,
                     filters=config.filters, provision_timeout=config.provision_timeout,
                     where=f"{where} (microversion {config.effective_api_version})",
                     traits=config.reads_traits)
        LOG.info("Reading bare-metal nodes from %s", source.describe())
        if not config.reads_traits:
            LOG.warning("Ironic API microversion %s is below %s, which carries the nodes' "
                        "traits: bare-metal nodes report none", config.effective_api_version,
                        TRAITS_API_VERSION)
        return source

    def close(self):
        """Close the HTTP session."""
        try:
            self.connection.close()
        except Exception:  # noqa: BLE001  (closing must never raise)
            LOG.debug("closing the openstacksdk connection failed", exc_info=True)
