"""Settings: one typed, immutable object, loadable from an INI file.

Option names and defaults follow Nova.  There is no global configuration:
build a :class:`Settings` (or :func:`load_settings`) and pass it along.

INI layout (Nova's sections)::

    [DEFAULT]
    host = compute1
    compute_driver = fake
    state_path = /var/lib/nova-lite
    instances_path = /var/lib/nova-lite/instances
    reserved_host_memory_mb = 512
    cpu_allocation_ratio = 16.0
    vcpu_pin_set = 0-7
    update_resources_interval = 60

    [compute]
    cpu_shared_set = 0-3
    cpu_dedicated_set = 4-7

    [database]
    connection = sqlite:////var/lib/nova-lite/nova-lite.db

Every section is also kept as raw strings (:meth:`Settings.section`).  A
driver declares the options of its own sections (``[libvirt]``, ...) as an
attrs class of :func:`option` fields, set as its ``options`` class
attribute, and reads them with :func:`driver_options`; see
:func:`read_options`.
"""

import configparser
import math
import os
import re
import socket
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, TypeVar

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidConfig, InvalidCPUSpec, InvalidInput
from nova_lite.resources import to_ratio

if typing.TYPE_CHECKING:
    from nova_lite.pci_alias import PciAlias

_T = TypeVar("_T")

DEFAULT_STATE_PATH = "/var/lib/nova-lite"
DEFAULT_DRIVER_TIMEOUT = 60.0
#: Default ``[compute] provider_config_location``: the provider.yaml files.
DEFAULT_PROVIDER_CONFIG_LOCATION = "/etc/nova-lite/provider_config/"

# An attrs field validator: (instance, attribute, value) -> None, raises on a bad value.
_Attribute = attrs.Attribute
_Validator = Callable[[object, _Attribute, Any], None]


