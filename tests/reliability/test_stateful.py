"""Stateful property tests of the ResourceTracker and the Store (hypothesis).

A model of the books (which instance sits where with which flavor, which
migrations are in progress, which nodes the driver reports and what the
last audit recorded) is driven side by side with a real ResourceTracker, a
real ComputeService and a real Store, by random sequences of: claim,
claim-then-abort, resize (to another node or the same one), confirm,
revert, delete, shelve-offload, audit, service pass (orphans), driver
inventory change (``set_node_size``, including sizes the audit must
refuse), nodes appearing or vanishing (``set_nodes``), and a node deleted
and enrolled again (its allocations rebuilt from the instances).  After
every step:

- every node's usage equals the sum of the live claims on it (reserved
  stays in the inventory: usage never includes it);
- no claim is admitted beyond capacity (admission agrees with the model
  exactly, and a node whose inventory never shrank is never over capacity);
- an audit is idempotent (a second audit changes no row);
- the store and the tracker's in-memory view agree;
- the records have no partial, orphaned, lost or double allocation.

It runs on a SQLite file and on PostgreSQL.  ``NOVA_LITE_HYPOTHESIS_EXAMPLES``
and ``NOVA_LITE_HYPOTHESIS_STEPS`` raise the budget (CI: 30 x 25).
"""

import math
import os
import uuid
from fractions import Fraction

import attrs
import fixtures
import sqlalchemy as sa
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule,
    run_state_machine_as_test)

from nova_lite import conf, objects
from nova_lite.compute.claims import ComputeResourcesUnavailable, MoveClaim
from nova_lite.compute.manager import ComputeService
from nova_lite.db import Store, models
from nova_lite.exception import NodeNotFound
from nova_lite.objects import Flavor, Instance
from nova_lite.virt import loader
from tests.reliability import base

HOST = "prop-host"
NODES = ("n0", "n1", "n2")
RESERVED_CPUS, RESERVED_MEMORY_MB = 1, 512
CPU_RATIO = Fraction(3, 2)

EXAMPLES = int(os.environ.get("NOVA_LITE_HYPOTHESIS_EXAMPLES", "30"))
STEPS = int(os.environ.get("NOVA_LITE_HYPOTHESIS_STEPS", "25"))
SETTINGS = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


@attrs.frozen
class Size:
    vcpus: int
    memory_mb: int
    local_gb: int

    @property
    def valid(self):
        """Every report is recorded: a total below the reserved amount gives capacity 0."""
        return True

    def capacity(self):
        return {"VCPU": max(0, math.floor((self.vcpus - RESERVED_CPUS) * CPU_RATIO)),
                "MEMORY_MB": max(0, self.memory_mb - RESERVED_MEMORY_MB),
                "DISK_GB": self.local_gb}


DEFAULT_SIZE = Size(vcpus=8, memory_mb=8192, local_gb=100)
sizes = st.builds(Size, vcpus=st.sampled_from([1, 2, 4, 8]),
                  memory_mb=st.sampled_from([256, 2048, 4096, 8192]),
                  local_gb=st.sampled_from([10, 40, 100]))
flavors = st.builds(
    lambda v, m, r, e, s: Flavor(name=f"f{v}.{m}.{r}.{e}.{s}", vcpus=v, memory_mb=m,
                                 root_gb=r, ephemeral_gb=e, swap=s),
    st.integers(1, 3), st.sampled_from([256, 512, 1024, 2048]), st.integers(0, 20),
    st.integers(0, 5), st.sampled_from([0, 512, 1024, 2048]))


@attrs.define
class MInstance:
    flavor: Flavor
    node: str = None            # None: holds nothing (aborted or offloaded)
    state: str = objects.BUILDING
    migration: str = None       # uuid of the migration in progress


@attrs.define
class MMigration:
    instance: str
    source: str
    dest: str
    old: Flavor
    new: Flavor


