"""``IronicConfig``: the ``[ironic]`` section, typed and validated.

Options come from the INI file's ``[ironic]`` section (through
``Settings.section("ironic")``) and may be overridden by keyword arguments
of the driver.  A bad value raises :class:`~nova_lite_ironic.exception.ConfigError`
naming ``[ironic] <option>`` and the value.
"""

import logging
import math

import attrs

from nova_lite_ironic.exception import ConfigError
from nova_lite_ironic.hash_ring import DEFAULT_POINTS_PER_HOST

LOG = logging.getLogger(__name__)

#: Options of Nova's ``[ironic]`` section (keystoneauth adapter options
#: included) that this driver accepts but does not use.
IGNORED_NOVA_OPTIONS = frozenset({
    "api_retry_interval", "peer_list", "serial_console_state_timeout", "service_type",
    "service_name", "valid_interfaces", "version", "min_version", "max_version",
    "collect_timing", "split_loggers", "certfile", "keyfile", "status_code_retry_delay",
    "connect_retry_delay", "status_code_retries", "connect_retries"})

#: Microversion sent by default: resource_class, fields and conductor_group.
DEFAULT_API_VERSION = "1.46"
#: The lowest microversion the driver works with (``resource_class`` in fields).
MIN_API_VERSION = "1.21"
#: The nodes' ``traits`` field needs this microversion; below it nodes report none.
TRAITS_API_VERSION = "1.37"
#: Node sharding needs this microversion.
SHARD_API_VERSION = "1.82"
AUTH_TYPES = ("none", "noauth", "http_basic")


def _version(text):
    major, minor = str(text).split(".")
    return int(major), int(minor)


