"""Nova's scheduler request filters: aggregates a request must (not) land in.

Before the filters run, Nova's scheduler turns some settings and aggregate
metadata into Placement's ``member_of``; so does the HostManager here,
with :func:`process`, on every request:

- ``require_tenant_aggregate`` (``[scheduler]
  limit_tenants_to_placement_aggregate``): the aggregates whose metadata
  has a key beginning with ``filter_tenant_id`` (``filter_tenant_id``,
  ``filter_tenant_id2``...) with the request's project as its value become
  one more set of ``member_of`` (any of them).  A project no aggregate
  names may use every host, unless ``[scheduler]
  placement_aggregate_required_for_tenants``: then its request fails
  (:class:`RequestFilterFailed`).
- ``isolate_aggregates`` (``[scheduler]
  enable_isolated_aggregate_filtering``): an aggregate with metadata
  ``trait:NAME=required`` for a trait the flavor does not require
  (``trait:NAME=required`` extra spec) becomes a forbidden aggregate.

Both only add to what the caller asked (``RequestSpec.member_of`` and
``forbidden_aggregates``).
"""

import logging
from collections.abc import Iterable

import attrs

from nova_lite.conf import Settings
from nova_lite.db.aggregates import Aggregate
from nova_lite.scheduler.request import RequestSpec

LOG = logging.getLogger(__name__)

#: The metadata key (prefix) naming an aggregate's project (Nova's).
TENANT_METADATA_KEY = "filter_tenant_id"
#: The metadata key prefix of an aggregate's required traits (Nova's).
TRAIT_PREFIX = "trait:"
REQUIRED = "required"


class RequestFilterFailed(Exception):
    """A request filter found no host can take the request: ``filter`` is
    its name, ``reason`` why (Nova's ``RequestFilterFailed``)."""

    def __init__(self, filter_name: str, reason: str) -> None:
        self.filter = filter_name
        self.reason = reason
        super().__init__(f"{filter_name}: {reason}")


@attrs.frozen
class Filtered:
    """What the request filters made of a request: the ``spec`` with its
    aggregates added; ``required`` says why each set of ``member_of`` they
    added was asked for, ``forbidden`` why each aggregate they forbade is
    forbidden (words for the scheduler's report)."""

    spec: RequestSpec
    required: dict[frozenset[str], str] = attrs.field(factory=dict)
    forbidden: dict[str, str] = attrs.field(factory=dict)


def tenant_aggregates(aggregates: Iterable[Aggregate], project_id: str | None
                      ) -> frozenset[str]:
    """The uuids of the aggregates whose ``filter_tenant_id*`` metadata is
    ``project_id`` (none for a request without a project)."""
    if not project_id:
        return frozenset()
    return frozenset(a.uuid for a in aggregates if any(
        key.startswith(TENANT_METADATA_KEY) and value == project_id
        for key, value in a.metadata.items()))


def isolated_aggregates(aggregates: Iterable[Aggregate], required_traits: Iterable[str]
                        ) -> dict[str, frozenset[str]]:
    """``{aggregate uuid: the traits it requires that are not required}``
    for each aggregate with ``trait:NAME=required`` metadata naming a trait
    not in ``required_traits``."""
    wanted = frozenset(required_traits)
    out: dict[str, frozenset[str]] = {}
    for agg in aggregates:
        needs = frozenset(key[len(TRAIT_PREFIX):] for key, value in agg.metadata.items()
                          if key.startswith(TRAIT_PREFIX) and value == REQUIRED)
        if needs - wanted:
            out[agg.uuid] = needs - wanted
    return out


def process(spec: RequestSpec, aggregates: Iterable[Aggregate],
            settings: Settings) -> Filtered:
    """Apply the enabled request filters of ``settings`` to ``spec`` given
    every aggregate recorded; returns a :class:`Filtered`.

    :raises RequestFilterFailed: ``placement_aggregate_required_for_tenants``
        and no aggregate names the request's project.
    """
    aggregates = tuple(aggregates)
    required: dict[frozenset[str], str] = {}
    forbidden: dict[str, str] = {}
    member_of = list(spec.member_of)
    denied = set(spec.forbidden_aggregates)
    if settings.limit_tenants_to_placement_aggregate:
        mine = tenant_aggregates(aggregates, spec.project_id)
        if mine:
            member_of.append(mine)
            required[mine] = f"{TENANT_METADATA_KEY} of project {spec.project_id}"
        elif settings.placement_aggregate_required_for_tenants:
            raise RequestFilterFailed(
                "require_tenant_aggregate",
                f"no aggregate has {TENANT_METADATA_KEY} {spec.project_id or '(no project)'} "
                "and [scheduler] placement_aggregate_required_for_tenants is set")
    if settings.enable_isolated_aggregate_filtering:
        for uuid, traits in isolated_aggregates(aggregates, spec.traits.required).items():
            denied.add(uuid)
            forbidden[uuid] = (f"it requires trait(s) {', '.join(sorted(traits))} the "
                               "flavor does not require")
    if len(member_of) == len(spec.member_of) and denied == spec.forbidden_aggregates:
        return Filtered(spec=spec)
    LOG.debug("Request filters: member_of %s, forbidden aggregates %s",
              [sorted(g) for g in member_of], sorted(denied))
    return Filtered(spec=attrs.evolve(spec, member_of=member_of,
                                      forbidden_aggregates=denied),
                    required=required, forbidden=forbidden)


__all__ = ["Filtered", "RequestFilterFailed", "TENANT_METADATA_KEY", "isolated_aggregates",
           "process", "tenant_aggregates"]
