"""A view's full read pauses the cyclic collector and, for a large fleet,
freezes the heap; any other read leaves the collector alone.

``gc.freeze`` is replaced by a recorder here: the test process itself is
never frozen.
"""

import gc

import fixtures
import testtools

from nova_lite import cluster, heap
from nova_lite.scheduler import HostManager
from tests import base


class FullReadTests(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.frozen = []
        self.useFixture(fixtures.MonkeyPatch("gc.freeze", lambda: self.frozen.append(True)))
        self.assertTrue(gc.isenabled())

    def test_paused_within_and_frozen_when_large(self):
        with heap.full_read(True, lambda: heap.FREEZE_RECORDS):
            self.assertFalse(gc.isenabled())
        self.assertTrue(gc.isenabled())
        self.assertEqual([True], self.frozen)

    def test_small_read_not_frozen(self):
        with heap.full_read(True, lambda: heap.FREEZE_RECORDS - 1):
            self.assertFalse(gc.isenabled())
        self.assertTrue(gc.isenabled())
        self.assertEqual([], self.frozen)

    def test_not_a_full_read(self):
        with heap.full_read(False, lambda: heap.FREEZE_RECORDS):
            self.assertTrue(gc.isenabled())
        self.assertEqual([], self.frozen)

    def test_failed_read_enables_again_and_does_not_freeze(self):
        def fail():
            with heap.full_read(True, lambda: heap.FREEZE_RECORDS):
                raise RuntimeError("read failed")
        self.assertRaises(RuntimeError, fail)
        self.assertTrue(gc.isenabled())
        self.assertEqual([], self.frozen)

    def test_collector_already_off_is_left_off(self):
        gc.disable()
        self.addCleanup(gc.enable)
        with heap.full_read(True, lambda: heap.FREEZE_RECORDS):
            pass
        self.assertFalse(gc.isenabled())
        self.assertEqual([], self.frozen)


class ViewsTests(base.TestCase):
    """The scheduler's view and the node cache freeze after their first
    (full) read of a fleet at the threshold, and not after a later one."""

    def test_views_freeze_after_a_full_read_only(self):
        frozen = []
        self.useFixture(fixtures.MonkeyPatch("gc.freeze", lambda: frozen.append(True)))
        self.useFixture(fixtures.MonkeyPatch("nova_lite.heap.FREEZE_RECORDS", 3))
        store = self.sqlite_store()
        _, rt = self.make_tracker("fake.multinode", store=store, nodes=["n1", "n2", "n3"])
        store.heartbeat(self.host)
        for view in (HostManager(store, self.settings()).refresh,
                     cluster.NodeCache(store).totals):
            del frozen[:]
            view()
            self.assertEqual([True], frozen)
            self.assertTrue(gc.isenabled())
            rt.update_available_resource()
            view()
            self.assertEqual([True], frozen)