class TrackerMachine(RuleBasedStateMachine):
    """One compute host with three fake nodes, against a model."""

    def __init__(self, url, wipe):
        super().__init__()
        self.store = Store(url)
        if wipe:
            self.store.db.write("wipe", _wipe)
        self.settings = conf.Settings(
            host=HOST, state_path="/nonexistent", reserved_host_cpus=RESERVED_CPUS,
            reserved_host_memory_mb=RESERVED_MEMORY_MB, cpu_allocation_ratio=1.5)
        self.driver = loader.load_driver(
            "fake.multinode", settings=self.settings, nodes=list(NODES),
            vcpus=DEFAULT_SIZE.vcpus, memory_mb=DEFAULT_SIZE.memory_mb,
            local_gb=DEFAULT_SIZE.local_gb)
        self.service = ComputeService(HOST, self.driver, store=self.store,
                                      settings=self.settings)
        self.rt = self.service.tracker
        self.counter = 0
        # The model.
        self.present = set(NODES)          # nodes the driver reports
        self.reported = {n: DEFAULT_SIZE for n in NODES}
        self.recorded = {}                 # node -> Size of its last good audit
        self.errors = set()                # recorded nodes whose last audit failed
        self.unlisted = set()              # recorded nodes the last full audit did not list
        self.may_exceed = set()            # nodes whose inventory shrank or came back
        self.instances = {}
        self.migrations = {}
        self._service_pass()

    def teardown(self):
        self.store.close()

    # -- model helpers ---------------------------------------------------------
    def _uuid(self):
        self.counter += 1
        return str(uuid.UUID(int=self.counter))

    def _expected_usage(self, node):
        usage = {}
        for inst in self.instances.values():
            if inst.node == node and inst.state not in objects.STATES_WITHOUT_RESOURCES:
                base.add_amounts(usage, base.requested(inst.flavor))
        for mig in self.migrations.values():
            if mig.dest == node:
                base.add_amounts(usage, base.requested(mig.new))
        return usage

    def _fits(self, node, amounts):
        if node in self.unlisted:
            return False   # kept, but its driver does not list it: no claim
        capacity = self.recorded[node].capacity()
        used = self._expected_usage(node)
        return all(used.get(rc, 0) + n <= capacity[rc] for rc, n in amounts.items())

    def _audit_model(self, service_pass):
        for node in sorted(self.present):
            size = self.reported[node]
            if not size.valid:
                if node in self.recorded:
                    self.errors.add(node)
                continue
            old = self.recorded.get(node)
            if old is None or any(size.capacity()[rc] < old.capacity()[rc]
                                  for rc in old.capacity()):
                self.may_exceed.add(node)    # shrank, or came back with its instances
            self.recorded[node] = size
            self.errors.discard(node)
        self.unlisted = set(self.recorded) - self.present
        if service_pass:
            for node in set(self.recorded) - self.present:
                del self.recorded[node]      # the fake says it is deleted
                self.errors.discard(node)
                self.unlisted.discard(node)

    def _finish_migrations(self, instance_uuid):
        inst = self.instances[instance_uuid]
        if inst.migration is not None:
            del self.migrations[inst.migration]
            inst.migration = None

    def _stored(self, instance_uuid):
        return self.store.get_instance(instance_uuid)

    def _service_pass(self):
        self.service.run_once()
        self._audit_model(service_pass=True)

    # -- rules: claims -------------------------------------------------------------
    @initialize(first=st.lists(st.tuples(st.sampled_from(NODES), flavors), max_size=6))
    def some_instances(self, first):
        for node, flavor in first:
            self.claim(node, flavor)

    @rule(node=st.sampled_from(NODES), flavor=flavors)
    def claim(self, node, flavor):
        inst = Instance(uuid=self._uuid(), flavor=flavor, project_id="p")
        if node not in self.recorded:
            with _raises(NodeNotFound) as err:
                self.rt.instance_claim(inst, node)
            assert node in str(err.value), err.value
            return
        fits = self._fits(node, base.requested(flavor))
        before = base.dump(self.store) if not fits else None
        try:
            claim = self.rt.instance_claim(inst, node)
        except ComputeResourcesUnavailable as exc:
            assert not fits, f"claim of {flavor} on {node} rejected but fits: {exc}"
            assert exc.reasons and str(exc).startswith("Insufficient compute resources: ")
            assert base.dump(self.store) == before, "a rejected claim wrote something"
            return
        assert fits, f"claim of {flavor} on {node} admitted beyond capacity"
        assert claim.instance.node == node and claim.claimed == base.requested(flavor)
        self.instances[inst.uuid] = MInstance(flavor=flavor, node=node)

    @rule(node=st.sampled_from(NODES), flavor=flavors)
    def claim_then_abort(self, node, flavor):
        if node not in self.recorded or not self._fits(node, base.requested(flavor)):
            return
        inst = Instance(uuid=self._uuid(), flavor=flavor)
        with _raises(_SpawnFailed):
            with self.rt.instance_claim(inst, node):
                raise _SpawnFailed("spawn failed")
        self.instances[inst.uuid] = MInstance(flavor=flavor, node=None)

    def _live(self, with_migration=None, placed=True):
        out = []
        for u, inst in sorted(self.instances.items()):
            if inst.state in objects.STATES_WITHOUT_RESOURCES:
                continue
            if placed and inst.node is None:
                continue
            if with_migration is not None and (inst.migration is not None) != with_migration:
                continue
            out.append(u)
        return out

    @precondition(lambda self: self._live(with_migration=False))
    @rule(data=st.data(), dest=st.sampled_from(NODES), flavor=flavors)
    def resize(self, data, dest, flavor):
        u = data.draw(st.sampled_from(self._live(with_migration=False)), label="instance")
        self._resize(u, dest, flavor)

    @precondition(lambda self: self._live(with_migration=False))
    @rule(data=st.data(), flavor=flavors)
    def resize_on_same_node(self, data, flavor):
        u = data.draw(st.sampled_from(self._live(with_migration=False)), label="instance")
        self._resize(u, self.instances[u].node, flavor)

    def _resize(self, u, dest, flavor):
        inst = self.instances[u]
        if inst.node not in self.recorded:
            return   # its node's record is gone: nothing to resize from
        stored = self._stored(u)
        if dest not in self.recorded:
            with _raises(NodeNotFound):
                self.rt.resize_claim(stored, flavor, dest)
            return
        fits = self._fits(dest, base.requested(flavor))
        try:
            claim = self.rt.resize_claim(stored, flavor, dest)
        except ComputeResourcesUnavailable:
            assert not fits, f"resize of {u} to {flavor} on {dest} rejected but fits"
            return
        assert fits, f"resize of {u} to {flavor} on {dest} admitted beyond capacity"
        assert isinstance(claim, MoveClaim)
        mig = claim.migration
        self.migrations[mig.uuid] = MMigration(instance=u, source=inst.node, dest=dest,
                                               old=inst.flavor, new=flavor)
        inst.migration = mig.uuid

    @precondition(lambda self: self._live(with_migration=True, placed=False))
    @rule(data=st.data(), confirm=st.booleans())
    def finish_resize(self, data, confirm):
        u = data.draw(st.sampled_from(self._live(with_migration=True, placed=False)),
                      label="instance")
        inst = self.instances[u]
        mig = self.migrations[inst.migration]
        node, flavor = (mig.source, mig.old) if confirm else (mig.dest, mig.new)
        if node not in self.recorded:
            with _raises(NodeNotFound):
                self.rt.drop_move_claim(self._stored(u), node, flavor)
            return
        self.rt.drop_move_claim(self._stored(u), node, flavor)
        same_everything = mig.source == mig.dest and mig.old == mig.new
        if confirm or same_everything:   # equal flavors on one node: confirm wins
            inst.flavor, inst.node = mig.new, mig.dest
        self._finish_migrations(u)

    @precondition(lambda self: self._live(placed=False))
    @rule(data=st.data(), state=st.sampled_from([objects.DELETED,
                                                 objects.SHELVED_OFFLOADED]))
    def delete_or_offload(self, data, state):
        u = data.draw(st.sampled_from(self._live(placed=False)), label="instance")
        self.rt.update_usage(attrs.evolve(self._stored(u), vm_state=state))
        inst = self.instances[u]
        inst.state = state
        if state == objects.SHELVED_OFFLOADED:
            inst.node = None
        self._finish_migrations(u)

    # -- rules: the audit and the driver ---------------------------------------------
    @rule()
    def audit(self):
        self.rt.update_available_resource()
        self._audit_model(service_pass=False)
        before = base.dump(self.store)
        self.rt.update_available_resource()
        assert base.dump(self.store) == before, "a second audit changed the records"

    @rule()
    def service_pass(self):
        self._service_pass()
        # A pass beats and records its findings anew: their times move, nothing else.
        moving = ("services.updated_at", "services.updated_floor", "services.report_count",
                  "host_findings.recorded_at")
        before = base.dump(self.store, exclude=moving)
        self.service.run_once()
        after = base.dump(self.store, exclude=moving)
        assert after == before, "a second service pass changed the records"

    @rule(node=st.sampled_from(NODES), size=sizes)
    def driver_inventory_change(self, node, size):
        self.driver.set_node_size(node, vcpus=size.vcpus, memory_mb=size.memory_mb,
                                  local_gb=size.local_gb)
        self.reported[node] = size

    @rule(node=st.sampled_from(NODES))
    def node_appears_or_vanishes(self, node):
        self.present ^= {node}
        self.driver.set_nodes(sorted(self.present))

    @rule(node=st.sampled_from(NODES))
    def node_deleted_and_back(self, node):
        """A node leaves (its record is deleted with its allocations) and returns."""
        if node not in self.present:
            return
        self.node_appears_or_vanishes(node)
        self._service_pass()
        self.node_appears_or_vanishes(node)
        self._service_pass()

    # -- invariants -----------------------------------------------------------------
    @invariant()
    def books_balance(self):
        stored = {n.nodename: n for n in self.store.get_compute_nodes(HOST)}
        assert set(stored) == set(self.recorded), (sorted(stored), sorted(self.recorded))
        for name, node in stored.items():
            expected = self._expected_usage(name)
            assert dict(node.usage) == expected, (name, dict(node.usage), expected)
            size = self.recorded[name]
            capacity = size.capacity()
            assert {rc: node.capacity(rc) for rc in capacity} == capacity, name
            # Reserved lives in the inventory, never in the usage.
            assert node.inventory("MEMORY_MB").reserved == min(RESERVED_MEMORY_MB,
                                                               size.memory_mb)
            assert node.inventory("VCPU").reserved == min(RESERVED_CPUS, size.vcpus)
            if name not in self.may_exceed:
                for rc in capacity:
                    assert node.used(rc) <= capacity[rc], (name, rc, dict(node.usage))
            assert (node.last_error is not None) == (name in self.errors), \
                (name, node.last_error, self.errors)

    @invariant()
    def tracker_agrees_with_store(self):
        for node in self.store.get_compute_nodes(HOST):
            mine = self.rt.get_node(node.nodename)
            assert (mine.uuid, mine.generation) == (node.uuid, node.generation), \
                (node.nodename, mine.generation, node.generation)
            assert dict(mine.usage) == dict(node.usage), node.nodename
            assert dict(mine.inventories) == dict(node.inventories), node.nodename
            assert mine.last_error == node.last_error, node.nodename

    @invariant()
    def records_are_whole(self):
        problems = base.record_problems(self.store, HOST)
        assert not problems, problems


class _SpawnFailed(Exception):
    pass


class _raises:
    """``with _raises(E) as err:`` (pytest-free, plain asserts for hypothesis)."""

    def __init__(self, kind):
        self.kind = kind
        self.value = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        assert exc_type is not None, f"expected {self.kind.__name__}, nothing was raised"
        if not issubclass(exc_type, self.kind):
            return False
        self.value = exc
        return True


def _wipe(conn):
    for table in reversed(models.metadata.sorted_tables):
        conn.execute(sa.delete(table))


class _StatefulTests:
    def test_tracker_and_store_keep_the_books(self):
        url = self.database_url()
        if self.backend == "sqlite":
            tmp = self.useFixture(fixtures.TempDir()).path
            counter = iter(range(10 ** 6))

            def factory():
                return TrackerMachine(f"sqlite:///{tmp}/prop{next(counter)}.db", wipe=False)
        else:
            def factory():
                return TrackerMachine(url, wipe=True)
        run_state_machine_as_test(factory, settings=SETTINGS)


class TestStatefulSQLite(base.SQLiteBackend, _StatefulTests, base.TestCase):
    pass


class TestStatefulPostgreSQL(base.PostgreSQLBackend, _StatefulTests, base.TestCase):
    pass

