"""DriverCaller: one hung node cannot stall an audit."""

import threading
import time

import fixtures
import testtools

from nova_lite.compute import driver_calls
from nova_lite.compute.driver_calls import DriverCaller, DriverCallTimeout


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def idle_threads():
    return {w.thread for w in driver_calls._Worker._idle}


class TestDriverCaller(testtools.TestCase):

    def test_values_in_order(self):
        outcomes = DriverCaller(1).map(lambda x: x * 2, [1, 2, 3])
        self.assertEqual([1, 2, 3], [o.item for o in outcomes])
        self.assertEqual([2, 4, 6], [o.value for o in outcomes])
        self.assertEqual([None] * 3, [o.error for o in outcomes])

    def test_empty(self):
        self.assertEqual([], DriverCaller(1).map(lambda x: x, []))

    def test_errors_are_per_item(self):
        def fn(x):
            if x == "b":
                raise ValueError("bad b")
            return x.upper()
        outcomes = DriverCaller(1).map(fn, ["a", "b", "c"])
        self.assertEqual(["A", None, "C"], [o.value for o in outcomes])
        self.assertIsInstance(outcomes[1].error, ValueError)
        self.assertEqual("bad b", str(outcomes[1].error))

    def test_hung_call_times_out_and_the_rest_go_on(self):
        release = threading.Event()
        self.addCleanup(release.set)

        def fn(x):
            if x == "hang":
                release.wait(10)
            return x
        started = time.monotonic()
        outcomes = DriverCaller(0.2).map(fn, ["a", "hang", "b", "c"], what="get_it")
        elapsed = time.monotonic() - started
        self.assertLess(elapsed, 2)
        self.assertGreaterEqual(elapsed, 0.2)
        self.assertEqual(["a", None, "b", "c"], [o.value for o in outcomes])
        self.assertIsInstance(outcomes[1].error, DriverCallTimeout)
        self.assertIn("get_it('hang')", str(outcomes[1].error))
        self.assertIn("0.2 s", str(outcomes[1].error))

    def test_several_hangs(self):
        release = threading.Event()
        self.addCleanup(release.set)

        def fn(x):
            if x.startswith("hang"):
                release.wait(10)
            return x
        started = time.monotonic()
        outcomes = DriverCaller(0.1).map(fn, ["hang1", "a", "hang2", "hang3", "b"])
        self.assertLess(time.monotonic() - started, 3)
        self.assertEqual([None, "a", None, None, "b"], [o.value for o in outcomes])
        self.assertEqual(3, sum(isinstance(o.error, DriverCallTimeout) for o in outcomes))

    def test_a_timed_out_worker_calls_nothing_more(self):
        # Once its hung call returns, the abandoned worker leaves the rest to
        # the worker that took over: no node is called twice.
        release = threading.Event()
        self.addCleanup(release.set)
        calls, threads = [], {}

        def fn(x):
            calls.append(x)
            threads[x] = threading.current_thread()
            if x == "hang":
                release.wait(10)
            return x
        outcomes = DriverCaller(0.1).map(fn, ["hang", "b", "c"])
        self.assertEqual([None, "b", "c"], [o.value for o in outcomes])
        release.set()
        wait_until(lambda: threads["hang"] in idle_threads() or not threads["hang"].is_alive())
        self.assertEqual(["hang", "b", "c"], calls)

    def test_workers_are_kept_between_maps(self):
        # A periodic pass maps a few calls each time: after the first, it
        # starts no thread.  (Workers that earlier tests left hung may come
        # back to the shared idle stack meanwhile and serve a map: what is
        # counted is the workers started.)
        started = []
        start_worker = driver_calls._Worker.__init__

        def counted(worker):
            started.append(worker)
            start_worker(worker)

        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.compute.driver_calls._Worker.__init__", counted))
        seen = []

        def settled():
            # The worker of the last map is back on the idle stack, or gone
            # because the stack was full (and so holds one for the next map).
            last = seen[-1]
            return last in idle_threads() or not last.is_alive()

        for i in range(10):
            DriverCaller(1).map(lambda x: seen.append(threading.current_thread()), [i])
            wait_until(settled)
            if i == 0:
                first = len(started)
        self.assertEqual(10, len(seen))
        self.assertEqual(first, len(started))

    def test_a_forked_child_starts_its_own_workers(self):
        # The parent's idle workers are threads the child does not have.
        import multiprocessing
        DriverCaller(1).map(lambda x: x, [1])
        wait_until(lambda: idle_threads())
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()

        def in_child():
            outcomes = DriverCaller(5).map(lambda x: x + 1, [1, 2])
            child.send([(o.value, type(o.error).__name__) for o in outcomes])

        proc = ctx.Process(target=in_child)
        proc.start()
        self.assertTrue(parent.poll(30), "the child's map never answered")
        self.assertEqual([(2, "NoneType"), (3, "NoneType")], parent.recv())
        proc.join(30)
        self.assertEqual(0, proc.exitcode)

    def test_slow_calls_within_the_timeout_each(self):
        # the timeout is per call, not for the whole map
        outcomes = DriverCaller(0.3).map(lambda x: time.sleep(0.1) or x, range(5))
        self.assertEqual(list(range(5)), [o.value for o in outcomes])

    def test_call(self):
        caller = DriverCaller(0.2)
        self.assertEqual(5, caller.call(lambda a, b: a + b, 2, 3))
        self.assertRaises(KeyError, caller.call, {}.__getitem__, "x")
        release = threading.Event()
        self.addCleanup(release.set)
        exc = self.assertRaises(DriverCallTimeout, caller.call, release.wait, 10,
                                what="get_available_nodes")
        self.assertIn("get_available_nodes", str(exc))
