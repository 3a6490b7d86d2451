"""A full read of the nodes builds the records the validated path builds.

The read of every node (:func:`nova_lite.db.rows.load_nodes`) builds its
records without running the validators again and shares each kind of
report (:mod:`nova_lite.db.trusted`): these tests hold what it gives to
what the records' own constructors and ``NodeResources.from_dict`` give
for the same rows, on both backends.
"""

import json

import attrs
import sqlalchemy as sa

from nova_lite import cluster, node_metrics
from nova_lite.db import Store, models, node_changes, rows, trusted
from nova_lite.objects import ComputeNode, NodeResources
from nova_lite.resources import Inventory
from nova_lite.scheduler.host_state import HostState
from nova_lite.testing import databases
from tests import base
from tests.base import instance

NODES = ["n-a", "n-b", "n-c", "n-d"]


class NodeRecordTests:

    def setUp(self):
        super().setUp()
        trusted.cache_clear()
        self.store = Store(self.make_url())
        self.addCleanup(self.store.close)
        _, self.rt = self.make_tracker("fake.multinode", store=self.store, nodes=NODES)
        self.rt.instance_claim(instance(), "n-b")

    def rows(self):
        with self.store.db.engine.begin() as conn:
            nodes = {r.nodename: r for r in conn.execute(sa.select(models.compute_nodes))}
            inventories = conn.execute(sa.select(models.inventories)).all()
        return nodes, inventories

    def set_report(self, nodename, change):
        """Rewrite ``nodename``'s stored report with ``change(dict)``."""
        nodes, _ = self.rows()
        report = json.loads(nodes[nodename].resources)
        change(report)
        with self.store.db.engine.begin() as conn:
            conn.execute(models.compute_nodes.update().where(
                models.compute_nodes.c.nodename == nodename).values(
                resources=json.dumps(report, sort_keys=True)))

    def assert_as_validated(self, node):
        """``node`` equals the record its own constructor makes of its fields,
        field for field and type for type, and its report is the stored one."""
        again = ComputeNode(**{a.name: getattr(node, a.name) for a in attrs.fields(ComputeNode)})
        for field in attrs.fields(ComputeNode):
            mine, theirs = getattr(node, field.name), getattr(again, field.name)
            self.assertEqual(theirs, mine, f"{node.nodename}: ComputeNode.{field.name}")
            self.assertIs(type(theirs), type(mine), f"{node.nodename}: {field.name}'s type")
        nodes, inventories = self.rows()
        stored = NodeResources.from_dict(json.loads(nodes[node.nodename].resources))
        self.assertEqual(stored, node.resources)
        self.assertEqual(attrs.asdict(stored), attrs.asdict(node.resources))
        expected = {}
        for r in inventories:
            if r.node_uuid == node.uuid:
                expected[r.resource_class] = Inventory(
                    total=r.total, reserved=r.reserved, min_unit=r.min_unit,
                    max_unit=r.max_unit, step_size=r.step_size,
                    allocation_ratio=r.allocation_ratio, used=node.used(r.resource_class))
        self.assertEqual(expected, dict(node.inventories))

    def test_full_read_gives_the_validated_records(self):
        nodes = self.store.get_compute_nodes()
        self.assertEqual(NODES, [n.nodename for n in nodes])
        self.assertEqual(1, nodes[1].used("VCPU"))
        for node in nodes:
            self.assert_as_validated(node)
            self.assertEqual(node.nodename, node.resources.hypervisor_hostname)
            self.assertEqual(node.uuid, node.resources.uuid)
        # the same records one node at a time (the rows read otherwise)
        for node in nodes:
            self.assertEqual(node, self.store.get_compute_node(node.host, node.nodename))

    def test_read_by_uuid_gives_the_validated_records(self):
        # what the views read again after a change: the same records as a
        # full read, also for a node without inventories and a uuid not there
        with self.store.db.engine.begin() as conn:
            conn.execute(models.inventories.delete().where(
                models.inventories.c.node_uuid == sa.select(models.compute_nodes.c.uuid).where(
                    models.compute_nodes.c.nodename == "n-c").scalar_subquery()))
        full = {n.uuid: n for n in self.store.get_compute_nodes()}
        self.assertEqual({}, dict(full[next(u for u, n in full.items()
                                            if n.nodename == "n-c")].inventories))
        wanted = [*full, "00000000-0000-0000-0000-000000000000"]
        with self.store.db.engine.begin() as conn:
            read = node_changes.load_nodes_by_uuid(conn, wanted)
            self.assertEqual([], rows.load_nodes_of(conn, wanted[-1:]))
        self.assertEqual(full, {n.uuid: n for n in read})
        self.assertEqual(1, next(n for n in read if n.nodename == "n-b").used("VCPU"))
        for node in read:
            self.assert_as_validated(node)

    def test_read_by_uuid_counts_extras_as_the_full_read(self):
        # allocations the database cannot sum alone (another class, a child
        # provider's, PCI devices), one of them with no standard class at all
        # on a node that has no other allocation
        nodes, _ = self.rows()
        now = 1.0
        extra_rows = [
            dict(consumer_uuid="c-1", node_uuid=nodes["n-a"].uuid, instance_uuid="c-1",
                 other=json.dumps({"CUSTOM_GOLD": 3}),
                 providers=json.dumps({"n-a_gpu": {"VGPU": 2}})),
            dict(consumer_uuid="c-2", node_uuid=nodes["n-b"].uuid, instance_uuid="c-2",
                 vcpu=2, memory_mb=256, pci_devices=json.dumps(["0000:81:00.1"])),
            dict(consumer_uuid="c-3", node_uuid=nodes["n-b"].uuid, instance_uuid="c-3",
                 other=json.dumps({"CUSTOM_GOLD": 1})),
        ]
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.insert(), [
                dict(dict(consumer_type="instance", vcpu=0, pcpu=0, memory_mb=0, disk_gb=0,
                          flavor="{}", created_at=now, other=None, numa_topology=None,
                          pci_devices=None, providers=None), **r) for r in extra_rows])
        full = {n.uuid: n for n in self.store.get_compute_nodes()}
        with self.store.db.engine.begin() as conn:
            read = {n.uuid: n for n in node_changes.load_nodes_by_uuid(conn, sorted(full))}
        self.assertEqual(full, read)
        by_name = {n.nodename: n for n in read.values()}
        self.assertEqual({"CUSTOM_GOLD": 3}, dict(by_name["n-a"].usage))
        self.assertEqual({"n-a_gpu": {"VGPU": 2}},
                         {k: dict(v) for k, v in by_name["n-a"].provider_usage.items()})
        self.assertEqual(3, by_name["n-b"].used("VCPU"))
        self.assertEqual(1, by_name["n-b"].usage["CUSTOM_GOLD"])
        self.assertEqual({"0000:81:00.1"}, set(by_name["n-b"].pci_in_use))
        self.assertEqual({}, dict(by_name["n-c"].usage))

    def test_read_by_uuid_of_many_nodes_in_one_statement(self):
        # more uuids than SQLite's bound-variable limit once allowed (999):
        # the uuids are one parameter, whatever their number
        wanted = [n.uuid for n in self.store.get_compute_nodes()]
        missing = [f"00000000-0000-0000-0000-{i:012d}" for i in range(2000)]
        with self.store.db.engine.begin() as conn:
            read = rows.load_nodes_of(conn, missing + wanted)
        self.assertEqual(sorted(wanted), sorted(n.uuid for n in read))

    def test_nodes_of_a_kind_share_their_report_parts(self):
        first, second = self.store.get_compute_nodes()[:2]
        self.assertIsNot(first.resources, second.resources)
        self.assertIs(first.resources.cpu_info, second.resources.cpu_info)
        self.assertIs(first.resources.traits, second.resources.traits)

    def test_hostname_found_elsewhere_in_the_report(self):
        # the node's name is also a stats value: the report is parsed whole
        self.set_report("n-c", lambda r: r["stats"].update(rack="n-c", owner="n-c-team"))
        self.set_report("n-d", lambda r: r["stats"].update(rack="@"))
        by_name = {n.nodename: n for n in self.store.get_compute_nodes()}
        self.assertEqual({"rack": "n-c", "owner": "n-c-team"}, dict(by_name["n-c"].resources.stats))
        self.assertEqual({"rack": "@"}, dict(by_name["n-d"].resources.stats))
        for node in by_name.values():
            self.assert_as_validated(node)

    def test_report_without_hostname_or_uuid(self):
        self.set_report("n-a", lambda r: r.update(uuid=None, hypervisor_hostname="elsewhere"))
        node = {n.nodename: n for n in self.store.get_compute_nodes()}["n-a"]
        self.assertIsNone(node.resources.uuid)
        self.assertEqual("elsewhere", node.resources.hypervisor_hostname)
        self.assert_as_validated(node)

    def test_host_states_free_as_the_records_say(self):
        # n-b holds one vCPU; with every vCPU reserved it is over capacity
        with self.store.db.engine.begin() as conn:
            conn.execute(models.inventories.update().where(
                models.inventories.c.resource_class == "VCPU",
                models.inventories.c.node_uuid == sa.select(models.compute_nodes.c.uuid).where(
                    models.compute_nodes.c.nodename == "n-b").scalar_subquery()).values(
                reserved=models.inventories.c.total))
        nodes = self.store.get_compute_nodes()
        self.assertEqual(1, nodes[1].over("VCPU"))
        for node in nodes:
            state = HostState(node)
            self.assertEqual((node.free("MEMORY_MB"), node.free("DISK_GB"), node.free("VCPU"),
                              node.free("PCPU")),
                             (state.free_ram_mb, state.free_disk_gb, state.free_vcpus,
                              state.free_pcpus), node.nodename)

    def test_totals_of_nodes_of_a_kind_count_each_ones_usage(self):
        # n-b's instance holds only a class no node offers: n-b shares its
        # kind's inventories mapping with the others, yet its usage counts
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.update().values(
                vcpu=0, memory_mb=0, disk_gb=0, other=json.dumps({"CUSTOM_GONE": 2})))
        nodes = self.store.get_compute_nodes()
        self.assertIs(nodes[0].inventories, nodes[1].inventories)
        self.assertEqual({"CUSTOM_GONE": 2}, dict(nodes[1].usage))
        totals = cluster.cluster_totals(nodes).resource("CUSTOM_GONE")
        self.assertEqual((0, 2, 0, 2), (totals.capacity, totals.used, totals.free, totals.over))
        for rc in ("VCPU", "MEMORY_MB", "DISK_GB"):
            line = cluster.cluster_totals(nodes).resource(rc)
            self.assertEqual(sum(n.free(rc) for n in nodes), line.free, rc)
            self.assertEqual(sum(n.capacity(rc) for n in nodes), line.capacity, rc)
        summed = node_metrics.host_samples(nodes[0].host, nodes)
        over = dict(summed[1 + 5])   # nova_lite_host_resource_over{host, resource_class}
        self.assertEqual(2, over[(nodes[0].host, "CUSTOM_GONE")])

    def test_bad_report_still_fails_as_it_did(self):
        self.set_report("n-a", lambda r: r.update(vcpus=-1))
        self.assertRaisesRegex(Exception, "vcpus", self.store.get_compute_nodes)


class TestSQLiteNodeRecords(NodeRecordTests, base.TestCase):

    def make_url(self):
        return self.useFixture(databases.SQLiteFile()).url


class TestPostgreSQLNodeRecords(NodeRecordTests, base.TestCase):

    def make_url(self):
        databases.use_postgresql(self)
        return self.useFixture(databases.PostgreSQLSchema()).url
