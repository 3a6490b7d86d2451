"""Helpers shared by the reliability tests.

- :func:`dump`: every row of every table, to prove "nothing changed";
- :func:`record_problems`: partial, orphaned, lost or double allocations,
  read through the Store's public API;
- :class:`SQLiteBackend` / :class:`PostgreSQLBackend`: mixins giving a
  test a fresh database URL (``self.database_url()``).
"""

import collections
import logging
import math
import os

import fixtures
import sqlalchemy as sa
import testtools

from nova_lite.db import models
from nova_lite.objects import MIGRATION_IN_PROGRESS
from nova_lite.providers import NODE_CLASSES
from nova_lite.testing import databases
from tests.reliability.history import holds_resources

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dump(store, exclude=()):
    """``{table: sorted rows}`` of every table; ``exclude``: "table.column" names."""
    def op(conn):
        out = {}
        for table in models.metadata.sorted_tables:
            cols = [c for c in table.c if f"{table.name}.{c.name}" not in exclude]
            rows = conn.execute(sa.select(*cols)).all()
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
        return out
    return store.db.read("dump every table", op)


def requested(flavor):
    """``{rc: amount}`` a flavor asks for with zero overhead (the model's view),
    with the classes its ``resources:<RC>`` extra specs ask of child providers."""
    amounts = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb,
               "DISK_GB": flavor.root_gb + flavor.ephemeral_gb + math.ceil(flavor.swap / 1024)}
    for key, value in (flavor.extra_specs or {}).items():
        if key.startswith("resources:") and key[len("resources:"):] not in NODE_CLASSES:
            amounts[key[len("resources:"):]] = int(value)
    return {rc: n for rc, n in amounts.items() if n}


def differs_from(alloc, asked):
    """Whether ``alloc``'s amounts differ from ``asked`` (its consumer's flavor's)
    other than by one unit per PCI device it holds, landed on the children (its
    device providers' units, in classes the flavor does not name)."""
    extra = add_amounts(dict(alloc.resources), asked, sign=-1)
    if not extra:
        return False
    landed = {}
    for per in alloc.providers.values():
        add_amounts(landed, {rc: n for rc, n in per.items() if rc in extra})
    return (extra != landed or any(rc in asked for rc in extra)
            or sum(extra.values()) != len(alloc.pci_devices))


def add_amounts(total, amounts, sign=1):
    """Add ``amounts`` into the dict ``total`` (zeros dropped)."""
    for rc, n in amounts.items():
        total[rc] = total.get(rc, 0) + sign * n
        if not total[rc]:
            del total[rc]
    return total


def record_problems(store, host=None):
    """Every inconsistency of the records, as text (empty when all is well).

    - an allocation whose consumer row is missing, not live, or elsewhere
      (a partial or orphaned row);
    - a live instance (:func:`~tests.reliability.history.holds_resources`:
      a shelved-offloaded one placed by an unshelve claim too), or an
      in-progress migration, on a recorded node that holds no allocation
      there, or more than one (lost or double);
    - an allocation whose amounts differ from its consumer's flavor (other
      than by one unit per PCI device it holds, on the device providers), or
      whose amounts on child providers (``providers``) differ from its
      amounts of the classes only children offer;
    - a node whose stored usage differs from the sum of its allocations (the
      classes its child providers hold apart), or whose ``provider_usage``
      differs from the sum of its allocations' ``providers``.
    """
    problems = []
    nodes = {n.uuid: n for n in store.get_compute_nodes(host)}
    by_place = {(n.host, n.nodename): n for n in nodes.values()}
    instances = {i.uuid: i for i in store.list_instances(live_only=False)}
    migrations = {m.uuid: m for m in store.list_migrations()}
    allocations = store.list_allocations()
    held = collections.Counter()
    sums = collections.defaultdict(dict)
    child_sums = collections.defaultdict(dict)   # node uuid -> {child: {rc: n}}
    for alloc in allocations:
        node = nodes.get(alloc.node_uuid)
        if node is None:
            if host is None:
                problems.append(f"allocation {alloc.consumer_uuid} on missing node "
                                f"{alloc.node_uuid}")
            continue
        landed = {}
        for name, per in alloc.providers.items():
            add_amounts(child_sums[node.uuid].setdefault(name, {}), per)
            add_amounts(landed, per)
        own = add_amounts(dict(alloc.resources), landed, sign=-1)
        if any(n < 0 for n in own.values()):
            problems.append(f"allocation of {alloc.consumer_uuid} on {node.nodename} holds "
                            f"{dict(alloc.resources)} but lands more on its children: "
                            f"{dict(alloc.providers)}")
        add_amounts(sums[node.uuid], own)
        held[(alloc.consumer_uuid, node.uuid)] += 1
        if alloc.consumer_type == "instance":
            inst = instances.get(alloc.consumer_uuid)
            if inst is None:
                problems.append(f"allocation of instance {alloc.consumer_uuid} on "
                                f"{node.nodename} has no instance row")
            elif not holds_resources(inst.vm_state, inst.node) or \
                    (inst.host, inst.node) != (node.host, node.nodename):
                problems.append(f"allocation of instance {inst.uuid} on {node.nodename} but "
                                f"the instance is {inst.vm_state} at {inst.host}/{inst.node}")
            elif differs_from(alloc, requested(inst.flavor)):
                problems.append(f"allocation of instance {inst.uuid} holds "
                                f"{dict(alloc.resources)}, its flavor asks "
                                f"{requested(inst.flavor)}")
        else:
            mig = migrations.get(alloc.consumer_uuid)
            if mig is None:
                problems.append(f"allocation of migration {alloc.consumer_uuid} has no "
                                "migration row")
            elif mig.status not in MIGRATION_IN_PROGRESS:
                problems.append(f"allocation of migration {mig.uuid} which is {mig.status}")
            elif (mig.dest_compute, mig.dest_node) != (node.host, node.nodename):
                problems.append(f"allocation of migration {mig.uuid} on {node.nodename}, "
                                f"its destination is {mig.dest_node}")
            elif differs_from(alloc, requested(mig.new_flavor)):
                problems.append(f"allocation of migration {mig.uuid} holds "
                                f"{dict(alloc.resources)}, its new flavor asks "
                                f"{requested(mig.new_flavor)}")
            if mig is not None and mig.instance_uuid not in instances:
                problems.append(f"migration {mig.uuid} of unknown instance "
                                f"{mig.instance_uuid}")
    for (consumer, node_uuid), count in held.items():
        if count > 1:
            problems.append(f"{consumer} holds {count} allocations on {node_uuid}")
    for inst in instances.values():
        node = by_place.get((inst.host, inst.node))
        if holds_resources(inst.vm_state, inst.node) and node is not None \
                and not held[(inst.uuid, node.uuid)]:
            problems.append(f"live instance {inst.uuid} on {node.nodename} holds nothing")
    for mig in migrations.values():
        node = by_place.get((mig.dest_compute, mig.dest_node))
        if mig.status in MIGRATION_IN_PROGRESS and node is not None \
                and not held[(mig.uuid, node.uuid)]:
            problems.append(f"migration {mig.uuid} in progress to {node.nodename} holds "
                            "nothing")
    for node in nodes.values():
        if dict(node.usage) != sums.get(node.uuid, {}):
            problems.append(f"node {node.nodename} usage {dict(node.usage)} != sum of its "
                            f"allocations {sums.get(node.uuid, {})}")
        children = {name: per for name, per in child_sums.get(node.uuid, {}).items() if per}
        recorded = {name: dict(per) for name, per in node.provider_usage.items() if per}
        if recorded != children:
            problems.append(f"node {node.nodename} child usage {recorded} != sum of its "
                            f"allocations' providers {children}")
    problems += usage_row_problems(store, nodes)
    return problems


