"""Heal beside the chaos: no live consumer may lose its allocation to heal.

4 processes churn on one store (claims, deletes, shelve-offloads,
unshelves left placed with any task state, spawns, resizes, confirms,
reverts, and leaks: instances marked deleted without being freed), each
keeping two consumers live all along (an unshelve placed but not spawned, a
move in progress); 2 processes run ``find_leaks`` + ``heal`` in a loop
beside them (:mod:`tests.reliability.healer`, ``migration_stuck_age`` 10
ms), then pass again once the churn stopped.  The history checker replays
every step heal applied as a write of its own and names each live consumer
it freed (with its state and the step), and each live consumer the records
leave without its allocation; the leaks must all be healed, those holding a
vGPU on a node's GPU or a PCI device on its provider (child providers) too,
and each child's usage and generation must add up to the history's.  On
SQLite and on PostgreSQL.
"""

import collections
import json
import os
import subprocess
import sys

from nova_lite.db import Store
from tests.reliability import base, chaos, history


def _run(module, *args):
    return subprocess.Popen([sys.executable, "-m", f"tests.reliability.{module}", *args],
                            cwd=base.REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


class HealChaosMixin:
    """4 churning processes and 2 healing ones on one store: heal frees no live consumer."""

    processes = 4
    healers = 2
    ops = 80

    def _wait(self, process, timeout=300):
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        self.assertEqual(0, process.returncode, err[-4000:])
        return out

    def test_heal_beside_the_churn_frees_no_live_consumer(self):
        url = self.database_url()
        logs = self.useFixture(base.fixtures.TempDir()).path
        paths = [os.path.join(logs, "setup.log")]
        self._wait(_run("chaos", "setup-split", url, paths[0]))
        stop = os.path.join(logs, "stop")
        workers, healers = [], []
        for n in range(self.processes):
            paths.append(os.path.join(logs, f"churn-{n}.log"))
            workers.append(_run("chaos", "churn", url, paths[-1], str(2000 + n),
                                str(self.ops)))
        for n in range(self.healers):
            paths.append(os.path.join(logs, f"heal-{n}.log"))
            healers.append(_run("healer", url, paths[-1], stop))
        try:
            for worker in workers:
                self._wait(worker)
        finally:
            open(stop, "w").close()   # the healers make one last pass, then stop
            passes = [json.loads(self._wait(healer)) for healer in healers]
        events = history.read_logs(paths)
        self.addDetail("heal steps applied", _text("\n".join(
            json.dumps(e) for e in events if e["op"] == "heal" and e.get("result") == "ok")))
        store = Store(url)
        self.addCleanup(store.close)
        problems = history.check(events, chaos.records(store))
        self.assertEqual([], problems, f"{len(problems)} violations; the first 20:\n"
                         + "\n".join(problems[:20]))
        self.assertNoRecordProblems(store)
        # The run did what it is for: every kind of operation committed, heal
        # passed many times beside it and removed the leaked allocations.
        done = collections.Counter((e["op"], e.get("result")) for e in events)
        for op, result in (("claim", "admitted"), ("unshelve", "admitted"),
                           ("resize", "admitted"), ("free", "ok"), ("leak", "ok"),
                           ("heal", "ok")):
            self.assertTrue(done[(op, result)], f"no {op} {result} in {dict(done)}")
        self.assertTrue(done[("confirm", "ok")] + done[("revert", "ok")], dict(done))
        self.assertGreaterEqual(sum(p["beside"] for p in passes), self.healers, passes)
        # A leak that held a vGPU on a GPU was found and healed, and one that
        # held a PCI device on its provider.
        leaked = {e["instance"] for e in events if e["op"] == "leak" and e["result"] == "ok"}
        healed = {consumer for e in events if e["op"] == "heal" and e.get("result") == "ok"
                  for consumer, _ in e.get("removed") or ()}
        for kind, names in (("a GPU", {f"{n}_{g}" for n in chaos.NODES for g in chaos.GPUS}),
                            ("a PCI device", {f"{n}_{p}" for n in chaos.NODES
                                              for p, _ in chaos.PCI_HOLDERS.values()})):
            on = {e["instance"] for e in events if e.get("result") == "admitted"
                  and e["op"] == "claim" and names & set(e.get("providers") or ())}
            self.assertTrue(on & leaked & healed,
                            f"no leak on {kind} healed: {len(on & leaked)} leaks on "
                            f"{kind}, {len(leaked)} leaks, {len(healed)} consumers healed")


def _text(value):
    from testtools.content import text_content
    return text_content(value)


class TestHealChaosSQLite(HealChaosMixin, base.SQLiteBackend, base.TestCase):
    pass


class TestHealChaosPostgreSQL(HealChaosMixin, base.PostgreSQLBackend, base.TestCase):
    pass
