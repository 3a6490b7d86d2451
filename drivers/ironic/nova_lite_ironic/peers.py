"""Who else shares the fleet: live compute services and this host's instances.

The driver asks two small questions of the outside world, each behind a
protocol so that it works with the core's ``Store``, with a test double, or
alone:

- :class:`ServiceView`: the hosts of the live compute services (the hash
  ring is built over them);
- :class:`InstanceView`: the uuids of the instances of one host (a node that
  carries an instance of another host is never taken).
"""

import logging
import time
import typing
from collections.abc import Callable, Iterable, Mapping

LOG = logging.getLogger(__name__)

#: The ``binary`` of compute services in the services table.
COMPUTE_BINARY = "nova-lite-compute"


@typing.runtime_checkable
class ServiceView(typing.Protocol):
    """Answers: which compute services are alive now?"""

    def live_hosts(self) -> typing.Collection[str]:
        """Host names of the compute services considered up."""


@typing.runtime_checkable
class InstanceView(typing.Protocol):
    """Answers: which instances live on a host?"""

    def instance_uuids(self, host: str) -> typing.Collection[str]:
        """UUIDs of the live instances whose host is ``host``."""


class StaticServiceView:
    """A fixed set of live hosts (tests, or a deployment without a services table)."""

    def __init__(self, hosts: Iterable[str] = ()) -> None:
        self.hosts = set(hosts)

    def live_hosts(self) -> set[str]:
        """The hosts given (a copy)."""
        return set(self.hosts)


class StaticInstanceView:
    """A fixed ``{host: {instance uuid, ...}}`` mapping."""

    def __init__(self, by_host: Mapping[str, Iterable[str]] | None = None) -> None:
        self.by_host = {h: set(u) for h, u in (by_host or {}).items()}

    def instance_uuids(self, host: str) -> set[str]:
        """The uuids recorded for ``host``."""
        return set(self.by_host.get(host, ()))


class StoreServiceView:
    """Live compute services read from the core's ``Store``.

    A service is live when it is enabled and up: not ``disabled``, and its
    ``is_up(service_down_time, now)`` (last heartbeat at most
    ``service_down_time`` seconds old).  ``store`` needs
    ``list_services(binary=...)`` returning the core's
    ``nova_lite.db.ServiceRecord`` records (or any with ``host``,
    ``disabled`` and that ``is_up``).
    """

    def __init__(self, store: typing.Any, service_down_time: float = 60.0,
                 binary: str = COMPUTE_BINARY,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.service_down_time = service_down_time
        self.binary = binary
        self.clock = clock

    def live_hosts(self) -> set[str]:
        """Hosts whose service is enabled and whose heartbeat is recent enough."""
        now = self.clock()
        hosts: set[str] = set()
        for svc in self.store.list_services(binary=self.binary):
            if not svc.disabled and svc.is_up(self.service_down_time, now):
                hosts.add(svc.host)
        return hosts


class StoreInstanceView:
    """Instances of a host read from the core's ``Store``.

    ``store`` needs ``list_instances(host=...)`` returning records with a
    ``uuid`` (only instances that still hold resources).
    """

    def __init__(self, store: typing.Any) -> None:
        self.store = store

    def instance_uuids(self, host: str) -> set[str]:
        """UUIDs of the live instances of ``host``."""
        return {inst.uuid for inst in self.store.list_instances(host=host)}


class UnionInstanceView:
    """Instances any of ``views`` reports for a host."""

    def __init__(self, *views: InstanceView) -> None:
        self.views = views

    def instance_uuids(self, host: str) -> set[str]:
        """The union of the views' answers."""
        found: set[str] = set()
        for view in self.views:
            found |= set(view.instance_uuids(host))
        return found


class CallableServiceView:
    """A ServiceView over a callable returning the live hosts (the core's
    ``ComputeService.live_services``)."""

    def __init__(self, func: Callable[[], Iterable[str]]) -> None:
        self.func = func

    def live_hosts(self) -> set[str]:
        """Whatever the callable returns, as a set."""
        return set(self.func())


class CallableInstanceView:
    """An InstanceView over a callable ``func(host) -> uuids``."""

    def __init__(self, func: Callable[[str], Iterable[str]]) -> None:
        self.func = func

    def instance_uuids(self, host: str) -> set[str]:
        """Whatever the callable returns for ``host``, as a set."""
        return set(self.func(host))


def as_service_view(view: ServiceView | Callable[[], Iterable[str]]) -> ServiceView:
    """``view`` if it is a ServiceView, else a callable wrapped in one."""
    if isinstance(view, ServiceView):
        return view
    if callable(view):
        return CallableServiceView(view)
    raise TypeError(f"expected a ServiceView or a callable, got {view!r}")


def as_instance_view(view: InstanceView | Callable[[str], Iterable[str]]) -> InstanceView:
    """``view`` if it is an InstanceView, else a callable wrapped in one."""
    if isinstance(view, InstanceView):
        return view
    if callable(view):
        return CallableInstanceView(view)
    raise TypeError(f"expected an InstanceView or a callable, got {view!r}")
