"""Exceptions shared across nova-lite.

Every error says what was wrong and where, so that an operator can act on
the message alone.
"""

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nova_lite.objects import PciRequest
    from nova_lite.scheduler.report import FilterReport


class NovaLiteError(Exception):
    """Base class of every error nova-lite raises on purpose."""


class InvalidInput(NovaLiteError, ValueError):
    """A value given to nova-lite is malformed; the message names it."""


class InvalidType(InvalidInput, TypeError):
    """A value of the wrong type was given; the message names the argument or
    field, what it must be, and what it got.

    Both an :class:`InvalidInput` and a :class:`TypeError`.
    """


class InvalidNodeResources(InvalidInput):
    """A driver's resource report is malformed.

    ``problems`` lists every missing or malformed key, one message each.
    """

    def __init__(self, problems: Iterable[str], nodename: str | None = None) -> None:
        self.problems = list(problems)
        self.nodename = nodename
        where = f" for node {nodename!r}" if nodename else ""
        super().__init__(
            f"Invalid resource report{where}: " + "; ".join(self.problems))


class InvalidCPUSpec(InvalidInput):
    """A CPU-set specification such as ``"0-3,^2"`` could not be parsed."""


class InvalidConfig(InvalidInput):
    """A configuration option has a bad value; names the option and value."""

    def __init__(self, option: str, value: object, reason: str) -> None:
        self.option = option
        self.value = value
        self.reason = reason
        super().__init__(
            f"Invalid value {value!r} for option {option!r}: {reason}")


class ProviderConfigError(InvalidConfig):
    """A provider.yaml file cannot be used; the compute service does not start.

    Also raised at an audit for a node the file gives what its driver
    already reports (the node is then skipped with this reason).
    ``path`` is the file; ``problems`` lists what is wrong, one message
    each, every one naming its place in the document (such as
    ``providers[1].inventories.additional[0].CUSTOM_FOO.total``) and, when
    known, its line.
    """

    def __init__(self, path: str, problems: Iterable[str]) -> None:
        self.path = path
        self.problems = list(problems)
        self.option = "[compute] provider_config_location"
        self.value = path
        self.reason = "; ".join(self.problems)
        InvalidInput.__init__(self, f"Invalid provider config file {path}: {self.reason}")


class CapacityExceeded(NovaLiteError, ValueError):
    """An amount does not fit an inventory (capacity or unit rules)."""


class NodeNotFound(NovaLiteError, LookupError):
    """A compute node is not known to this tracker or store."""

    def __init__(self, nodename: str, host: str | None = None) -> None:
        self.nodename = nodename
        self.host = host
        where = f" on host {host!r}" if host else ""
        super().__init__(f"Compute node {nodename!r} not found{where}")


class InstanceNotFound(NovaLiteError, LookupError):
    """An instance is not tracked where it was looked for."""

    def __init__(self, instance_uuid: str, where: str = "") -> None:
        self.instance_uuid = instance_uuid
        super().__init__(
            f"Instance {instance_uuid} not found" + (f" {where}" if where else ""))


class MigrationNotFound(NovaLiteError, LookupError):
    """A migration is not in the records where it was looked for."""

    def __init__(self, migration_uuid: str, where: str = "") -> None:
        self.migration_uuid = migration_uuid
        super().__init__(
            f"Migration {migration_uuid} not found" + (f" {where}" if where else ""))


class MarkerNotFound(InvalidInput, LookupError):
    """The marker of a paged list names no record of that list.

    ``marker``: the value given; ``what``: what it should have named
    (e.g. "compute node uuid").  The message is Nova's ("marker [x] not
    found") with what the marker must name.
    """

    def __init__(self, marker: str, what: str) -> None:
        self.marker = marker
        self.what = what
        shown = marker if len(marker) <= 80 else marker[:76] + "..."
        super().__init__(f"marker [{shown}] not found: no {what} is recorded with it (it "
                         "may have been deleted since the previous page was listed)")


class HostNotFound(NovaLiteError, LookupError):
    """A host has no service and no compute node record."""

    def __init__(self, host: str, known: Iterable[str] = ()) -> None:
        self.host = host
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(f"Host {host!r} not found: it has no compute service and no "
                         f"compute node record (known hosts: {listed})")