def _int_option(minimum: int = 0, maximum: int = 2 ** 53) -> _Validator:
    def check(instance: object, attribute: _Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfig(attribute.name, value, "must be an integer")
        if not minimum <= value <= maximum:
            raise InvalidConfig(attribute.name, value,
                                f"must be between {minimum} and {maximum}")
    return check


#: The largest allocation ratio accepted: far beyond any real over-commit.
MAX_ALLOCATION_RATIO = 10000
#: Shortest interval accepted from code (seconds; tests use short ones).
MIN_SECONDS = 1e-6
#: Shortest ``driver_timeout`` accepted anywhere (seconds).
MIN_DRIVER_TIMEOUT = 0.1
#: Longest a scheduler may reuse its view of the nodes (s): beyond that a
#: stale view would mostly pick nodes that filled up meanwhile.
MAX_NODES_MAX_AGE = 10.0
#: Default ``[compute] migration_stuck_age`` (seconds): one hour.
DEFAULT_MIGRATION_STUCK_AGE = 3600
#: Default ``[api] max_limit``: the most items one page of an API list gives (Nova's).
DEFAULT_MAX_LIMIT = 1000
#: Highest ``[api] max_limit`` accepted.
MAX_MAX_LIMIT = 100000
#: The values of ``[metrics] per_node_series``.
PER_NODE_SERIES = ("auto", "always", "never")
#: Default ``[metrics] per_node_series_max_nodes`` (nodes).
DEFAULT_PER_NODE_SERIES_MAX_NODES = 5000


def _ratio_option(optional: bool) -> _Validator:
    def check(instance: object, attribute: _Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise InvalidConfig(attribute.name, value, "must be a finite number > 0")
        if value > MAX_ALLOCATION_RATIO:
            raise InvalidConfig(attribute.name, value,
                                f"must be at most {MAX_ALLOCATION_RATIO}: no host "
                                "over-commits that much")
    return check


def _unset_ratio(value: Any) -> Any:
    """Nova's configs written before Stein use 0.0 for "unset": read it as None."""
    if value is not None and not isinstance(value, bool) and \
            isinstance(value, (int, float)) and value == 0:
        return None
    return value


def _max_age_option(maximum: float) -> _Validator:
    def check(instance: object, attribute: _Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or not 0 <= value <= maximum:
            raise InvalidConfig(attribute.name, value,
                                f"must be a number of seconds from 0 to {maximum:g}")
    return check


def _seconds_option(minimum: float | None = None) -> _Validator:
    def check(instance: object, attribute: _Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise InvalidConfig(attribute.name, value, "must be a number of seconds > 0")
        floor = MIN_SECONDS if minimum is None else minimum
        if value < floor:
            raise InvalidConfig(attribute.name, value, f"must be at least {floor:g} seconds")
    return check


def _cpu_set_option(instance: object, attribute: _Attribute, value: Any) -> None:
    if value is None:
        return
    from nova_lite.hardware import parse_cpu_spec
    if not isinstance(value, str):
        raise InvalidConfig(attribute.name, value, "must be a CPU spec string like '0-3,^2'")
    try:
        cpus = parse_cpu_spec(value)
    except InvalidCPUSpec as exc:
        raise InvalidConfig(attribute.name, value, str(exc)) from None
    if not cpus:
        raise InvalidConfig(attribute.name, value, "leaves no CPUs")


#: The values of ``running_deleted_instance_action``.
RUNNING_DELETED_ACTIONS = ("reap", "log", "noop")
#: ``[database] pooler`` values: what is between nova-lite and PostgreSQL.
#: ``none``: a direct connection; ``session``: a pooler that gives a client
#: one server session for as long as it is connected (PgBouncer's
#: ``pool_mode = session``); ``transaction``: a pooler that gives it one only
#: for each transaction (``pool_mode = transaction``).
DATABASE_POOLERS = ("none", "session", "transaction")


def _choice_option(choices: tuple[str, ...]) -> _Validator:
    def check(instance: object, attribute: _Attribute, value: Any) -> None:
        if value not in choices:
            raise InvalidConfig(attribute.name, value, f"must be one of {', '.join(choices)}")
    return check


def _non_negative_seconds(instance: object, attribute: _Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise InvalidConfig(attribute.name, value, "must be a number of seconds >= 0 (0: no limit)")


def _bool_option(instance: object, attribute: _Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidConfig(attribute.name, value, "must be true or false")


#: The words a configuration file may use for a boolean option (any case).
BOOLEAN_WORDS = {"true": True, "yes": True, "on": True, "1": True,
                 "false": False, "no": False, "off": False, "0": False}


def _str_option(instance: object, attribute: _Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidConfig(attribute.name, value, "must be a non-empty string")


def _optional_str_option(instance: object, attribute: _Attribute, value: Any) -> None:
    if value is not None:
        _str_option(instance, attribute, value)


#: Validators a driver's option fields may reuse (see :func:`read_options`):
#: each raises :class:`~nova_lite.exception.InvalidConfig` naming the field,
#: which :func:`read_options` turns into ``[section] name``.
#: ``int_option(minimum, maximum)`` bounds an integer (inclusive);
#: ``seconds_option(minimum)`` a finite number of seconds > 0;
#: ``string_option`` a non-empty string, ``optional_string_option`` the same
#: or None; ``cpu_set_option`` a CPU spec such as ``0-3,^2`` or None.
int_option = _int_option
string_option = _str_option
optional_string_option = _optional_str_option
seconds_option = _seconds_option
cpu_set_option = _cpu_set_option


def _empty_is_none(value: Any) -> Any:
    """An option whose empty value means unset."""
    return None if isinstance(value, str) and not value.strip() else value


def _name_option(instance: object, attribute: _Attribute, value: Any) -> None:
    """A name the records hold (the service's host): see
    :func:`nova_lite.validators.text_reason`."""
    reason = v.text_reason(value)
    if reason is not None:
        shown = value if not isinstance(value, str) or len(value) <= 80 else value[:40] + "..."
        raise InvalidConfig(attribute.name, shown, f"the value {reason}")


def _pci_alias_option(instance: object, attribute: _Attribute, value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidConfig(attribute.name, value, "must be a string")
    from nova_lite.pci_alias import parse_aliases   # it imports the records
    where = "[pci] alias"
    try:
        parse_aliases(value, where)
    except InvalidInput as exc:
        raise InvalidConfig(attribute.name, value,
                            str(exc).removeprefix(where).lstrip(": ")) from None


def _default_database_url(settings: "Settings") -> str:
    return "sqlite:///" + os.path.join(settings.state_path, "nova-lite.db")


def _default_instances_path(settings: "Settings") -> str:
    return os.path.join(settings.state_path, "instances")


#: [filter_scheduler] enabled_filters and weight_classes defaults (Nova's names).
DEFAULT_FILTERS = ("ComputeFilter", "RamFilter", "CoreFilter", "DiskFilter",
                   "ResourceClassFilter", "NUMATopologyFilter", "PciPassthroughFilter")
DEFAULT_WEIGHERS = ("RAMWeigher", "CPUWeigher", "DiskWeigher")


def _name_list(value: str | Iterable[str]) -> tuple[str, ...]:
    """A comma-separated string or a sequence of names -> tuple of names."""
    if isinstance(value, str):
        value = value.split(",")
    return tuple(name.strip() for name in value if name.strip())


def _multiplier_option(instance: object, attribute: _Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise InvalidConfig(attribute.name, value, "must be a finite number")


def _sections(value: Mapping[str, Mapping[str, str]] | None) -> Mapping[str, Mapping[str, str]]:
    return types.MappingProxyType(
        {name: types.MappingProxyType(dict(opts)) for name, opts in (value or {}).items()})


#: Key of an option's :class:`Option` in its Settings field's ``metadata``.
OPTION_KEY = "nova_lite.option"


@attrs.frozen
class Option:
    """What the configuration file, the sample and the reference say of one option.

    Declared once, on the :class:`Settings` field it fills (see
    :func:`option`); the INI reader, ``etc/nova-lite.conf.sample`` and the
    configuration reference are all built from it.

    ``minimum``/``maximum`` are the inclusive bounds the field's validator
    enforces (None: no bound); ``file_minimum`` a higher floor applied only
    to values read from a configuration file (seconds).  ``default_text``
    describes a default computed at run time (None: the field's default is
    shown as it is).  ``kind`` names the value's type for people
    ("string", "integer", "float", "list", "CPU set").
    """

    section: str
    name: str
    help: str
    kind: str | None = None
    minimum: object = None
    maximum: object = None
    exclusive_minimum: bool = False
    file_minimum: float | None = None
    default_text: str | None = None
    unit: str | None = None
    nova: str | None = None


def option(section: str, name: str, help: str, **details: Any) -> dict[str, Option]:
    """Metadata for a Settings field read from ``[section] name``.

    Returns the ``metadata`` mapping to give ``attrs.field``; ``details`` are
    the other :class:`Option` attributes.
    """
    return {OPTION_KEY: Option(section, name, " ".join(help.split()), **details)}


@attrs.frozen
class Settings:
    """Every option nova-lite reads, with Nova's names and defaults.

    Memory amounts are MiB, disk amounts MB (``reserved_host_disk_mb``, as
    in Nova), intervals seconds.  A ``*_allocation_ratio`` left as None
    (or 0.0, as Nova's configs written before Stein say it) means "use
    ``initial_*_allocation_ratio``" (Nova's semantics).  Ratios must be
    finite and at most :data:`MAX_ALLOCATION_RATIO`; ``driver_timeout`` at
    least :data:`MIN_DRIVER_TIMEOUT` (0.1 s); intervals at least
    :data:`MIN_SECONDS` (from a configuration file, at least 1 s: see
    :data:`MIN_FILE_SECONDS`).
    """

    host: str = attrs.field(
        factory=socket.gethostname, validator=_name_option,
        metadata=option("DEFAULT", "host", """
            Name of this compute service.  The single node of the fake and
            libvirt drivers is named after it.  At most 255 characters, none
            of them a control character.""",
            default_text="the machine's host name", nova="same name and default"))
    default_availability_zone: str = attrs.field(
        default="nova", validator=_name_option,
        metadata=option("DEFAULT", "default_availability_zone", """
            Availability zone of the compute hosts in no aggregate that has
            an availability_zone (nova-lite aggregate create --zone).""",
            nova="same name and default"))
    default_schedule_zone: str | None = attrs.field(
        default=None, converter=_empty_is_none,
        validator=attrs.validators.optional(_name_option),
        metadata=option("DEFAULT", "default_schedule_zone", """
            Availability zone a server is built in when its request names
            none (server create without --availability-zone).  Unset (the
            default): any zone, and the server records the zone of the host
            it was built on.""",
            default_text="unset", nova="same name and default"))
    compute_driver: str = attrs.field(
        default="fake", validator=_str_option,
        metadata=option("DEFAULT", "compute_driver", """
            Entry point name of the virt driver (fake, fake.small,
            fake.medium, fake.multinode, libvirt, ironic, or a third
            party's; nova-lite driver list shows the installed ones).""",
            nova="takes a class path here"))
    state_path: str = attrs.field(
        default=DEFAULT_STATE_PATH, validator=_str_option,
        metadata=option("DEFAULT", "state_path", """
            Directory for the SQLite database and instances.  The command
            line chooses differently when it is not set in a file.""",
            nova="same name"))
    instances_path: str = attrs.field(
        default=attrs.Factory(_default_instances_path, takes_self=True),
        validator=_str_option,
        metadata=option("DEFAULT", "instances_path", """
            Where drivers keep guest files.""",
            default_text="$state_path/instances", nova="same name"))
    database_url: str = attrs.field(
        default=attrs.Factory(_default_database_url, takes_self=True), validator=_str_option,
        repr=False,
        metadata=option("database", "connection", """
            Record store URL: an SQLite file (WAL mode) for one host, or
            postgresql://user:password@host/db for many; sqlite:// is in
            memory.  --database-url overrides it.  Every password in it is
            hidden wherever nova-lite shows or logs it.""",
            default_text="sqlite:///$state_path/nova-lite.db"))
    reserved_host_memory_mb: int = attrs.field(
        default=512, validator=_int_option(),
        metadata=option("DEFAULT", "reserved_host_memory_mb", """
            Memory held back for the host: the reserved amount of every
            node's MEMORY_MB inventory.""",
            minimum=0, maximum=2 ** 53, unit="MiB", nova="same default"))
    reserved_host_disk_mb: int = attrs.field(
        default=0, validator=_int_option(),
        metadata=option("DEFAULT", "reserved_host_disk_mb", """
            Disk held back for the host, rounded up to whole GB in the
            DISK_GB inventory.""",
            minimum=0, maximum=2 ** 53, unit="MB"))
    reserved_host_cpus: int = attrs.field(
        default=0, validator=_int_option(),
        metadata=option("DEFAULT", "reserved_host_cpus", """
            CPUs held back from the VCPU inventory.""",
            minimum=0, maximum=2 ** 53, unit="CPUs"))
    cpu_allocation_ratio: float | None = attrs.field(
        default=None, converter=_unset_ratio, validator=_ratio_option(True),
        metadata=option("DEFAULT", "cpu_allocation_ratio", """
            VCPU over-commit.  Unset (or 0.0, as configurations written
            before Nova's Stein release say it) means
            initial_cpu_allocation_ratio.""",
            minimum=0, exclusive_minimum=True, maximum=MAX_ALLOCATION_RATIO,
            default_text="unset"))
    ram_allocation_ratio: float | None = attrs.field(
        default=None, converter=_unset_ratio, validator=_ratio_option(True),
        metadata=option("DEFAULT", "ram_allocation_ratio", """
            MEMORY_MB over-commit; unset or 0.0 means
            initial_ram_allocation_ratio.""",
            minimum=0, exclusive_minimum=True, maximum=MAX_ALLOCATION_RATIO,
            default_text="unset"))
    disk_allocation_ratio: float | None = attrs.field(
        default=None, converter=_unset_ratio, validator=_ratio_option(True),
        metadata=option("DEFAULT", "disk_allocation_ratio", """
            DISK_GB over-commit; unset or 0.0 means
            initial_disk_allocation_ratio.""",
            minimum=0, exclusive_minimum=True, maximum=MAX_ALLOCATION_RATIO,
            default_text="unset"))
    initial_cpu_allocation_ratio: float = attrs.field(
        default=4.0, validator=_ratio_option(False),
        metadata=option("DEFAULT", "initial_cpu_allocation_ratio", """
            VCPU ratio of a node when cpu_allocation_ratio is unset.""",
            minimum=0, exclusive_minimum=True, maximum=MAX_ALLOCATION_RATIO,
            nova="same default"))
    initial_ram_allocation_ratio: float = attrs.field(
        default=1.0, validator=_ratio_option(False),
        metadata=option("DEFAULT", "initial_ram_allocation_ratio", """
            MEMORY_MB ratio of a node when ram_allocation_ratio is unset.""",
            minimum=0, exclusive_minimum=True, maximum=MAX_ALLOCATION_RATIO,
            nova="same default"))
    initial_disk_allocation_ratio: float = attrs.field(
        default=1.0, validator=_ratio_option(False),
        metadata=option("DEFAULT", "initial_disk_allocation_ratio", """
            DISK_GB ratio of a node when disk_allocation_ratio is unset.""",
            minimum=0, exclusive_minimum=True, maximum=MAX_ALLOCATION_RATIO,
            nova="same default"))
    vcpu_pin_set: str | None = attrs.field(
        default=None, validator=_cpu_set_option,
        metadata=option("DEFAULT", "vcpu_pin_set", """
            Legacy CPU set for guests, e.g. 0-7,^3.  It cannot be combined
            with cpu_dedicated_set; beside cpu_shared_set it is accepted and
            decides the VCPU inventory (the libvirt driver logs a WARNING
            saying so).""",
            kind="CPU set", default_text="unset", nova="same rules"))
    cpu_shared_set: str | None = attrs.field(
        default=None, validator=_cpu_set_option,
        metadata=option("compute", "cpu_shared_set", """
            Host CPUs for shared (floating) vCPUs.  Drivers that map host
            CPUs (libvirt) report them as the VCPU inventory.""",
            kind="CPU set", default_text="unset"))
    cpu_dedicated_set: str | None = attrs.field(
        default=None, validator=_cpu_set_option,
        metadata=option("compute", "cpu_dedicated_set", """
            Host CPUs for pinned guests, reported as the PCPU inventory by
            drivers that map host CPUs.  Must not overlap cpu_shared_set.""",
            kind="CPU set", default_text="unset"))
    provider_config_location: str = attrs.field(
        default=DEFAULT_PROVIDER_CONFIG_LOCATION, validator=_str_option,
        metadata=option("compute", "provider_config_location", """
            Directory of provider.yaml files (every *.yaml file in it) that
            add custom resource classes and CUSTOM_* traits to this
            service's compute nodes.  Read once when the compute service
            starts; a bad file stops it, naming the file and the place in
            it.  A directory that does not exist is logged and
            ignored.""",
            nova="same name; Nova's default is /etc/nova/provider_config/"))
    update_resources_interval: float = attrs.field(
        default=60, validator=_seconds_option(),
        metadata=option("DEFAULT", "update_resources_interval", """
            Time between audits of the compute service.""",
            minimum=MIN_SECONDS, file_minimum=1.0, unit="seconds",
            nova="default 0, meaning the periodic task default of 60"))
    service_down_time: float = attrs.field(
        default=60, validator=_seconds_option(),
        metadata=option("DEFAULT", "service_down_time", """
            Time after the last heartbeat before a service counts as
            down.""",
            minimum=MIN_SECONDS, file_minimum=1.0, unit="seconds", nova="same default"))
    report_interval: float = attrs.field(
        default=10, validator=_seconds_option(),
        metadata=option("DEFAULT", "report_interval", """
            Time between heartbeats of the running compute service.  It
            beats in a thread of its own, so a long audit never makes it
            look down.  Keep it below service_down_time (a WARNING at
            start-up says so otherwise).""",
            minimum=MIN_SECONDS, file_minimum=1.0, unit="seconds", nova="same default"))
    driver_timeout: float = attrs.field(
        default=DEFAULT_DRIVER_TIMEOUT, validator=_seconds_option(MIN_DRIVER_TIMEOUT),
        metadata=option("DEFAULT", "driver_timeout", """
            Time one driver call may take during an audit before that node
            is skipped with an error.""",
            minimum=MIN_DRIVER_TIMEOUT, file_minimum=MIN_DRIVER_TIMEOUT, unit="seconds",
            nova="nova-lite only"))
    claim_retries: int = attrs.field(
        default=10, validator=_int_option(1, 1000),
        metadata=option("DEFAULT", "claim_retries", """
            Times a claim transaction that lost a race is retried before it
            fails clearly.""",
            minimum=1, maximum=1000, nova="nova-lite only"))
    migration_stuck_age: float = attrs.field(
        default=DEFAULT_MIGRATION_STUCK_AGE, validator=_seconds_option(),
        metadata=option("compute", "migration_stuck_age", """
            Time an in-progress migration may go without a change before
            nova-lite audit calls it stuck (and audit --heal finishes it by
            reverting: its allocations are dropped and it is marked
            error).""",
            minimum=MIN_SECONDS, file_minimum=1.0, unit="seconds", nova="nova-lite only"))
    work_poll_interval: float = attrs.field(
        default=1.0, validator=_seconds_option(),
        metadata=option("compute", "work_poll_interval", """
            Time between the compute service's looks for work recorded for
            its host (builds, deletes, moves, audits) when nothing wakes it.
            On PostgreSQL the service is woken at once by LISTEN/NOTIFY and
            looks only every report_interval as a fallback; on SQLite,
            behind a connection pooler in transaction mode ([database]
            pooler), or when listening fails, it looks this often.""",
            minimum=MIN_SECONDS, unit="seconds", nova="nova-lite only"))
    down_hosts_per_pass: int = attrs.field(
        default=10, validator=_int_option(1, 100000),
        metadata=option("compute", "down_hosts_per_pass", """
            Most hosts whose compute service is down that one pass of a
            live compute service records the findings of (their leaks and
            the work waiting for them).  Each live service takes the hosts
            in an order of its own, so the live services share a large
            outage between them and no pass grows with the number of hosts
            down.""",
            minimum=1, maximum=100000, nova="nova-lite only"))
    instance_build_timeout: float = attrs.field(
        default=0, validator=_non_negative_seconds,
        metadata=option("DEFAULT", "instance_build_timeout", """
            Time an instance may stay building on its host before the
            host's compute service records it in error and gives its claim
            back.  0 disables the limit.""",
            minimum=0, unit="seconds", nova="same name and default"))
    running_deleted_instance_action: str = attrs.field(
        default="reap", validator=_choice_option(RUNNING_DELETED_ACTIONS),
        metadata=option("DEFAULT", "running_deleted_instance_action", """
            What the compute service does with a guest its driver still runs
            whose instance is recorded deleted (a local delete made while
            the host was down): reap destroys it, log logs a warning, noop
            does nothing.""",
            kind="string", nova="same name and default; no shutdown"))
    allow_resize_to_same_host: bool = attrs.field(
        default=False, validator=_bool_option,
        metadata=option("DEFAULT", "allow_resize_to_same_host", """
            Whether the scheduler may choose the server's own host for a
            resize (both flavors then count on that node until the resize
            is confirmed or reverted).  A cold migration always goes to
            another host.""",
            kind="boolean", nova="same name and default"))
    #: Seconds a transaction waits for another writer's lock before it fails
    #: with "database busy" and writes nothing.
    database_busy_timeout: float = attrs.field(
        default=10.0, validator=_seconds_option(MIN_DRIVER_TIMEOUT),
        metadata=option("database", "busy_timeout", """
            Time a transaction waits for another writer's lock.  Past it the
            operation fails with "database busy" and writes nothing, so a
            claim never hangs on a locked database.""",
            minimum=MIN_DRIVER_TIMEOUT, unit="seconds", nova="nova-lite only"))
    database_pooler: str = attrs.field(
        default="none", validator=_choice_option(DATABASE_POOLERS),
        metadata=option("database", "pooler", """
            What is between nova-lite and a PostgreSQL server: none (a
            direct connection), session or transaction (a connection pooler
            such as PgBouncer in that pool_mode).  Behind a pooler the lock
            wait bound (busy_timeout) is set in each transaction.  Behind one
            in transaction mode nothing relies on a session: no statement is
            prepared on the server and the compute service does not LISTEN
            for work but polls every [compute] work_poll_interval.  SQLite
            ignores it.""",
            kind="string", nova="nova-lite only"))
    #: libvirt connection of the libvirt driver.  The libvirt plugin declares
    #: its INI option, ``[libvirt] connection_uri``; :func:`load_settings`
    #: copies it here (the option says so with ``SETTINGS_FIELD`` metadata),
    #: and code may set it directly.
    libvirt_connection_uri: str | None = attrs.field(
        default="qemu:///system", validator=_optional_str_option)
    enabled_filters: tuple[str, ...] = attrs.field(
        default=DEFAULT_FILTERS, converter=_name_list,
        metadata=option("filter_scheduler", "enabled_filters", """
            Scheduler filters, by entry point name, in the order they
            run.""",
            nova="same names"))
    weight_classes: tuple[str, ...] = attrs.field(
        default=DEFAULT_WEIGHERS, converter=_name_list,
        metadata=option("filter_scheduler", "weight_classes", """
            Scheduler weighers by entry point name; all_weighers takes every
            installed one.""",
            nova="same names"))
    ram_weight_multiplier: float = attrs.field(
        default=1.0, validator=_multiplier_option,
        metadata=option("filter_scheduler", "ram_weight_multiplier", """
            Multiplier of the RAM weigher: positive spreads, negative
            packs.""",
            nova="same default"))
    cpu_weight_multiplier: float = attrs.field(
        default=1.0, validator=_multiplier_option,
        metadata=option("filter_scheduler", "cpu_weight_multiplier", """
            Multiplier of the CPU weigher: positive spreads, negative
            packs.""",
            nova="same default"))
    disk_weight_multiplier: float = attrs.field(
        default=1.0, validator=_multiplier_option,
        metadata=option("filter_scheduler", "disk_weight_multiplier", """
            Multiplier of the disk weigher: positive spreads, negative
            packs.""",
            nova="same default"))
    host_subset_size: int = attrs.field(
        default=1, validator=_int_option(1, 1000),
        metadata=option("filter_scheduler", "host_subset_size", """
            Each instance goes to a node chosen at random among this many
            best ones (1: always the best).  More than 1 keeps schedulers
            that run at once from all choosing the same node.""",
            minimum=1, maximum=1000, nova="same default"))
    nodes_max_age: float = attrs.field(
        default=0.0, validator=_max_age_option(MAX_NODES_MAX_AGE),
        metadata=option("scheduler", "nodes_max_age", """
            Time a scheduler may reuse its view of the nodes and services
            without asking the records what changed; 0 (the default) asks
            on every request.  Within that time it counts its own picks but
            not other schedulers' claims, and a service disabled or gone
            down may still be chosen; every claim still decides on the
            records, and a lost one moves to the next alternate.  With
            several schedulers building at once, 0.5 lets them build far
            faster; they then tend to pick the same nodes and take turns
            on their rows, which a host_subset_size above 1 spreads, at
            the cost of ranking that many more hosts per request.""",
            minimum=0, maximum=MAX_NODES_MAX_AGE, unit="seconds", nova="nova-lite only"))
    max_attempts: int = attrs.field(
        default=3, validator=_int_option(1, 100),
        metadata=option("scheduler", "max_attempts", """
            Nodes a build tries per instance: the chosen one and
            max_attempts - 1 alternates.""",
            minimum=1, maximum=100, nova="same default"))
    limit_tenants_to_placement_aggregate: bool = attrs.field(
        default=False, validator=_bool_option,
        metadata=option("scheduler", "limit_tenants_to_placement_aggregate", """
            Build a project's servers only on the hosts of the aggregates
            whose metadata filter_tenant_id (or any key beginning with it,
            filter_tenant_id2, ...) names the project.  A project no
            aggregate names may use every host, unless
            placement_aggregate_required_for_tenants.""",
            kind="boolean", nova="same name and default"))
    placement_aggregate_required_for_tenants: bool = attrs.field(
        default=False, validator=_bool_option,
        metadata=option("scheduler", "placement_aggregate_required_for_tenants", """
            With limit_tenants_to_placement_aggregate, refuse (no valid
            host) the builds of a project that no aggregate's
            filter_tenant_id names.""",
            kind="boolean", nova="same name and default"))
    enable_isolated_aggregate_filtering: bool = attrs.field(
        default=False, validator=_bool_option,
        metadata=option("scheduler", "enable_isolated_aggregate_filtering", """
            Keep the hosts of an aggregate with trait:NAME=required
            metadata for the servers whose flavor requires every such
            trait of that aggregate: other servers are not built there.""",
            kind="boolean", nova="same name and default"))
    metrics_port: int = attrs.field(
        default=0, validator=_int_option(0, 65535),
        metadata=option("metrics", "port", """
            TCP port on which the compute service also serves its Prometheus
            metrics (claims, audits, capacity) at /metrics; 0 (the default)
            serves none. The same page is served by 'nova-lite metrics
            serve'.""",
            minimum=0, maximum=65535, nova="nova-lite only"))
    metrics_bind: str = attrs.field(
        default="127.0.0.1", validator=_str_option,
        metadata=option("metrics", "bind", """
            Address the compute service's metrics server listens on (only
            used when [metrics] port is set); the default keeps it on the
            loopback interface.""",
            nova="nova-lite only"))
    # -- fleet-sized reads: API paging and the metrics' per-node series --------
    api_max_limit: int = attrs.field(
        default=DEFAULT_MAX_LIMIT, validator=_int_option(1, MAX_MAX_LIMIT),
        metadata=option("api", "max_limit", """
            Most items one page of a paged API list gives (/v1/hypervisors):
            a request without limit gets this many, and a limit above it is
            refused (400).  A client pages on with the marker of the next
            link.""",
            minimum=1, maximum=MAX_MAX_LIMIT, unit="items",
            nova="same name and default; a larger limit is refused, not cut"))
    metrics_per_node_series: str = attrs.field(
        default="auto", validator=_choice_option(PER_NODE_SERIES),
        metadata=option("metrics", "per_node_series", """
            Whether the metrics give the capacity and PCI gauges per node
            (labelled host and node) or per host (sums over the host's
            nodes, with a count of its nodes): "always" gives them per
            node, "never" per host, "auto" per node while the fleet has at
            most per_node_series_max_nodes nodes and per host beyond, so a
            scrape stays small and fast at any fleet size.  The gauge
            nova_lite_per_node_series says which (1 per node, 0 per
            host).""",
            kind="string", nova="nova-lite only"))
    metrics_per_node_series_max_nodes: int = attrs.field(
        default=DEFAULT_PER_NODE_SERIES_MAX_NODES, validator=_int_option(0, 10 ** 7),
        metadata=option("metrics", "per_node_series_max_nodes", """
            Largest fleet (compute node records) for which per_node_series =
            auto gives per-node series; 5000 nodes are some 100,000 samples
            (about 10 MB) a scrape.""",
            minimum=0, maximum=10 ** 7, unit="nodes", nova="nova-lite only"))
    pci_alias: str = attrs.field(
        default="", validator=_pci_alias_option,
        metadata=option("pci", "alias", """
            Names of kinds of PCI device that flavors ask for with
            pci_passthrough:alias=<name>:<count>: one JSON object, or a JSON
            list of them, each with name, vendor_id and product_id (4 hex
            digits), and optionally device_type (type-PCI, type-PF or
            type-VF), numa_policy (legacy, required or preferred),
            resource_class (only devices counted in that class serve it) and
            traits (comma-separated names every such device has).  A value
            may continue on indented lines.""",
            default_text="none", nova="same name and keys; one option holding a list "
                                      "where Nova repeats it; one device kind per name"))
    pci_report_in_placement: bool = attrs.field(
        default=False, validator=_bool_option,
        metadata=option("pci", "report_in_placement", """
            Record each node's PCI devices as child providers of the node:
            one per device that is not a VF, and one per physical function
            holding its VFs, named <node>_<PCI address>, in the device's
            resource_class (else CUSTOM_PCI_<VENDOR>_<PRODUCT>) with its
            traits and COMPUTE_MANAGED_PCI_DEVICE.  A claim with
            pci_passthrough:alias then also holds one unit on the provider
            of each device it takes, and every view of providers shows
            them.  Off, devices are claimed and shown as devices only.""",
            kind="boolean", nova="same name and default; no separate "
                                 "[filter_scheduler] pci_in_placement: the claim "
                                 "lands on the providers whenever they are recorded"))
    #: Raw options of every section, for plugins (not an option itself).
    sections: Mapping[str, Mapping[str, str]] = attrs.field(
        factory=dict, converter=_sections, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.vcpu_pin_set and self.cpu_dedicated_set:
            # As Nova: the legacy option cannot stand beside cpu_dedicated_set.
            # Beside cpu_shared_set it is accepted (vcpu_pin_set then decides
            # the VCPU inventory); the libvirt driver warns about it, as Nova's does.
            raise InvalidConfig(
                "vcpu_pin_set", self.vcpu_pin_set,
                "cannot be combined with cpu_dedicated_set; use cpu_shared_set for "
                "shared CPUs instead")
        if self.cpu_shared_set and self.cpu_dedicated_set:
            from nova_lite.hardware import parse_cpu_spec
            both = parse_cpu_spec(self.cpu_shared_set) & parse_cpu_spec(self.cpu_dedicated_set)
            if both:
                raise InvalidConfig(
                    "cpu_dedicated_set", self.cpu_dedicated_set,
                    f"overlaps cpu_shared_set {self.cpu_shared_set!r} on CPUs "
                    f"{sorted(both)}")

    def allocation_ratio(self, kind: str) -> Fraction:
        """Effective ratio of ``kind`` ("cpu", "ram" or "disk") for a new node.

        Returns an exact Fraction: the explicit ``<kind>_allocation_ratio``
        if set, else ``initial_<kind>_allocation_ratio``.
        """
        explicit = getattr(self, f"{kind}_allocation_ratio")
        value = explicit if explicit is not None else getattr(
            self, f"initial_{kind}_allocation_ratio")
        return to_ratio(value, f"{kind}_allocation_ratio")

    @property
    def pci_aliases(self) -> "Mapping[str, PciAlias]":
        """``{name: PciAlias}`` of ``[pci] alias`` (checked when the settings were made)."""
        from nova_lite.pci_alias import parse_aliases
        return parse_aliases(self.pci_alias)

    def section(self, name: str) -> Mapping[str, str]:
        """Raw options of an INI section a plugin owns, as a read-only mapping."""
        return self.sections.get(name, types.MappingProxyType({}))

    def redacted_database_url(self) -> str:
        """The database URL with any password replaced by ``***``."""
        return redact_url(self.database_url)


# user:password@ of a URL (the password may itself hold "@": up to the last one).
_USERINFO_PASSWORD = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:)[^\s]*@")
# password=... as a URL query parameter or a libpq keyword, any case
# (?password=, &PASSWORD=, "host=db password='x y'", sslpassword=).
_KEYWORD_PASSWORD = re.compile(
    r"(?i)(?P<pre>password\s*=\s*)(?:'[^']*'|\"[^\"]*\"|[^\s&;,#]*)")


def redact_url(url: object) -> str:
    """``url`` (or any text holding URLs) with every password replaced by ``***``.

    Covers ``scheme://user:password@host`` and ``password=`` given as a query
    parameter (``?password=...``, ``&Password=...``) or as a libpq keyword,
    in any case.
    """
    if not isinstance(url, str):
        url = str(url)
    text = _USERINFO_PASSWORD.sub(r"\g<pre>***@", url)
    return _KEYWORD_PASSWORD.sub(r"\g<pre>***", text)


def options(cls: type | None = None) -> list[tuple[str, Option]]:
    """Every option of ``cls`` as ``(field name, Option)`` pairs, in order.

    ``cls`` is :class:`Settings` (the default, the core's options) or a
    driver's options class (see :func:`read_options`).  A field without
    :func:`option` metadata (``sections``) is not an option.
    """
    cls = Settings if cls is None else cls
    return [(f.name, f.metadata[OPTION_KEY]) for f in attrs.fields(cls)
            if OPTION_KEY in f.metadata]


# INI (section, option) -> Settings field.
_INI_OPTIONS = {(opt.section, opt.name): name for name, opt in options()}
#: The sections whose options are the core's: no driver may declare options in them.
CORE_SECTIONS = frozenset(section for section, _ in _INI_OPTIONS)
#: Shortest values accepted from a configuration file (seconds): an operator
#: asking for less is mistaken (a 1e-9 s driver timeout fails every call).
MIN_FILE_SECONDS = {name: opt.file_minimum for name, opt in options()
                    if opt.file_minimum is not None}


def value_type(field_name: str, cls: type | None = None) -> type:
    """The Python type of option ``field_name``'s value when it is set:
    ``float`` for a ``float | None`` field, ``tuple`` for ``tuple[str, ...]``.

    ``cls`` is :class:`Settings` (the default) or a driver's options class.
    """
    cls = Settings if cls is None else cls
    annotation: typing.Any = attrs.fields_dict(cls)[field_name].type
    if isinstance(annotation, str):   # postponed annotations
        annotation = typing.get_type_hints(cls)[field_name]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) or annotation


_FIELD_TYPES = {f.name: value_type(f.name) for f in attrs.fields(Settings)}


def _convert(section: str, option: str, kind: type, raw: str,
             whole_seconds: bool = False) -> int | float | str:
    where = f"[{section}] {option}"
    text = raw.strip()
    if kind is bool:
        try:
            return BOOLEAN_WORDS[text.lower()]
        except KeyError:
            raise InvalidConfig(where, raw, "must be true or false") from None
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise InvalidConfig(where, raw, "must be an integer") from None
    if kind is float:
        try:
            number = float(text)
        except ValueError:
            raise InvalidConfig(where, raw, "must be a number") from None
        return int(number) if number.is_integer() and whole_seconds else number
    return text


def _check_options_class(cls: object, owner: str) -> list[tuple[str, Option]]:
    """The options of ``cls``, a driver's options class; TypeError if it is not one."""
    if not (isinstance(cls, type) and attrs.has(cls)):
        raise TypeError(f"{owner}: options must be an attrs class, got {cls!r}")
    declared = options(cls)
    undeclared = [f.name for f in attrs.fields(cls) if OPTION_KEY not in f.metadata]
    if undeclared:
        raise TypeError(f"{owner}: options field(s) {', '.join(undeclared)} carry no "
                        "nova_lite.conf.option(...) metadata")
    for field, opt in declared:
        if opt.section in CORE_SECTIONS:
            raise TypeError(f"{owner}: option {field} is in [{opt.section}], a section "
                            "of the core's options; declare it in the driver's own section")
    return declared


def option_sections(cls: type) -> frozenset[str]:
    """The INI sections a driver's options class declares options in.

    Raises TypeError if ``cls`` is not an attrs class of :func:`option`
    fields, or declares an option in a section of the core's (:data:`CORE_SECTIONS`).
    """
    return frozenset(opt.section for _, opt in _check_options_class(cls, repr(cls)))


#: Metadata key of a driver's option whose value :func:`load_settings` also
#: copies into the named :class:`Settings` field, for code that reads it
#: there (``libvirt_connection_uri``).
SETTINGS_FIELD = "nova_lite_settings_field"


def read_options(settings: "Settings", cls: type[_T]) -> _T:
    """Build ``cls``, a driver's options class, from ``settings``' INI sections.

    Every field of ``cls`` is an ``attrs.field`` with :func:`option`
    metadata naming its ``[section] name``; its default is used when the
    section does not set it.  Values are the raw strings of
    :meth:`Settings.section`, converted by the field's type (``int``,
    ``float``, ``str``; an empty value of a number leaves the default) and
    checked by the field's converter and validator (the validators of this
    module may be reused: :data:`int_option`, ...).  A value read from the
    file must respect the option's ``file_minimum`` (seconds).

    Raises :class:`~nova_lite.exception.InvalidConfig` naming ``[section]
    name`` and the value for a bad value or an option the class does not
    declare in one of its sections, and TypeError if ``cls`` is not an
    options class (see :func:`option_sections`).
    """
    declared = _check_options_class(cls, repr(cls))
    by_ini = {(opt.section, opt.name): field for field, opt in declared}
    where = {field: f"[{opt.section}] {opt.name}" for field, opt in declared}
    values: dict[str, Any] = {}
    raws: dict[str, str] = {}
    for section in sorted({opt.section for _, opt in declared}):
        for name, value in settings.section(section).items():
            raw = str(value)
            field = by_ini.get((section, name))
            if field is None:
                raise InvalidConfig(f"[{section}] {name}", raw, "unknown option")
            kind = value_type(field, cls)
            if raw.strip() == "" and kind is not str:
                continue
            values[field] = _convert(section, name, kind, raw)
            raws[field] = raw.strip()
    for field, opt in declared:
        number = values.get(field)
        if opt.file_minimum is not None and isinstance(number, (int, float)) \
                and math.isfinite(number) and 0 < number < opt.file_minimum:
            raise InvalidConfig(where[field], raws[field],
                                f"must be at least {opt.file_minimum:g} seconds")
    try:
        return cls(**values)
    except InvalidConfig as exc:
        raise InvalidConfig(where.get(exc.option, exc.option),
                            raws.get(exc.option, exc.value), exc.reason) from None


def driver_options(settings: "Settings", driver_cls: type) -> Any:
    """The options record ``driver_cls`` declares, read from ``settings``.

    ``driver_cls`` is a driver class whose ``options`` class attribute is
    its options class (see :func:`read_options`, which does the reading and
    raises as it does); a driver that declares none gets None.
    """
    declared = getattr(driver_cls, "options", None)
    if declared is None:
        return None
    return read_options(settings, declared)


def _installed_options() -> list[tuple[str, type]]:
    """``[(driver name, options class)]`` of every installed driver that declares options."""
    from nova_lite.virt import loader   # the loader imports this module
    return loader.installed_driver_options()


def load_settings(path: str | os.PathLike[str], **overrides: Any) -> Settings:
    """Read an INI file into :class:`Settings`; ``overrides`` win over the file.

    Raises :class:`InvalidConfig` naming ``[section] option`` and the value
    for any bad value, and for an unknown option in a section nova-lite owns
    or an installed driver declares options in (its values are checked too,
    by :func:`read_options`).  Other sections are kept as raw strings
    (:meth:`Settings.section`).
    """
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as handle:
            parser.read_file(handle)
    except OSError as exc:
        raise InvalidConfig("config file", path, f"cannot be read: {exc.strerror}") from None
    except configparser.Error as exc:
        raise InvalidConfig("config file", path, f"is not valid INI: {exc}") from None
    values: dict[str, Any] = {}
    raw_sections: dict[str, dict[str, str]] = {}
    raws: dict[str, str] = {}
    for section in ["DEFAULT"] + parser.sections():
        items = parser.defaults() if section == "DEFAULT" else {
            k: val for k, val in parser.items(section) if k not in parser.defaults()}
        raw_sections.setdefault(section, {}).update(items)
        for option, raw in items.items():
            field = _INI_OPTIONS.get((section, option))
            if field is None:
                if section in CORE_SECTIONS:
                    raise InvalidConfig(f"[{section}] {option}", raw, "unknown option")
                continue
            if raw.strip() == "" and _FIELD_TYPES[field] is not str:
                continue
            values[field] = _convert(section, option, _FIELD_TYPES[field], raw,
                                     whole_seconds=field.endswith("interval"))
            raws[field] = raw.strip()
    for field, minimum in MIN_FILE_SECONDS.items():
        value = values.get(field)
        if isinstance(value, (int, float)) and math.isfinite(value) and 0 < value < minimum:
            raise InvalidConfig(_where_in_ini(field), raws.get(field, value),
                                f"must be at least {minimum:g} seconds")
    values.update(overrides)
    try:
        settings = Settings(sections=raw_sections, **values)
    except InvalidConfig as exc:
        where = _where_in_ini(exc.option)
        value = raws.get(exc.option, exc.value) if exc.option not in overrides else exc.value
        raise InvalidConfig(where, value, exc.reason) from None
    mirrored: dict[str, Any] = {}
    for _, declared in _installed_options():
        options: Any = read_options(settings, declared)
        for option_field in attrs.fields(declared):
            target = option_field.metadata.get(SETTINGS_FIELD)
            value = getattr(options, option_field.name)
            if target is not None and target not in overrides and \
                    value != option_field.default:
                mirrored[target] = value
    return attrs.evolve(settings, **mirrored) if mirrored else settings


def _where_in_ini(field: str) -> str:
    for (section, option), name in _INI_OPTIONS.items():
        if name == field:
            return f"[{section}] {option}"
    return field
