"""The one rule of what holds resources, walked row by row through every reader.

The operator guide's tables (doc/source/operator/leaks.rst, "What holds
resources") are parsed and expanded to every (vm_state, task_state,
placed) and every migration status; the rule of :mod:`nova_lite.holds`
must give the same answers.  Then one record per row is written, each with
an allocation on one node, and every reader is asked which consumers hold
resources: the compute service's pass (SQL), the leak finder, explain, the
``audit`` views, heal, the API and the metrics (from the findings the
compute service recorded).  All must agree with the table, on SQLite and
PostgreSQL.
"""

import json
import os
import re
import time
import uuid

from werkzeug.test import Client

from nova_lite import audit, explain, holds, leaks, metrics
from nova_lite.api import make_app
from nova_lite.compute.manager import ComputeService
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import models, rows
from nova_lite.objects import Allocation, Flavor, Instance, Migration
from nova_lite.virt import loader
from tests import base

DOC = os.path.join(os.path.dirname(__file__), os.pardir, "doc", "source", "operator",
                   "leaks.rst")
FLAVOR = Flavor(name="tiny", vcpus=1, memory_mb=1, root_gb=0)
NODE = "holds-node"


def _list_table(name):
    """The body rows of the RST list-table ``:name: name`` as lists of cell texts."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    start = text.index(f":name: {name}")
    block = text[start:].split("\n\n", 2)[1]
    table, row = [], None
    for line in block.splitlines():
        if line.startswith("   * - "):
            row = [line[7:].strip()]
            table.append(row)
        elif line.startswith("     - "):
            row.append(line[7:].strip())
        elif line.startswith("       "):
            row[-1] += " " + line.strip()
    return table[1:]


def _words(cell):
    return [w.strip() for w in cell.split(",")]


def documented_instance_table():
    """``{(vm_state, task_state, placed): holds}`` expanded from the guide (first row wins)."""
    table = {}
    for vm_cell, task_cell, placed_cell, holds_cell in _list_table("hold-table-instances"):
        vms = sorted(holds.VM_STATES) if vm_cell == "any other" else _words(vm_cell)
        for vm in vms:
            for task in holds.TASK_STATES:
                task_name = "none" if task is None else task
                if task_cell not in ("any", "any other") and task_name not in _words(task_cell):
                    continue
                for placed in (True, False):
                    if placed_cell != "any" and placed != (placed_cell == "yes"):
                        continue
                    table.setdefault((vm, task, placed), holds_cell == "yes")
    return table


def documented_migration_table():
    """``{status: holds}`` from the guide."""
    return {status: cell == "yes" for statuses, cell in _list_table("hold-table-migrations")
            for status in _words(statuses)}


class TestTheTableIsTheRule(base.TestCase):

    def test_every_instance_row_of_the_guide_is_the_rule(self):
        documented = documented_instance_table()
        rule = {(vm, task, placed): h for vm, task, placed, h in holds.hold_table()}
        self.assertEqual(len(holds.VM_STATES) * len(holds.TASK_STATES) * 2, len(rule))
        self.assertEqual(rule, documented)

    def test_every_migration_status_of_the_guide_is_the_rule(self):
        documented = documented_migration_table()
        self.assertEqual(holds.MIGRATION_STATUSES, set(documented))
        self.assertEqual({s: holds.migration_holds(s) for s in documented}, documented)


class HoldTableWalk:
    """One record per row of the table, each with an allocation on one node."""

    def setUp(self):
        super().setUp()
        self.host = "holds-host"
        self.settings_ = self.settings(reserved_host_memory_mb=0, migration_stuck_age=10 ** 9)
        driver = loader.load_driver("fake.multinode", settings=self.settings_, nodes=[NODE],
                                    vcpus=100000, memory_mb=10 ** 7, local_gb=10)
        driver.init_host(self.host)
        self.store = self.make_store()
        self.rt = ResourceTracker(self.host, driver, store=self.store, settings=self.settings_)
        self.rt.update_available_resource()
        self.node = self.store.get_compute_node(self.host, NODE)
        self.expected = {}     # consumer uuid -> holds per the rule
        self.row_of = {}
        now = time.time()
        with self.store.db.engine.begin() as conn:
            for vm, task, placed, holding in holds.hold_table():
                inst = Instance(uuid=str(uuid.uuid4()), flavor=FLAVOR, vm_state=vm,
                                task_state=task, host=self.host if placed else None,
                                node=NODE if placed else None)
                rows.upsert_instance(conn, inst, now)
                self._allocate(conn, inst.uuid, "instance", inst.uuid, now)
                self.expected[inst.uuid] = placed and holding
                self.row_of[inst.uuid] = (vm, task, placed)
            for status in sorted(holds.MIGRATION_STATUSES):
                inst = Instance(uuid=str(uuid.uuid4()), flavor=FLAVOR, vm_state="deleted",
                                host=self.host, node=NODE)
                rows.upsert_instance(conn, inst, now)
                mig = Migration(uuid=str(uuid.uuid4()), instance_uuid=inst.uuid,
                                source_compute="elsewhere", source_node="gone",
                                dest_compute=self.host, dest_node=NODE, old_flavor=FLAVOR,
                                new_flavor=FLAVOR, status=status)
                conn.execute(models.migrations.insert().values(
                    **rows.migration_values(mig, now)))
                self._allocate(conn, mig.uuid, "migration", inst.uuid, now)
                self.expected[mig.uuid] = holds.migration_holds(status)
                self.row_of[mig.uuid] = ("migration", status)

    def _allocate(self, conn, consumer, kind, instance_uuid, now):
        alloc = Allocation(consumer_uuid=consumer, consumer_type=kind,
                           instance_uuid=instance_uuid, node_uuid=self.node.uuid,
                           resources={"VCPU": 1, "MEMORY_MB": 1}, flavor=FLAVOR)
        conn.execute(models.allocations.insert().values(**rows.allocation_values(alloc, now)))

    def assertAgrees(self, reader, stale):
        holders = {c for c, h in self.expected.items() if h}
        wrong = {self.row_of[c]: "freed" if c in stale else "kept"
                 for c in self.expected if (c in stale) == (c in holders)}
        self.assertEqual({}, wrong, f"{reader} disagrees with the hold table")

    def held(self):
        return {a.consumer_uuid for a in self.store.list_allocations()}

    def test_the_leak_finder_explain_and_the_audit_views_agree(self):
        report = leaks.find_leaks(self.store, self.settings_, host=self.host)
        self.assertAgrees("find_leaks", {f.subject for f in report.findings
                                         if f.kind == leaks.STALE_ALLOCATION})
        result = explain.explain_node(self.store, NODE, self.settings_)
        self.assertAgrees("explain", {c.subject for c in result.culprits
                                      if c.kind == explain.STALE_ALLOCATION})
        views = audit.audit_host(self.rt, nodename=NODE)
        self.assertAgrees("audit views", {d.uuid for n in views.nodes for d in n.differences
                                          if d.kind == audit.ALLOCATION_WITHOUT_RECORD})

    def test_the_api_and_the_recorded_findings_agree(self):
        client = Client(make_app(self.store, self.settings_))
        found = json.loads(client.get(f"/v1/findings?host={self.host}").get_data())
        self.assertAgrees("the API", {f["subject"] for f in found["findings"]
                                      if f["kind"] == leaks.STALE_ALLOCATION})
        service = ComputeService(self.host, self.rt.driver, store=self.store,
                                 settings=self.settings_)
        recorded = service.record_findings()
        self.assertAgrees("the recorded findings", {
            f.subject for f in recorded if f.kind == leaks.STALE_ALLOCATION})
        text = metrics.Exporter(self.store, self.settings_).render().decode()
        sample = re.search(r'nova_lite_leak_findings\{host="holds-host",'
                           r'kind="stale_allocation"\} (\S+)', text)
        self.assertIsNotNone(sample, "no leak findings sample in the metrics")
        self.assertEqual(sum(1 for h in self.expected.values() if not h),
                         float(sample.group(1)))

    def test_heal_frees_exactly_what_holds_nothing(self):
        actions = leaks.heal(self.store, leaks.find_leaks(self.store, self.settings_,
                                                          host=self.host))
        self.assertEqual({leaks.APPLIED}, {a.outcome for a in actions})
        self.assertAgrees("heal", set(self.expected) - self.held())

    def test_the_compute_services_pass_frees_exactly_what_holds_nothing(self):
        self.rt.update_available_resource()
        self.assertAgrees("the periodic pass", set(self.expected) - self.held())
        # ... and restores exactly what holds and lost its allocation.
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.delete())
        self.rt.update_available_resource()
        holders = {c for c, h in self.expected.items() if h}
        self.assertEqual(holders, self.held())

    def test_heal_re_checks_each_consumer_in_its_own_transaction(self):
        """A finding read before the consumer became live again is never applied."""
        report = leaks.find_leaks(self.store, self.settings_, host=self.host)
        stale = [f for f in report.findings if f.kind == leaks.STALE_ALLOCATION]
        revived = {}
        with self.store.db.engine.begin() as conn:
            for finding in stale:
                row = self.row_of[finding.subject]
                if row[0] == "shelved_offloaded" and not row[2]:
                    # Placed again by the records alone: no generation moves.
                    conn.execute(models.instances.update().where(
                        models.instances.c.uuid == finding.subject).values(
                        host=self.host, node=NODE))
                    revived[finding.subject] = row
        self.assertTrue(revived)
        actions = {a.subject: a for a in leaks.heal(self.store, report)}
        for subject in revived:
            self.assertEqual(leaks.SKIPPED, actions[subject].outcome, revived[subject])
            self.assertIn("its allocation is live", actions[subject].reason)
        self.assertLessEqual(set(revived), self.held())


class TestHoldTableSQLite(HoldTableWalk, base.OnSQLiteFile, base.TestCase):
    pass


class TestHoldTablePostgreSQL(HoldTableWalk, base.OnPostgreSQL, base.TestCase):
    pass