@attrs.frozen
class IronicConfig:
    """Every ``[ironic]`` option.

    - ``source``: ``api`` (Ironic REST API) or ``inventory`` (a file), or any
      name of the ``nova_lite_ironic.sources`` entry point group.
    - ``endpoint_override``: Ironic's URL (``http://host:6385``) for auth
      ``none``/``http_basic``.
    - ``auth_type``: ``none`` (alias ``noauth``) or ``http_basic``; ignored
      when ``cloud`` is set (the cloud's own auth is used).
    - ``username``/``password``: for ``http_basic``.
    - ``cloud``: a cloud name of clouds.yaml; ``clouds_yaml``: its path
      (default: openstacksdk's search path).
    - ``api_version``: the Ironic microversion sent with every call (default
      1.46, or 1.82 when ``shard`` is set); below 1.37 nodes report no traits.
    - ``api_page_size``: nodes per list request, 1..1000 (default 1000).
    - ``timeout``: seconds per HTTP request (default 30).
    - ``api_max_retries``: retries of a request refused with 409/503 or whose
      connection failed (default 2; Ironic's API answers 409 while a node is
      locked).
    - ``conductor_group``/``shard``: manage only the nodes of this group/shard.
    - ``inventory_file``: the YAML/JSON file of the ``inventory`` source.
    - ``provision_timeout``: seconds a deploy or undeploy may take (600).
    - ``hash_ring_points``: points per service on the hash ring (128).
    - ``cafile``: CA bundle to verify Ironic's TLS certificate; ``insecure``:
      ``true`` to skip verification (not for production).
    - ``region_name``: the region of the ``cloud`` to use.

    Other options of Nova's ``[ironic]`` section are accepted and ignored
    with a WARNING; anything else is an error.
    """

    source: str = "api"
    endpoint_override: str = None
    auth_type: str = "none"
    username: str = None
    password: str = attrs.field(default=None, repr=False)
    cloud: str = None
    clouds_yaml: str = None
    api_version: str = None
    api_page_size: int = 1000
    timeout: float = 30.0
    api_max_retries: int = 2
    conductor_group: str = None
    shard: str = None
    inventory_file: str = None
    provision_timeout: float = 600.0
    hash_ring_points: int = DEFAULT_POINTS_PER_HOST
    cafile: str = None
    insecure: bool = False
    region_name: str = None

    @property
    def effective_api_version(self):
        """``api_version``, or the default for the options in use."""
        if self.api_version:
            return self.api_version
        return SHARD_API_VERSION if self.shard else DEFAULT_API_VERSION

    @property
    def reads_traits(self):
        """True if the microversion in use carries the nodes' ``traits`` (1.37+)."""
        return _version(self.effective_api_version) >= _version(TRAITS_API_VERSION)

    @property
    def filters(self):
        """Query filters that select this service's part of the fleet."""
        return {k: v for k, v in (("conductor_group", self.conductor_group),
                                  ("shard", self.shard)) if v is not None}

    @classmethod
    def from_options(cls, section=None, check_source=True, **overrides):
        """Build from a raw ``{option: str}`` mapping plus typed ``overrides``.

        Unknown options and bad values raise :class:`ConfigError`.
        ``check_source=False`` skips the checks of the source's own options
        (for a driver given a ready source object).
        """
        raw = dict(section or {})
        raw.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in attrs.fields(cls)}
        aliases = {"api_endpoint": "endpoint_override", "endpoint": "endpoint_override",
                   "partition_key": "conductor_group"}
        values = {}
        for option, value in raw.items():
            name = aliases.get(option, option)
            if name in IGNORED_NOVA_OPTIONS:
                LOG.warning("[ironic] %s is a Nova option this driver does not use; "
                            "ignored", option)
                continue
            if name not in known:
                raise ConfigError(f"[ironic] {option}", value,
                                  f"unknown option; known: {', '.join(sorted(known))}")
            converted = _convert(name, value)
            if converted is not None:
                values[name] = converted
        config = cls(**values)
        config.validate(check_source=check_source)
        return config

    def validate(self, check_source=True):
        """Check the options together; raises :class:`ConfigError`."""
        if self.auth_type not in AUTH_TYPES:
            raise ConfigError("[ironic] auth_type", self.auth_type,
                              f"must be one of {', '.join(AUTH_TYPES)}; for Keystone "
                              "auth, name a clouds.yaml cloud with 'cloud'")
        if check_source:
            self._validate_source()
        self._validate_numbers()

    def _validate_source(self):
        if self.source == "api" and not self.cloud and not self.endpoint_override:
            raise ConfigError("[ironic] endpoint_override", self.endpoint_override,
                              "is required by the api source unless 'cloud' names a "
                              "clouds.yaml cloud")
        if self.source == "api" and not self.cloud and self.auth_type == "http_basic" \
                and not (self.username and self.password):
            raise ConfigError("[ironic] username", self.username,
                              "auth_type http_basic needs username and password")
        if self.source == "inventory" and not self.inventory_file:
            raise ConfigError("[ironic] inventory_file", self.inventory_file,
                              "is required by the inventory source")

    def _validate_numbers(self):
        try:
            version = _version(self.effective_api_version)
        except ValueError:
            raise ConfigError("[ironic] api_version", self.api_version,
                              "must be MAJOR.MINOR, e.g. 1.46") from None
        if version < _version(MIN_API_VERSION):
            raise ConfigError("[ironic] api_version", self.api_version,
                              f"must be at least {MIN_API_VERSION}")
        if self.shard and version < _version(SHARD_API_VERSION):
            raise ConfigError("[ironic] api_version", self.api_version,
                              f"shard needs at least {SHARD_API_VERSION}")
        if not 1 <= self.api_page_size <= 1000:
            raise ConfigError("[ironic] api_page_size", self.api_page_size,
                              "must be between 1 and 1000")
        for name in ("timeout", "provision_timeout"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"[ironic] {name}", value, "must be seconds > 0")
        if self.api_max_retries < 0:
            raise ConfigError("[ironic] api_max_retries", self.api_max_retries,
                              "must be >= 0")
        if self.hash_ring_points < 1:
            raise ConfigError("[ironic] hash_ring_points", self.hash_ring_points,
                              "must be >= 1")


_INTS = {"api_page_size", "hash_ring_points", "api_max_retries"}
_BOOLS = {"insecure"}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_FLOATS = {"timeout", "provision_timeout"}


def _convert(name, value):
    if name in _BOOLS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ConfigError(f"[ironic] {name}", value, "must be true or false")
    if name in _INTS:
        try:
            if isinstance(value, bool):
                raise ValueError
            return int(str(value).strip())
        except ValueError:
            raise ConfigError(f"[ironic] {name}", value, "must be an integer") from None
    if name in _FLOATS:
        try:
            if isinstance(value, bool):
                raise ValueError
            return float(str(value).strip())
        except ValueError:
            raise ConfigError(f"[ironic] {name}", value, "must be a number") from None
    if not isinstance(value, str):
        raise ConfigError(f"[ironic] {name}", value, "must be a string")
    value = value.strip()
    return value or None
