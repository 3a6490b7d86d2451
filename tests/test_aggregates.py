"""Host aggregates and availability zones in the records, refused as Nova refuses."""

import uuid

import sqlalchemy as sa

from nova_lite.db import aggregates as agg_mod
from nova_lite.db import models
from nova_lite.exception import (
    AggregateNameExists, AggregateNotFound, HostNotFound, InvalidAggregateAction,
    InvalidInput)

from tests import base, test_scheduler


class AggregateStoreTests:
    """Run with ``self.make_store()``: a store of the backend, empty."""

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        for host in ("host1", "host2", "host3"):
            self.store.heartbeat(host)
        self.aggs = self.store.aggregates

    def add_instance(self, host):
        """Record a live instance on ``host`` (only its host matters here)."""
        with self.store.db.engine.begin() as conn:
            conn.execute(models.instances.insert().values(
                uuid=str(uuid.uuid4()), host=host, node=host,
                vm_state="active", flavor="{}", created_at=0.0, updated_at=0.0))

    def test_create_show_list_delete(self):
        made = self.aggs.create("fast", availability_zone="az1", metadata={"ssd": "true"})
        self.assertEqual("fast", made.name)
        self.assertEqual("az1", made.availability_zone)
        self.assertEqual({"availability_zone": "az1", "ssd": "true"}, dict(made.metadata))
        self.assertEqual(frozenset(), made.hosts)
        self.assertEqual(36, len(made.uuid))
        self.aggs.create("plain")
        self.assertEqual(["fast", "plain"], [a.name for a in self.aggs.list()])
        self.assertIsNone(self.aggs.get("plain").availability_zone)
        self.assertEqual(made, self.aggs.get("fast"))
        self.aggs.delete("fast")
        self.assertEqual(["plain"], [a.name for a in self.aggs.list()])
        with self.store.db.engine.connect() as conn:
            self.assertEqual(0, conn.execute(sa.select(sa.func.count()).select_from(
                models.aggregate_metadata).where(
                models.aggregate_metadata.c.aggregate_id == made.id)).scalar_one())

    def test_unknown_aggregate_is_named(self):
        for call in (lambda: self.aggs.get("ghost"), lambda: self.aggs.delete("ghost"),
                     lambda: self.aggs.add_host("ghost", "host1"),
                     lambda: self.aggs.remove_host("ghost", "host1"),
                     lambda: self.aggs.set_metadata("ghost", {"a": "b"})):
            error = self.assertRaises(AggregateNotFound, call)
            self.assertIn("'ghost'", str(error))

    def test_duplicate_name_refused(self):
        self.aggs.create("a1")
        error = self.assertRaises(AggregateNameExists, self.aggs.create, "a1", "az9")
        self.assertIn("'a1' already exists", str(error))
        self.assertEqual(1, len(self.aggs.list()))

    def test_hosts_added_and_removed(self):
        self.aggs.create("a1", "az1")
        self.assertEqual(frozenset({"host1"}), self.aggs.add_host("a1", "host1").hosts)
        self.assertEqual(frozenset({"host1", "host2"}),
                         self.aggs.add_host("a1", "host2").hosts)
        self.assertRaises(InvalidAggregateAction, self.aggs.add_host, "a1", "host1")
        self.assertEqual({"host1": "az1", "host2": "az1"}, self.aggs.host_zones())
        self.assertEqual(frozenset({"host2"}), self.aggs.remove_host("a1", "host1").hosts)
        error = self.assertRaises(InvalidAggregateAction, self.aggs.remove_host, "a1", "host1")
        self.assertIn("no host 'host1'", str(error))

    def test_unknown_host_refused(self):
        self.aggs.create("a1")
        error = self.assertRaises(HostNotFound, self.aggs.add_host, "a1", "nohost")
        self.assertIn("host1, host2, host3", str(error))
        self.assertEqual(frozenset(), self.aggs.get("a1").hosts)

    def test_delete_refused_while_it_has_hosts(self):
        self.aggs.create("a1")
        self.aggs.add_host("a1", "host1")
        error = self.assertRaises(InvalidAggregateAction, self.aggs.delete, "a1")
        self.assertIn("not empty", str(error))
        self.aggs.remove_host("a1", "host1")
        self.aggs.delete("a1")
        self.assertEqual([], self.aggs.list())

    def test_a_host_in_two_zones_is_refused(self):
        self.aggs.create("a1", "az1")
        self.aggs.create("a2", "az2")
        self.aggs.create("same", "az1")
        self.aggs.create("nozone")
        self.aggs.add_host("a1", "host1")
        error = self.assertRaises(InvalidAggregateAction, self.aggs.add_host, "a2", "host1")
        self.assertIn("['az1']", str(error))
        self.assertEqual(frozenset(), self.aggs.get("a2").hosts)
        # The same zone twice, and an aggregate without a zone, are fine.
        self.aggs.add_host("same", "host1")
        self.aggs.add_host("nozone", "host1")
        self.assertEqual({"host1": "az1"}, self.aggs.host_zones())
        self.assertEqual(["a1", "nozone", "same"],
                         sorted(a.name for a in self.aggs.by_host()["host1"]))
        # Nor may an aggregate's zone be changed to conflict with its hosts' zones.
        self.aggs.add_host("a2", "host2")
        error = self.assertRaises(InvalidAggregateAction, self.aggs.set_metadata, "nozone",
                                  {"availability_zone": "az2"})
        self.assertIn("['az1']", str(error))
        self.assertIsNone(self.aggs.get("nozone").availability_zone)
        self.assertEqual("az1", self.aggs.set_metadata(
            "nozone", {"availability_zone": "az1"}).availability_zone)

    def test_set_and_unset_metadata(self):
        self.aggs.create("a1", metadata={"a": "1", "b": "2"})
        changed = self.aggs.set_metadata("a1", {"a": "10", "b": None, "c": "3"})
        self.assertEqual({"a": "10", "c": "3"}, dict(changed.metadata))
        self.assertRaises(InvalidAggregateAction, self.aggs.set_metadata, "a1",
                          {"availability_zone": ""})
        self.assertRaises(InvalidAggregateAction, self.aggs.create, "a2", "")
        self.assertRaises(InvalidInput, self.aggs.set_metadata, "a1", {"k": "x" * 256})
        self.assertEqual({"a": "10", "c": "3"}, dict(self.aggs.get("a1").metadata))

    def test_zone_of_a_host_with_instances_does_not_change(self):
        self.aggs.create("a1", "az1")
        self.aggs.create("plain")
        self.add_instance("host1")
        error = self.assertRaises(InvalidAggregateAction, self.aggs.add_host, "a1", "host1")
        self.assertIn("has instances", str(error))
        # An aggregate without a zone leaves the host's zone as it is.
        self.aggs.add_host("plain", "host1")
        error = self.assertRaises(InvalidAggregateAction, self.aggs.set_metadata, "plain",
                                  {"availability_zone": "az2"})
        self.assertIn("host1", str(error))
        # A host without instances changes zone freely.
        self.aggs.add_host("a1", "host2")
        self.aggs.remove_host("a1", "host2")

    def test_default_zone(self):
        self.assertEqual("nova", agg_mod.host_zone(()))
        self.assertEqual("elsewhere", agg_mod.host_zone((), "elsewhere"))
        made = self.aggs.create("a1", "az1")
        self.assertEqual("az1", agg_mod.host_zone((made,)))


class SQLiteAggregateTests(AggregateStoreTests, base.TestCase):

    def make_store(self):
        return self.sqlite_store()


class PostgreSQLAggregateTests(AggregateStoreTests, base.TestCase):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store
