"""The history checker, and 4 chaos processes on one store proved by it.

The checker is tested on small hand-made histories, each with the one
fault it must name; then 4 processes act at random on shared nodes and
instances (claims, deletes, shelve and unshelve, resizes, confirms and
reverts, audits that grow, shrink or move a node to the other host) on a
SQLite file and on PostgreSQL, and every admission and every refusal they
logged is replayed against the node as it was at that generation.
"""

import json
import os
import subprocess
import sys

from nova_lite.db import Store
from tests.reliability import base, chaos, history

HOST_A, HOST_B = chaos.HOSTS
CAP = {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 40}
ONE = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


def _event(op, generation, seq, **fields):
    event = dict(op=op, generation=generation, pid=1, seq=seq, node="n0", node_uuid="u0",
                 host=HOST_A)
    event.update(fields)
    return event


def _audit(generation, seq, capacity=CAP, host=HOST_A):
    return _event("audit", generation, seq, capacity=dict(capacity), result="ok", host=host)


def _claim(generation, seq, consumer, amounts=ONE, result="admitted", host=HOST_A):
    return _event("claim", generation, seq, consumer=consumer, instance=consumer,
                  amounts=dict(amounts), result=result, host=host)


def _free(generation, seq, instance):
    return dict(op="free", instance=instance, result="ok", generations={"u0": generation},
                pid=1, seq=seq, migration=None)


NO_PROBLEMS = {"deleted_holding": [], "double_moves": []}


class TestChecker(base.TestCase):
    """Each hand-made history has one fault, and the checker names it."""

    def check(self, events, usage):
        return history.check(events, dict(NO_PROBLEMS, usage={"u0": usage}))

    def test_a_consistent_history_passes(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _claim(3, 3, "i2"), _free(4, 4, "i1"),
                  _claim(4, 5, "i3", amounts={"VCPU": 4}, result="refused"),
                  _audit(5, 6, capacity={"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}),
                  _claim(5, 7, "i4", result="refused")]
        self.assertEqual([], self.check(events, ONE))

    def test_admission_beyond_capacity_is_named(self):
        events = [_audit(1, 1), *[_claim(g, g, f"i{g}") for g in range(2, 7)]]
        problems = self.check(events, {"VCPU": 5, "MEMORY_MB": 5120, "DISK_GB": 50})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 6: claim", problems[0])
        self.assertIn("VCPU: used 4 + 1 > capacity 4", problems[0])

    def test_admission_against_a_stale_inventory_is_named(self):
        small = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
        events = [_audit(1, 1), _audit(2, 2, capacity=small), _claim(3, 3, "i1"),
                  _claim(4, 4, "i2")]
        problems = self.check(events, {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 4", problems[0])

    def test_admission_on_a_node_of_another_host_is_named(self):
        events = [_audit(1, 1), _audit(2, 2, host=HOST_B), _claim(3, 3, "i1")]
        problems = self.check(events, ONE)
        self.assertEqual(1, len(problems), problems)
        self.assertIn(f"owner is {HOST_B}, not {HOST_A}", problems[0])

    def test_refusal_of_what_fits_is_named(self):
        events = [_audit(1, 1), _claim(1, 2, "i1", result="refused")]
        problems = self.check(events, {})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("refused", problems[0])
        self.assertIn("but it fits", problems[0])

    def test_two_writes_at_one_generation_are_named(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _claim(2, 3, "i2")]
        problems = self.check(events, {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20})
        self.assertIn("two writes at one generation", "\n".join(problems))

    def test_a_write_nobody_logged_is_named(self):
        events = [_audit(1, 1), _claim(3, 2, "i1")]
        problems = self.check(events, ONE)
        self.assertIn("a write nobody logged", "\n".join(problems))

    def test_an_audit_that_changed_without_a_generation_is_named(self):
        small = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
        events = [_audit(1, 1), _claim(2, 2, "i1"), _audit(2, 3, capacity=small)]
        problems = self.check(events, ONE)
        self.assertIn("without moving its generation", "\n".join(problems))

    def test_records_that_differ_from_the_history_are_named(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _free(3, 3, "i1")]
        problems = self.check(events, ONE)   # the free did not free, say
        self.assertEqual(1, len(problems), problems)
        self.assertIn("the records hold", problems[0])

    def test_confirm_and_revert_move_what_is_held(self):
        migration = dict(op="resize", generation=3, pid=1, seq=3, node="n0", node_uuid="u0",
                         host=HOST_A, consumer="m1", instance="i1",
                         amounts={"VCPU": 2}, result="admitted")
        confirm = dict(op="confirm", instance="i1", migration="m1", result="ok",
                       generations={"u0": 4}, pid=1, seq=4)
        events = [_audit(1, 1), _claim(2, 2, "i1"), migration, confirm,
                  _claim(5, 5, "i2", amounts={"VCPU": 2}), _free(6, 6, "i1")]
        self.assertEqual([], self.check(events, {"VCPU": 2}))

    def test_deleted_holders_and_double_moves_are_named(self):
        problems = history.check([], {"usage": {}, "deleted_holding": ["i9"],
                                      "double_moves": ["i8"]})
        self.assertEqual(["deleted instance i9 still holds an allocation",
                          "instance i8 has more than one move in progress"], problems)


class ChaosMixin:
    """4 chaos processes on one store; the checker replays what they logged."""

    processes = 4
    ops = 120

    def _run(self, *args):
        return subprocess.Popen([sys.executable, "-m", "tests.reliability.chaos", *args],
                                cwd=base.REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def test_chaos_history_has_no_violation(self):
        url = self.database_url()
        logs = self.useFixture(base.fixtures.TempDir()).path
        setup_log = os.path.join(logs, "setup.log")
        setup = self._run("setup", url, setup_log)
        out, err = setup.communicate(timeout=120)
        self.assertEqual(0, setup.returncode, err)
        paths = [setup_log]
        workers = []
        for n in range(self.processes):
            paths.append(os.path.join(logs, f"worker-{n}.log"))
            workers.append(self._run("work", url, paths[-1], str(1000 + n), str(self.ops)))
        for worker in workers:
            out, err = worker.communicate(timeout=600)
            self.assertEqual(0, worker.returncode, err[-4000:])
        events = history.read_logs(paths)
        store = Store(url)
        self.addCleanup(store.close)
        problems = history.check(events, chaos.records(store))
        self.assertEqual([], problems, "\n".join(problems[:20]))
        self.assertNoRecordProblems(store)
        # The run did what it is for: each kind of operation committed, and
        # refusals were decided on fresh records.
        done = {(e["op"], e.get("result")) for e in events}
        for op in ("claim", "resize", "free", "audit"):
            self.assertIn((op, "admitted" if op in ("claim", "resize") else "ok"), done)
        self.assertIn(("claim", "refused"), done)
        self.addDetail("history", _text("\n".join(json.dumps(e) for e in events[-200:])))


def _text(value):
    from testtools.content import text_content
    return text_content(value)


class TestChaosSQLite(ChaosMixin, base.SQLiteBackend, base.TestCase):
    pass


class TestChaosPostgreSQL(ChaosMixin, base.PostgreSQLBackend, base.TestCase):
    pass