def usage_row_problems(store, nodes=None):
    """A ``node_usage`` row at its node's current generation that differs from the
    allocations (a claim that loses its race would decide on it)."""
    def op(conn):
        found = conn.execute(sa.select(models.node_usage, models.compute_nodes.c.generation.label(
            "node_generation")).join(models.compute_nodes, models.compute_nodes.c.uuid ==
                                     models.node_usage.c.node_uuid)).all()
        out = []
        for row in found:
            if nodes is not None and row.node_uuid not in nodes:
                continue
            if row.generation != row.node_generation:
                continue   # left behind: never used
            with_extras = conn.execute(sa.select(sa.func.count()).where(
                models.allocations.c.node_uuid == row.node_uuid,
                sa.or_(models.allocations.c.other.is_not(None),
                       models.allocations.c.numa_topology.is_not(None),
                       models.allocations.c.pci_devices.is_not(None),
                       models.allocations.c.providers.is_not(None)))).scalar()
            columns = ("vcpu", "pcpu", "memory_mb", "disk_gb")
            sums = conn.execute(sa.select(*[sa.func.coalesce(sa.func.sum(
                models.allocations.c[c]), 0) for c in columns]).where(
                models.allocations.c.node_uuid == row.node_uuid)).one()
            expected = dict(zip(columns, (int(n) for n in sums)), extras=with_extras)
            recorded = {c: getattr(row, c) for c in (*columns, "extras")}
            if recorded != expected:
                out.append(f"node_usage of {row.node_uuid} at generation {row.generation} "
                           f"is {recorded}, its allocations sum to {expected}")
        return out
    return store.db.read("check node_usage rows", op)


class SQLiteBackend:
    """Mixin: ``database_url()`` gives a fresh SQLite file."""

    backend = "sqlite"

    def database_url(self, name="nova-lite.db"):
        return self.useFixture(databases.SQLiteFile(name=name)).url


class PostgreSQLBackend:
    """Mixin: ``database_url()`` gives a fresh PostgreSQL database.

    Skips the test when the server is absent (fails it when required).
    """

    backend = "postgresql"

    def database_url(self, name=None):
        databases.use_postgresql(self)
        return self.useFixture(databases.PostgreSQLDatabase()).url


class TestCase(testtools.TestCase):
    """testtools.TestCase that captures logs (shown only on failure)."""

    log_level = logging.WARNING

    def setUp(self):
        super().setUp()
        self.logs = self.useFixture(fixtures.FakeLogger(level=self.log_level))

    def assertDumpEqual(self, before, after, message="the store changed"):
        """Like assertEqual on two :func:`dump` results, showing only what changed."""
        if before == after:
            return
        lines = []
        for table in sorted(set(before) | set(after)):
            old, new = before.get(table, []), after.get(table, [])
            lines += [f"{table}: - {row!r}" for row in old if row not in new]
            lines += [f"{table}: + {row!r}" for row in new if row not in old]
        self.fail(message + ":\n" + "\n".join(lines))

    def assertNoRecordProblems(self, store, host=None):
        problems = record_problems(store, host)
        self.assertEqual([], problems, "records are inconsistent:\n" + "\n".join(problems))
