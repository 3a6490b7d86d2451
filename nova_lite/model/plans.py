"""A claim's request and its plan: what is asked, what the store checks, what it writes.

The tracker builds a :class:`ClaimAsk` per claim before any lock (the
driver's overhead estimate is a driver call); the decision
(:mod:`nova_lite.model.decide`) turns asks into :class:`ClaimPlan` records
on one node record; the store checks each :class:`ClaimRequest` under the
instance row's lock and writes the plans.
"""

import functools
import types
from collections.abc import Mapping

import attrs

from nova_lite.model.requested import flavor_numa_request, requested_resources
from nova_lite.objects import (
    Allocation, Flavor, Instance, InstanceNUMATopology, Migration, Overhead)

#: The largest amount of one class a node records (SQL's 64-bit sums, exact
#: in a double): a request or a usage above it is refused, never stored.
MAX_AMOUNT = 2 ** 53 - 1


@attrs.frozen
class ClaimAsk:
    """One claim's request, worked out before any lock: what it asks for and why.

    ``requested`` is ``{rc: amount}`` (flavor plus the driver's overhead);
    ``numa_request`` the NUMA topology it needs placed (the instance's, else
    the one its flavor implies); ``migration`` is set for a move.
    """

    instance: Instance
    flavor: Flavor
    requested: Mapping[str, int]
    numa_request: InstanceNUMATopology | None = None
    migration: Migration | None = None

    @classmethod
    def build(cls, instance: Instance, flavor: Flavor, overhead: Overhead,
              migration: Migration | None = None) -> "ClaimAsk":
        """The ask of ``instance`` for ``flavor`` with the driver's ``overhead``."""
        # An instance without a NUMA request gets the one its flavor implies
        # (hw:cpu_policy=dedicated, hw:numa_nodes, hw:mem_page_size), as in Nova.
        if instance.numa_topology is None:
            numa_request, requested = _flavor_request(flavor, overhead)
        else:
            numa_request = instance.numa_topology
            requested = requested_resources(flavor, overhead, numa_request)
        return cls(instance=instance, flavor=flavor, requested=requested,
                   numa_request=numa_request, migration=migration)


@functools.lru_cache(maxsize=256)
def _flavor_request(flavor: Flavor, overhead: Overhead
                    ) -> tuple[InstanceNUMATopology | None, Mapping[str, int]]:
    """The NUMA request and amounts of an instance with no NUMA topology of
    its own: the flavor's and the overhead's alone, worked out once for
    each (a fleet builds many instances of a few flavors).  A malformed
    extra spec raises every time: an exception is never cached."""
    numa_request = flavor_numa_request(flavor)
    requested = requested_resources(flavor, overhead, numa_request)
    return numa_request, types.MappingProxyType(requested)


@attrs.frozen
class ClaimRequest:
    """What a claim is for, checked under the instance row's lock before any decision.

    ``migration`` is set for a move (resize, evacuation): it is recorded
    with the claim, and the instance must be live with no other move in
    progress.  Without it, an instance claim: the instance must not be
    deleted nor hold another claim.
    """

    instance_uuid: str
    migration: Migration | None = None


@attrs.frozen
class ClaimPlan:
    """What a claim writes: the allocation, and the instance/migration rows.

    ``bounds`` (``{rc: units}``), when set, says the decision depended on
    the node only through its usage: with the node's inventories, owner and
    reported flag unchanged, the plan is admitted whenever the usage of each
    class plus the allocation stays within its bound.  On PostgreSQL the
    database checks exactly that when the node moved on since the decision
    (see ``nova_lite.db.claim_writes``).  None: the plan holds only on
    the record it was decided on.
    """

    allocation: Allocation
    instance: Instance | None = None
    migration: Migration | None = None
    bounds: Mapping[str, int] | None = None
