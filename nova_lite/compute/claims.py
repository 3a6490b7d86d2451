"""Claims: resources held for an instance build or a resize.

A claim is made (and checked) by the ResourceTracker before the object is
returned; used as a context manager, an exception in the block aborts it
and propagates.
"""

import logging
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TypeVar

from nova_lite.exception import ComputeResourcesUnavailable  # noqa: F401 - public name here too
from nova_lite.objects import Allocation, Instance, Migration

if TYPE_CHECKING:   # the tracker imports this module
    from nova_lite.compute.resource_tracker import ResourceTracker

LOG = logging.getLogger(__name__)

_C = TypeVar("_C", bound="NopClaim")


class NopClaim:
    """A claim that holds nothing (e.g. a rebuild on the same node)."""

    migration: Migration | None = None

    def __init__(self, instance: Instance | None = None, nodename: str | None = None) -> None:
        self.instance = instance
        self.nodename = nodename
        self.allocation: Allocation | None = None

    @property
    def claimed(self) -> dict[str, int]:
        """Resources held, ``{rc: amount}``: none."""
        return {}

    def abort(self) -> None:
        """Nothing to give back."""

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if exc_type is not None:
            self.abort()
        return False


class Claim(NopClaim):
    """Resources held on one node for one instance build.

    ``instance`` is the instance as placed (host, node, NUMA pinning, PCI
    devices); ``allocation`` the record of what it holds; ``generation``
    the node's generation the claim committed at.
    """

    instance: Instance
    nodename: str

    def __init__(self, tracker: "ResourceTracker", instance: Instance, nodename: str,
                 allocation: Allocation, generation: int | None = None) -> None:
        super().__init__(instance, nodename)
        self._tracker = tracker
        self.allocation = allocation
        self.generation = generation
        self._aborted = False

    @property
    def claimed(self) -> dict[str, int]:
        """Resources held, ``{rc: amount}`` (flavor plus overhead)."""
        assert self.allocation is not None   # a Claim is made with what it holds
        return dict(self.allocation.resources)

    def abort(self) -> None:
        """Give the resources back (idempotent)."""
        if self._aborted:
            return
        self._aborted = True
        LOG.debug("Aborting claim of instance %s on %s", self.instance.uuid, self.nodename)
        self._tracker.abort_instance_claim(self.instance, self.nodename)


class MoveClaim(Claim):
    """Resources held on the destination of a resize or move.

    ``migration`` is the Migration record created for it; aborting marks
    it "error" and frees the destination.
    """

    migration: Migration

    def __init__(self, tracker: "ResourceTracker", instance: Instance, nodename: str,
                 allocation: Allocation, migration: Migration,
                 generation: int | None = None) -> None:
        super().__init__(tracker, instance, nodename, allocation, generation)
        self.migration = migration

    def abort(self) -> None:
        """Free the destination and mark the migration failed (idempotent)."""
        if self._aborted:
            return
        self._aborted = True
        self._tracker.abort_move_claim(self.migration)
