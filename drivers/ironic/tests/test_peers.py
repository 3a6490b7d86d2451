"""The live compute services the hash ring is built over, read from the core's Store."""

import time

import testtools

from nova_lite.db import Store, models
from nova_lite.testing import databases

from nova_lite_ironic import peers


class TestStoreServiceView(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.store = Store(self.useFixture(databases.SQLiteFile()).url)
        self.addCleanup(self.store.close)

    def test_live_hosts_are_the_enabled_services_that_are_up(self):
        for host in ("up", "off", "dead"):
            self.store.heartbeat(host)
        self.store.heartbeat("other-binary", binary="other")
        self.store.set_service_disabled("off", True, "maintenance")
        # "dead" last beat an hour ago (a fixture write).
        self.store.db.write("age dead", lambda conn: conn.execute(
            models.services.update().where(models.services.c.host == "dead")
            .values(updated_at=time.time() - 3600)))
        now = time.time()

        def view(down_time, at=now):
            return peers.StoreServiceView(self.store, service_down_time=down_time,
                                          clock=lambda: at).live_hosts()

        self.assertEqual({"up"}, view(60))
        self.assertEqual({"up", "dead"}, view(7200))   # disabled is never live
        self.assertEqual(set(), view(60, at=now + 120))
        self.assertEqual({"other-binary"}, peers.StoreServiceView(
            self.store, binary="other", clock=lambda: now).live_hosts())
