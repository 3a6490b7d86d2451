"""The multi-process soak, small enough for CI (bench/soak.py is the big one).

Three worker processes claim, abort, resize, confirm, revert, delete and
shelve-offload against one host's nodes while a ComputeService process
audits in a loop; then the records must match the workers' operations
logs exactly (no lost, double or orphaned allocation), no node may be over
capacity, and no audit may have had anything to repair.  SQLite file and
PostgreSQL.
"""

import json
import os
import subprocess
import sys
import uuid

import attrs
import sqlalchemy as sa

from bench import soak
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.objects import Instance
from tests.reliability import base

SMALL = dict(processes=3, ops=80, seconds=20, nodes=1, audit_interval=0.05)


class _SoakTests:

    def test_records_match_the_operations_log(self):
        url = self.database_url()
        summary = soak.run_soak(url, **SMALL)
        self.addDetail("summary", _text(json.dumps(summary, indent=2)))
        self.assertEqual([], summary["problems"])
        # Bounded by count (usually) or time (a slow machine).
        self.assertGreater(summary["ops_done"], 0)
        self.assertLessEqual(summary["ops_done"], SMALL["processes"] * SMALL["ops"])
        self.assertGreater(summary["by_op"]["claim"].get("ok", 0), 0)
        self.assertGreater(summary["audit_passes"], 1)
        # Rejections carry their reasons, in Nova's words.
        entries = soak._read_logs(summary["logs"])
        for e in entries:
            if e["result"] == "rejected":
                self.assertTrue(e["error"].startswith("Insufficient compute resources: "))
        # A second, independent consistency check of the same records.
        store = Store(url)
        self.addCleanup(store.close)
        self.assertNoRecordProblems(store, summary["host"])

    def test_the_checker_sees_lost_and_orphaned_allocations(self):
        url = self.database_url()
        summary = soak.run_soak(url, **dict(SMALL, processes=2, ops=30,
                                            mix="claim=4,abort=1,resize=1,confirm=1,revert=1"))
        self.assertEqual([], summary["problems"])
        store = Store(url)
        self.addCleanup(store.close)
        entries = soak._read_logs(summary["logs"])
        settings = soak.make_settings(summary["host"])
        held = sorted(a.consumer_uuid for a in store.list_allocations()
                      if a.consumer_type == "instance")
        self.assertTrue(held)
        # Lose one allocation behind the store's back.
        store.db.write("lose an allocation", lambda conn: conn.execute(
            sa.text("DELETE FROM allocations WHERE consumer_uuid = :u"), {"u": held[0]}))
        problems = soak.verify(store, summary["host"], 1, entries, settings)
        self.assertTrue(any(p.startswith("lost allocation") for p in problems), problems)
        self.assertIn("a final audit changed the allocations", problems)
        # The audit rebuilt it from the instance row: the books balance again.
        self.assertEqual([], soak.verify(store, summary["host"], 1, entries, settings))
        # A claim the log does not know of is an orphan.
        host = summary["host"]
        rt = ResourceTracker(host, soak.make_driver(host, 1, settings), store=store,
                             settings=settings)
        # Make room behind the log's back (that one is now "lost"), then
        # claim an instance the log never heard of there.
        freed = store.get_instance(held[0])
        rt.update_usage(attrs.evolve(freed, vm_state="deleted"))
        stray = Instance(uuid=str(uuid.uuid4()), flavor=soak.FLAVORS["tiny"])
        rt.instance_claim(stray, soak.node_names(host, 1)[0])
        problems = soak.verify(store, host, 1, entries, settings)
        self.assertTrue(any(p.startswith("orphaned allocation") and stray.uuid in p
                            for p in problems), problems)


class TestSoakSQLite(base.SQLiteBackend, _SoakTests, base.TestCase):

    def test_script_runs_as_documented(self):
        out = subprocess.run(
            [sys.executable, os.path.join(base.REPO_ROOT, "bench", "soak.py"),
             "--processes", "2", "--ops", "20", "--seconds", "20",
             "--database-url", self.database_url(), "--mix", "claim=3,delete=1,resize=1"],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(0, out.returncode, out.stdout + out.stderr)
        summary = json.loads(out.stdout)
        self.assertEqual([], summary["problems"])
        self.assertIn("claim", summary["by_op"])
        self.assertLessEqual(set(summary["by_op"]), {"claim", "delete", "resize"})

    def test_script_rejects_a_bad_mix(self):
        out = subprocess.run(
            [sys.executable, os.path.join(base.REPO_ROOT, "bench", "soak.py"),
             "--mix", "claim=1,explode=2"], capture_output=True, text=True, timeout=60)
        self.assertEqual(2, out.returncode)
        self.assertIn("unknown operation 'explode'", out.stderr)


class TestSoakPostgreSQL(base.PostgreSQLBackend, _SoakTests, base.TestCase):
    pass


def _text(value):
    from testtools.content import text_content
    return text_content(value)
