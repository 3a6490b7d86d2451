"""nova_lite.testing.DriverConformanceTests for the ironic driver."""

import os

import testtools

from nova_lite import conf
from nova_lite.testing import DriverConformanceTests

from nova_lite_ironic.sources.inventory import dump_inventory

from tests import base, real


class TestConformanceInventory(DriverConformanceTests, testtools.TestCase):
    """The ``ironic`` entry point over an inventory file of four nodes."""

    driver_name = "ironic"

    def make_settings(self):
        settings = super().make_settings()
        path = os.path.join(settings.state_path, "fleet.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(dump_inventory([base.bm_node() for _ in range(4)]))
        return conf.Settings(host=settings.host, state_path=settings.state_path,
                             sections={"ironic": {"source": "inventory",
                                                  "inventory_file": path}})


class TestConformanceRealIronic(DriverConformanceTests, testtools.TestCase):
    """The ``ironic`` entry point over a real Ironic (a fresh shard per test)."""

    driver_name = "ironic"

    def make_settings(self):
        server = real.server(self)
        fleet = real.fleet(self)
        fleet.enroll(3)
        settings = super().make_settings()
        return conf.Settings(host=settings.host, state_path=settings.state_path,
                             sections={"ironic": {"endpoint_override": server.endpoint,
                                                  "shard": fleet.shard}})
