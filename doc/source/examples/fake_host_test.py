"""A test on a fake hypervisor: an audit, then a node disappears."""

import testtools

from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.testing import FakeDriverFixture


class TestWithAFakeHost(testtools.TestCase):
    def test_two_nodes(self):
        fake = self.useFixture(FakeDriverFixture("fake.multinode", host="h1"))
        store = Store("sqlite://")
        rt = ResourceTracker("h1", fake.driver, store=store, settings=fake.settings)
        rt.update_available_resource()
        self.assertEqual(["h1-node0", "h1-node1"], rt.nodenames())
        fake.driver.set_nodes(["h1-node0"])          # a node disappears
        fake.driver.inject_fault("h1-node0", exception=RuntimeError("boom"))
        self.assertEqual(["h1-node0"], fake.driver.get_available_nodes())
