"""Findings under churn: every finding is true at one moment.

A child process claims, deletes, resizes and confirms as fast as it can
(``tests.reliability.children claim-loop``): a workload that never leaks.
Meanwhile this process runs the leak finder, ``node explain`` and the API's
findings over and over.  Each reads one snapshot of the records, so none
may ever report a leak: an allocation read before its instance was deleted
and the instance read after is the false finding this guards against.
"""

import select
import subprocess
import sys
import tempfile
import time

from nova_lite import explain, leaks
from tests.reliability import base
from tests.reliability.test_faults import HOST, _reap, _Tracked

#: Searches per run, at least: enough to overlap hundreds of the child's changes.
ROUNDS = 60
#: The child's claims (distinct consumers) the searches must have seen...
CHANGES = 50
#: ...within this long (s), searching on after ROUNDS until they have.
CHANGES_WITHIN_S = 120


class _ChurnTests(_Tracked):

    def test_no_false_finding_under_claims_and_deletes(self):
        url = self.database_url()
        self.make(url, nodes=("a", "b"), vcpus=64, memory_mb=16384, local_gb=200)
        self.rt.update_available_resource()
        # Its log goes to a file: a full pipe would stop it mid-transaction.
        errors = tempfile.TemporaryFile("w+")
        self.addCleanup(errors.close)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.children", "claim-loop", url, HOST,
             "a", "b"], cwd=base.REPO_ROOT, stdout=subprocess.PIPE, stderr=errors, text=True)
        self.addCleanup(_reap, proc)
        readable, _, _ = select.select([proc.stdout], [], [], 60)
        self.assertTrue(readable, "the child never made its first change")
        self.assertEqual("ready", proc.stdout.readline().strip())
        false, searched, seen = [], 0, set()
        # At least ROUNDS searches, and on until the child's changes overlap
        # enough of them (a busy machine slows the child more than this loop).
        deadline = time.monotonic() + CHANGES_WITHIN_S
        while searched < ROUNDS or (len(seen) <= CHANGES and time.monotonic() < deadline):
            report = leaks.find_leaks(self.store, self.settings, host=HOST)
            false.extend(report.findings)
            result = explain.explain_node(self.store, "a", self.settings, host=HOST)
            false.extend(result.culprits)
            seen.update(a.consumer_uuid for a in self.store.list_allocations())
            searched += 1
        errors.seek(0)
        self.assertIsNone(proc.poll(), "the child died: " + errors.read()[-2000:])
        self.assertGreater(len(seen), CHANGES,
                           f"the child made too few changes in {CHANGES_WITHIN_S} s to test "
                           "anything")
        self.assertEqual([], false[:5], f"{len(false)} false findings in {searched} searches")


class TestChurnSQLite(base.SQLiteBackend, _ChurnTests, base.TestCase):
    pass


class TestChurnPostgreSQL(base.PostgreSQLBackend, _ChurnTests, base.TestCase):
    pass
