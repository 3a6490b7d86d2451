"""``nova_lite.explain``: why a node's free is what it is, on SQLite files and PostgreSQL.

Real trackers claim on real stores; leaks are made the way they happen
(an instance deleted while its compute service is down: the record says
deleted, the claim is never freed) and explained from the records.
"""

import json
import os

import attrs

from nova_lite import conf, explain
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, models
from nova_lite.exception import InvalidInput, NodeNotFound
from nova_lite.objects import DELETED, Overhead
from nova_lite.virt import loader
from tests import base
from tests.test_cli import CliTestCase


def api_delete(store, inst):
    """Delete an instance the way an API does while its compute service is down:
    the record says deleted; no tracker frees its claim."""
    base.write_instance_row(store, attrs.evolve(store.get_instance(inst.uuid), vm_state=DELETED))


def drop_instance_row(store, inst):
    """The instance record is gone altogether (an unknown consumer)."""
    with store.db.engine.begin() as conn:
        conn.execute(models.instances.delete().where(models.instances.c.uuid == inst.uuid))


class ExplainTests:
    """Mixed into a TestCase that provides ``make_store()``."""

    def tracker(self, settings=None, driver_name="fake.multinode", **driver_kwargs):
        settings = settings or self.settings()
        driver = loader.load_driver(driver_name, settings=settings, **driver_kwargs)
        driver.init_host(self.host)
        rt = ResourceTracker(self.host, driver, store=self.make_store(), settings=settings)
        rt.update_available_resource()
        return driver, rt

    def claim(self, rt, node, flv=None):
        return rt.instance_claim(base.instance(flv or base.flavor()), node).instance

    def test_consistent_node_line_by_line(self):
        settings = self.settings()   # Nova's defaults: 512 MB reserved, cpu ratio 4
        _, rt = self.tracker(settings, nodes=["n1"], vcpus=2, memory_mb=4096, local_gb=50,
                             overhead=Overhead(memory_mb=64))
        a = self.claim(rt, "n1", base.flavor("m1.a", vcpus=1, memory_mb=1024, root_gb=10))
        b = self.claim(rt, "n1", base.flavor("m1.b", vcpus=2, memory_mb=512, root_gb=5))
        result = explain.explain_node(rt.store, "n1", settings)
        self.assertTrue(result.consistent)
        self.assertEqual("consistent", result.verdict)
        self.assertFalse(result.guests_compared)
        self.assertIn("records alone", result.note)
        mem = result.resource("MEMORY_MB")
        self.assertEqual((4096, 512, 1.0, 3584), (mem.total, mem.reserved, mem.ratio,
                                                   mem.capacity))
        self.assertEqual("floor((4096 - 512) x 1.0) = 3584", mem.capacity_formula)
        self.assertEqual(("reserved_host_memory_mb = 512 from the default",),
                         mem.reserved_sources)
        self.assertIn("initial_ram_allocation_ratio = 1.0 from the default", mem.ratio_source)
        lines = {c.consumer_uuid: c for c in mem.consumers}
        self.assertEqual({a.uuid, b.uuid}, set(lines))
        self.assertEqual(("m1.a", 1024, 64, 1088, explain.INSTANCE),
                         (lines[a.uuid].flavor, lines[a.uuid].flavor_amount,
                          lines[a.uuid].overhead, lines[a.uuid].amount, lines[a.uuid].role))
        self.assertEqual((1088 + 576, 3584 - 1088 - 576, 0), (mem.used, mem.free, mem.over))
        vcpu = result.resource("VCPU")
        self.assertEqual((2, 4.0, 8, 3, 5), (vcpu.total, vcpu.ratio, vcpu.capacity,
                                               vcpu.used, vcpu.free))
        self.assertIn("initial_cpu_allocation_ratio = 4.0", vcpu.ratio_source)

    def test_configured_options_are_named(self):
        settings = self.settings(reserved_host_memory_mb=1024, cpu_allocation_ratio=2.0,
                                 reserved_host_disk_mb=2049)
        _, rt = self.tracker(settings, nodes=["n1"], vcpus=4, memory_mb=8192, local_gb=100)
        result = explain.explain_node(rt.store, "n1", settings)
        self.assertEqual(("reserved_host_memory_mb = 1024 from configuration",),
                         result.resource("MEMORY_MB").reserved_sources)
        self.assertEqual("cpu_allocation_ratio = 2.0 from configuration",
                         result.resource("VCPU").ratio_source)
        disk = result.resource("DISK_GB")
        self.assertEqual((3, 97), (disk.reserved, disk.capacity))   # 2049 MB -> 3 GB
        self.assertIn("rounded up to whole GB", disk.reserved_sources[0])
        # Settings that differ from the recorded inventory say so.
        later = self.settings(reserved_host_memory_mb=2048, cpu_allocation_ratio=3.0,
                              reserved_host_disk_mb=2049)
        again = explain.explain_node(rt.store, "n1", later)
        self.assertIn("the next audit records it", again.resource("MEMORY_MB").notes[0])
        self.assertIn("recorded ratio 2.0", again.resource("VCPU").notes[0])

    def test_deleted_and_gone_consumers_are_stale_allocations(self):
        settings = self.settings(reserved_host_memory_mb=0)
        _, rt = self.tracker(settings, nodes=["n1"], vcpus=4, memory_mb=4096, local_gb=50)
        kept = self.claim(rt, "n1")
        deleted = self.claim(rt, "n1", base.flavor("m1.big", memory_mb=1024))
        gone = self.claim(rt, "n1", base.flavor("m1.mid", memory_mb=768))
        api_delete(rt.store, deleted)
        drop_instance_row(rt.store, gone)
        result = explain.explain_node(rt.store, "n1", settings)
        self.assertFalse(result.consistent)
        stale = {c.subject: c for c in result.culprits}
        self.assertEqual({deleted.uuid, gone.uuid}, set(stale))
        self.assertEqual({explain.STALE_ALLOCATION}, {c.kind for c in result.culprits})
        self.assertIn("the instance is deleted", stale[deleted.uuid].detail)
        self.assertIn("no instance record exists", stale[gone.uuid].detail)
        self.assertEqual(1024, stale[deleted.uuid].resources["MEMORY_MB"])
        mem = result.resource("MEMORY_MB")
        roles = {c.consumer_uuid: (c.role, c.stale, c.amount) for c in mem.consumers}
        self.assertEqual({kept.uuid: (explain.INSTANCE, False, 512),
                          deleted.uuid: (explain.STALE, True, 1024),
                          gone.uuid: (explain.STALE, True, 768)}, roles)
        self.assertEqual((2304, 4096 - 2304), (mem.used, mem.free))
        self.assertIn(f"stale allocation {deleted.uuid}", result.verdict)
        self.assertIn(f"stale allocation {gone.uuid}", result.verdict)

    def test_migrations_incoming_and_outgoing(self):
        settings = self.settings(reserved_host_memory_mb=0)
        _, rt = self.tracker(settings, nodes=["n1", "n2"], vcpus=4, memory_mb=4096,
                             local_gb=50)
        inst = self.claim(rt, "n1")
        move = rt.resize_claim(inst, base.flavor("m1.large", vcpus=2, memory_mb=2048), "n2")
        source = explain.explain_node(rt.store, "n1", settings)
        dest = explain.explain_node(rt.store, "n2", settings)
        self.assertTrue(source.consistent and dest.consistent)
        (out,) = source.resource("MEMORY_MB").consumers
        self.assertEqual((explain.OUTGOING, inst.uuid, 512), (out.role, out.consumer_uuid,
                                                              out.amount))
        self.assertIn(move.migration.uuid, out.detail)
        (incoming,) = dest.resource("MEMORY_MB").consumers
        self.assertEqual((explain.INCOMING, move.migration.uuid, "migration", "m1.large",
                          2048), (incoming.role, incoming.consumer_uuid,
                                  incoming.consumer_type, incoming.flavor, incoming.amount))

    def test_shrunken_host_and_over_commit_by_ratio(self):
        settings = self.settings(reserved_host_memory_mb=0)
        driver, rt = self.tracker(settings, nodes=["n1", "n2"], vcpus=8, memory_mb=4096,
                                  local_gb=20)
        for node in ("n1", "n2"):
            self.claim(rt, node, base.flavor(root_gb=5))
            self.claim(rt, node, base.flavor(root_gb=5))
        driver.set_node_size("n1", local_gb=7)
        rt.update_available_resource()
        shrunk = explain.explain_node(rt.store, "n1", settings)
        (culprit,) = shrunk.culprits
        self.assertEqual((explain.SHRUNKEN_HOST, "DISK_GB", {"DISK_GB": 3}),
                         (culprit.kind, culprit.subject, culprit.resources))
        disk = shrunk.resource("DISK_GB")
        self.assertEqual((7, 10, 0, 3), (disk.capacity, disk.used, disk.free, disk.over))
        # A disk ratio lowered below 1: the host has room, the ratio leaves none.
        lowered = self.settings(reserved_host_memory_mb=0, disk_allocation_ratio=0.4)
        rt2 = ResourceTracker(self.host, driver, store=rt.store, settings=lowered)
        rt2.update_available_resource()
        result = explain.explain_node(rt.store, "n2", lowered)
        (culprit,) = result.culprits
        self.assertEqual((explain.OVER_COMMIT, {"DISK_GB": 2}), (culprit.kind,
                                                                 culprit.resources))
        self.assertIn("disk_allocation_ratio = 0.4 from configuration", culprit.detail)
        self.assertIn("over-commit by ratio", result.verdict)

    def test_unknown_guests_only_with_a_guest_list(self):
        settings = self.settings()
        _, rt = self.tracker(settings, nodes=["n1"])
        inst = self.claim(rt, "n1")
        stray = "6d1b3c36-0000-4000-8000-00000000beef"
        result = explain.explain_node(rt.store, "n1", settings,
                                      guests=frozenset({inst.uuid, stray}))
        self.assertTrue(result.guests_compared)
        self.assertIsNone(result.note)
        self.assertEqual([(explain.UNKNOWN_GUEST, stray)],
                         [(c.kind, c.subject) for c in result.culprits])
        self.assertTrue(explain.explain_node(rt.store, "n1", settings).consistent)

    def test_bad_node_is_named(self):
        settings = self.settings()
        _, rt = self.tracker(settings, nodes=["n1"])
        err = self.assertRaises(NodeNotFound, explain.explain_node, rt.store, "ghost",
                                settings)
        self.assertIn("ghost", str(err))
        self.assertRaises(NodeNotFound, explain.explain_node, rt.store, "n1", settings,
                          host="otherhost")
        self.assertRaises(InvalidInput, explain.explain_node, rt.store, " ", settings)
        node = rt.get_node("n1")
        self.assertEqual("n1", explain.explain_node(rt.store, node.uuid, settings).nodename)