class AggregateNotFound(NovaLiteError, LookupError):
    """A host aggregate has no record of that name (Nova's AggregateNotFound)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"Aggregate {name!r} could not be found")


class AggregateNameExists(InvalidInput):
    """An aggregate of that name is already recorded (Nova's AggregateNameExists)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"Aggregate {name!r} already exists")


class ServiceInUse(InvalidInput):
    """A compute service Nova refuses to delete: its host still has
    instances or moves in progress; nothing is written."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"Unable to delete the compute service of host {host!r}: {reason}")


class InvalidAggregateAction(InvalidInput):
    """A change to an aggregate that Nova refuses (a host in two zones, deleting
    an aggregate that still has hosts, an empty zone name...); nothing is
    written.  ``action`` says what was asked: ``add host``, ``remove host``,
    ``update``, ``update metadata`` or ``delete``."""

    def __init__(self, name: str, action: str, reason: str) -> None:
        self.name = name
        self.action = action
        self.reason = reason
        super().__init__(f"Cannot {action} aggregate {name!r}: {reason}")


class DriverNotReady(NovaLiteError):
    """The virt driver cannot report its nodes right now (its back end is down).

    Raised by ``get_available_nodes``: the audit skips the whole pass with
    one WARNING instead of taking every node for gone, and the compute
    service handles no orphans in that pass.
    """


class StoreError(NovaLiteError):
    """The record store failed; the message names the operation and cause.

    Nothing was written when this is raised from a claim or an audit.
    """


class ClaimRaceLost(StoreError):
    """A claim lost its generation race more times than allowed."""


class DatabaseBusy(StoreError):
    """The database stayed locked by another writer beyond the busy bound.

    Raised instead of waiting on: nothing was written.
    """


class SchemaOutdated(StoreError):
    """The database's schema is older (or newer) than this nova-lite's.

    Read-only opens never migrate: run ``nova-lite db sync``.
    """


class InstanceStateConflict(InvalidInput):
    """A change to an instance was decided on a state that is no longer its state.

    ``recorded`` is the state in the records, ``requested`` the one asked
    for; the records keep ``recorded``.
    """

    def __init__(self, instance_uuid: str, recorded: str, requested: str, reason: str) -> None:
        self.instance_uuid = instance_uuid
        self.recorded = recorded
        self.requested = requested
        super().__init__(
            f"Instance {instance_uuid} is {recorded} in the records; refusing to record it "
            f"as {requested}: {reason}")


class DriverLoadError(NovaLiteError):
    """A virt driver could not be loaded.

    Attributes: ``name`` (the name asked for), ``entry_point`` (text such as
    ``"'x = pkg.mod:Cls' from dist 1.0"``, or None when no single entry
    point is to blame), ``cause`` (text), ``installed`` (the driver names
    found in the ``nova_lite.virt.drivers`` group, sorted), ``missing``
    (the required methods the driver class leaves unimplemented; empty for
    other causes).
    """

    def __init__(self, name: str, entry_point: str | None, cause: str, installed: Iterable[str],
                 missing: Iterable[str] = ()) -> None:
        self.name = name
        self.entry_point = entry_point
        self.cause = cause
        self.installed = sorted(set(installed))
        self.missing = tuple(missing)
        where = f" (entry point {entry_point})" if entry_point else ""
        super().__init__(
            f"Cannot load virt driver {name!r}{where}: {cause}. Installed drivers: "
            f"{', '.join(self.installed) or 'none'}")


class DriverCallTimeout(NovaLiteError):
    """A driver call did not return within the timeout."""


class ComputeResourcesUnavailable(NovaLiteError):
    """A claim was rejected; ``reasons`` lists every failing dimension.

    The message reads "Insufficient compute resources: <reasons joined by
    '; '>." in Nova's words.
    """

    def __init__(self, reasons: Iterable[str], generation: int | None = None) -> None:
        self.reasons = list(reasons)
        #: The node generation the refusal was decided at (None if not known).
        self.generation = generation
        super().__init__("Insufficient compute resources: " + "; ".join(self.reasons) + ".")


class PciClaimError(NovaLiteError):
    """PCI requests cannot be met; the message names vendor:product and count.

    ``request`` is the :class:`~nova_lite.objects.PciRequest` that could not
    be met and ``available`` how many matching devices were free for it;
    ``numa_cells`` the host NUMA cells the devices had to come from (None:
    any).
    """

    def __init__(self, request: "PciRequest", available: int,
                 numa_cells: Iterable[int] | None = None) -> None:
        self.request = request
        self.available = available
        self.numa_cells = numa_cells
        where = [f'alias "{request.alias_name}"'] if request.alias_name else []
        if request.dev_type is not None:
            where.append(f"device type {request.dev_type}")
        where.append(f'numa_policy "{request.numa_policy}"')
        where.append(f"NUMA cells {'any' if numa_cells is None else sorted(numa_cells)}")
        super().__init__(
            f"Claim pci failed: requested {request.count} x "
            f"{request.vendor_id}:{request.product_id} ({', '.join(where)}) "
            f"but only {available} free device(s) match")


class NoValidHost(NovaLiteError):
    """No host can take the request.

    ``report``: a tuple of :class:`~nova_lite.scheduler.report.FilterReport`,
    one per filter that ran, in order; the message lists those that removed
    hosts.
    """

    def __init__(self, flavor_name: str, total_hosts: int, report: Sequence["FilterReport"],
                 placed: int = 0) -> None:
        self.flavor_name = flavor_name
        self.total_hosts = total_hosts
        self.report = tuple(report)
        self.placed = placed
        removing = [str(r) for r in self.report if r.removed]
        if total_hosts == 0:
            why = "no compute nodes are recorded"
        elif removing:
            why = "; ".join(removing)
        else:
            why = "no host passed"
        which = f" for instance {placed + 1}" if placed else ""
        super().__init__(f"No valid host was found for flavor {flavor_name!r}{which} "
                         f"among {total_hosts} hosts: {why}")


class BuildFailed(NovaLiteError):
    """Every node tried for a build refused it; ``attempts`` lists
    ``(host, nodename, reason)`` for each try."""

    def __init__(self, attempts: Iterable[tuple[str, str, str]]) -> None:
        self.attempts = tuple(attempts)
        tried = "; ".join(f"{h}/{n}: {r}" for h, n, r in self.attempts)
        super().__init__(f"Build failed on every node tried: {tried}")


class UnknownSchema(StoreError):
    """The database holds tables, but not a schema this nova-lite knows."""


class HealSkipped(NovaLiteError):
    """A heal step was rolled back because its node changed since the audit; names why."""


class CommandError(NovaLiteError):
    """A command cannot do what it was asked; the message says why."""


class BadArguments(CommandError):
    """The command's arguments are wrong (an unknown name, a bad size, no
    confirmation); nothing was changed.  The command exits with status 2."""
