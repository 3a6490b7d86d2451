"""``BareMetalNode``: the few facts about an Ironic node the driver uses.

Only these fields are ever asked of a source (:data:`NODE_FIELDS`), so a
listing of 10,000 nodes stays small.  State names are Ironic's strings.
"""

import types
import uuid as uuidlib

import attrs

# Ironic's power states (``node.power_state``); None is "no state".
POWER_ON = "power on"
POWER_OFF = "power off"
POWER_ERROR = "error"
#: Power states that make a node unusable.
BAD_POWER_STATES = frozenset({POWER_ERROR, None})

# Ironic's provision states the driver names.
AVAILABLE = "available"
ACTIVE = "active"
ENROLL = "enroll"
MANAGEABLE = "manageable"
DEPLOYING = "deploying"
DEPLOYFAIL = "deploy failed"
CLEANING = "cleaning"

#: Fields asked of the Ironic API (``?fields=``), in the API's names.
NODE_FIELDS = ("uuid", "name", "resource_class", "power_state", "provision_state",
               "maintenance", "instance_uuid", "properties", "traits")
#: The node's ``traits`` field (Ironic API microversion 1.37 and later).
TRAITS_FIELD = "traits"
#: Fields that partition a fleet; asked for only when the driver filters on them.
PARTITION_FIELDS = ("conductor_group", "shard")


def _properties(value):
    if value is None:
        value = {}
    if not isinstance(value, dict) and not isinstance(value, types.MappingProxyType):
        raise ValueError(f"node properties must be a mapping, got {value!r}")
    return types.MappingProxyType(dict(value))


def _traits(value):
    # Only the shape is checked here: whether each name is a trait is the
    # report's business, so one bad name never makes the whole node unreadable.
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"node traits must be a list of names, got {value!r:.80}")
    for name in value:
        if not isinstance(name, str):
            raise ValueError(f"node traits must be strings, got {name!r:.60} in {value!r:.80}")
    return tuple(sorted(set(value)))


def _optional_str(instance, attribute, value):
    if value is not None and not isinstance(value, str):
        raise ValueError(f"node {attribute.name} must be a string or None, got {value!r}")


def _uuid(instance, attribute, value):
    try:
        uuidlib.UUID(str(value))
    except ValueError:
        raise ValueError(f"node uuid must be a UUID, got {value!r}") from None


@attrs.frozen
class BareMetalNode:
    """One node as a source reports it.

    ``properties`` is Ironic's free-form mapping (``cpu_arch``,
    ``capabilities`` = ``"k1:v1,k2:v2"``, ...).  ``instance_uuid`` is the
    instance deployed (or being deployed) on it, or None.  ``traits`` are
    the names in Ironic's ``traits`` field, sorted, as the source gave them
    (:func:`nova_lite_ironic.report.node_traits` decides which are reported).
    """

    uuid: str = attrs.field(validator=_uuid)
    resource_class: str = attrs.field(default=None, validator=_optional_str)
    power_state: str = attrs.field(default=None, validator=_optional_str)
    provision_state: str = attrs.field(default=None, validator=_optional_str)
    maintenance: bool = attrs.field(default=False, converter=bool)
    instance_uuid: str = attrs.field(default=None, validator=_optional_str)
    properties: object = attrs.field(factory=dict, converter=_properties, eq=False)
    name: str = attrs.field(default=None, validator=_optional_str)
    conductor_group: str = attrs.field(default=None, validator=_optional_str)
    shard: str = attrs.field(default=None, validator=_optional_str)
    traits: tuple = attrs.field(default=(), converter=_traits)

    @classmethod
    def from_api(cls, obj):
        """Build from an openstacksdk ``Node`` or a dict in the REST API's names."""
        if type(obj) is dict:  # noqa: E721  (sdk resources are dict subclasses)
            get = obj.get
        else:
            def get(key, default=None):
                return getattr(obj, _SDK_NAMES.get(key, key), default)
        return cls(
            uuid=get("uuid") or get("id"), resource_class=get("resource_class"),
            power_state=get("power_state"), provision_state=get("provision_state"),
            maintenance=bool(get("maintenance", False)),
            instance_uuid=get("instance_uuid"), properties=get("properties") or {},
            name=get("name"), conductor_group=get("conductor_group"), shard=get("shard"),
            traits=get("traits"))

    def to_api(self):
        """The node as the REST API shows it (the :data:`NODE_FIELDS` only)."""
        return {"uuid": self.uuid, "name": self.name, "resource_class": self.resource_class,
                "power_state": self.power_state, "provision_state": self.provision_state,
                "maintenance": self.maintenance, "instance_uuid": self.instance_uuid,
                "properties": dict(self.properties), "conductor_group": self.conductor_group,
                "shard": self.shard, "traits": list(self.traits)}


# openstacksdk renames a few API fields on its Node resource.
_SDK_NAMES = {"uuid": "id", "maintenance": "is_maintenance", "instance_uuid": "instance_id"}