class TestExplainSQLite(base.OnSQLiteFile, ExplainTests, base.TestCase):
    pass


class TestExplainPostgreSQL(base.OnPostgreSQL, ExplainTests, base.TestCase):
    pass


class TestExplainCommand(CliTestCase):
    """``nova-lite node explain`` through the real entry point."""

    def setUp(self):
        super().setUp()
        self.compute_once("--driver", "fake.small")
        self.settings = conf.Settings(host=self.host, state_path=self.state)
        os.makedirs(self.state, exist_ok=True)

    def test_explains_a_leak_in_every_format(self):
        built = self.json("server", "create", "--flavor", "m1.tiny", "--count", "2")
        store = Store(self.settings.database_url)
        self.addCleanup(store.close)
        api_delete(store, store.get_instance(built[0]["ID"]))
        data = self.json("node", "explain", self.host)
        self.assertFalse(data["consistent"])
        self.assertEqual([("stale_allocation", built[0]["ID"])],
                         [(c["kind"], c["subject"]) for c in data["culprits"]])
        mem = {r["resource_class"]: r for r in data["resources"]}["MEMORY_MB"]
        self.assertEqual((8192, 512, 7680, 1024, 6656), (mem["total"], mem["reserved"],
                                                          mem["capacity"], mem["used"],
                                                          mem["free"]))
        text = self.ok("node", "explain", self.host)
        for words in ("reserved_host_memory_mb = 512 from the default",
                      "= capacity 7680: floor((8192 - 512) x 1.0) = 7680",
                      "used 1024, free 6656, over 0", "records alone",
                      f"Verdict: 1 culprit(s): stale allocation {built[0]['ID']}"):
            self.assertIn(words, text)
        verdict = self.ok("node", "explain", self.host, "-f", "value", "-c", "verdict")
        self.assertTrue(verdict.startswith("1 culprit(s)"), verdict)
        self.assertEqual(json.loads(self.ok("node", "explain", self.host, "-f", "json")),
                         data)

    def test_driver_compares_guests(self):
        data = self.json("node", "explain", self.host, "--driver", "fake.small")
        self.assertTrue(data["guests_compared"])
        self.assertIsNone(data["note"])
        self.assertTrue(data["consistent"])

    def test_unknown_node_is_an_error(self):
        code, out, err = self.cli("node", "explain", "ghost-node")
        self.assertEqual(1, code)
        self.assertIn("ghost-node", err)
        self.assertIn(f"Known nodes: {self.host}/{self.host}", err)
        code, _, err = self.cli("node", "explain", self.host, "--host", "elsewhere")
        self.assertEqual(1, code)
        self.assertIn("elsewhere", err)
