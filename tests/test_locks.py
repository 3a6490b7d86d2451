"""Per-node fair locks."""

import threading
import time

import testtools

from nova_lite.compute.locks import FairLock, NodeLocks


class TestFairLock(testtools.TestCase):

    def test_reentrant(self):
        lock = FairLock()
        with lock:
            with lock:
                pass
        # fully released: another thread gets it
        got = []
        t = threading.Thread(target=lambda: (lock.acquire(), got.append(1), lock.release()))
        t.start()
        t.join(5)
        self.assertEqual([1], got)

    def test_release_by_another_thread_raises(self):
        lock = FairLock()
        lock.acquire()
        self.addCleanup(lock.release)
        errors = []

        def other():
            try:
                lock.release()
            except RuntimeError as exc:
                errors.append(exc)
        t = threading.Thread(target=other)
        t.start()
        t.join(5)
        self.assertEqual(1, len(errors))
        self.assertRaises(RuntimeError, FairLock().release)

    def test_granted_in_arrival_order(self):
        lock = FairLock()
        order = []
        lock.acquire()
        threads = []
        for i in range(6):
            t = threading.Thread(target=lambda i=i: (lock.acquire(), order.append(i),
                                                     lock.release()))
            t.start()
            threads.append(t)
            # wait until thread i holds its ticket
            deadline = time.monotonic() + 5
            while lock._next_ticket < i + 2 and time.monotonic() < deadline:
                time.sleep(0.001)
        lock.release()
        for t in threads:
            t.join(5)
        self.assertEqual(list(range(6)), order)

    def test_mutual_exclusion(self):
        lock = FairLock()
        state = {"n": 0, "inside": 0, "max": 0}

        def work():
            for _ in range(200):
                with lock:
                    state["inside"] += 1
                    state["max"] = max(state["max"], state["inside"])
                    n = state["n"]
                    time.sleep(0)
                    state["n"] = n + 1
                    state["inside"] -= 1
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(800, state["n"])
        self.assertEqual(1, state["max"])


class TestNodeLocks(testtools.TestCase):

    def test_one_lock_per_node(self):
        locks = NodeLocks()
        self.assertIs(locks["a"], locks["a"])
        self.assertIsNot(locks["a"], locks["b"])

    def test_other_nodes_are_not_held_up(self):
        locks = NodeLocks()
        locks["a"].acquire()
        self.addCleanup(locks["a"].release)
        done = threading.Event()

        def other():
            with locks["b"]:
                done.set()
        threading.Thread(target=other).start()
        self.assertTrue(done.wait(5))

    def test_holding_many_in_sorted_order_does_not_deadlock(self):
        locks = NodeLocks()
        count = {"n": 0}

        def work(names):
            for _ in range(100):
                with locks.holding(names):
                    count["n"] += 1
        threads = [threading.Thread(target=work, args=(names,))
                   for names in (["a", "b", "c"], ["c", "b", "a"], ["b", "a", "b"])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
            self.assertFalse(t.is_alive())
        self.assertEqual(300, count["n"])

    def test_holding_nothing(self):
        with NodeLocks().holding([]):
            pass
