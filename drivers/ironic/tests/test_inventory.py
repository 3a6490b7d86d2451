"""The ``inventory`` source: a validated YAML/JSON file, re-read when it changes."""

import json
import os
import time
import uuid

from nova_lite import conf
from nova_lite.virt import loader

from nova_lite_ironic import node as nodes
from nova_lite_ironic.exception import DriverNotReady, InventoryError
from nova_lite_ironic.sources.inventory import InventorySource, dump_inventory, load_inventory

from tests import base

U1, U2, U3 = (str(uuid.UUID(int=i)) for i in (1, 2, 3))

GOOD = f"""
nodes:
  - uuid: {U1}
    name: rack1-n01
    resource_class: iron-nfv
    cpu_arch: i386
    capabilities: "boot_mode:uefi,raid:1"
  - uuid: {U2}
    resource_class: baremetal
    maintenance: true
    properties: {{memory_mb: 262144}}
  - uuid: {U3}
    resource_class: baremetal
    capabilities: {{boot_mode: bios}}
    provision_state: active
    instance_uuid: 0b0e4e6c-7a8f-4d0a-9e8e-2b3c4d5e6f70
"""


class InventoryTestCase(base.TestCase):

    def write(self, text, name="fleet.yaml"):
        path = os.path.join(self.state_path, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path


class TestLoad(InventoryTestCase):

    def test_good_file(self):
        fleet = {n.uuid: n for n in load_inventory(self.write(GOOD))}
        self.assertEqual({U1, U2, U3}, set(fleet))
        self.assertEqual("iron-nfv", fleet[U1].resource_class)
        self.assertEqual("i386", fleet[U1].properties["cpu_arch"])
        self.assertEqual("boot_mode:uefi,raid:1", fleet[U1].properties["capabilities"])
        self.assertEqual((nodes.POWER_OFF, nodes.AVAILABLE, False),
                         (fleet[U1].power_state, fleet[U1].provision_state,
                          fleet[U1].maintenance))
        self.assertTrue(fleet[U2].maintenance)
        self.assertEqual(262144, fleet[U2].properties["memory_mb"])
        self.assertEqual("boot_mode:bios", fleet[U3].properties["capabilities"])

    def test_json_file(self):
        data = {"nodes": [{"uuid": U1, "resource_class": "gold"}]}
        fleet = load_inventory(self.write(json.dumps(data), "fleet.json"))
        self.assertEqual([U1], [n.uuid for n in fleet])

    def test_round_trip(self):
        fleet = load_inventory(self.write(GOOD))
        again = load_inventory(self.write(dump_inventory(fleet), "again.yaml"))
        self.assertEqual(fleet, again)

    def test_empty_fleet(self):
        self.assertEqual([], load_inventory(self.write("nodes: []\n")))
        self.assertEqual([], load_inventory(self.write("nodes:\n")))

    def assertBad(self, text, *fragments, name="fleet.yaml"):
        path = self.write(text, name)
        err = self.assertRaises(InventoryError, load_inventory, path)
        self.assertIn(path, str(err))
        for fragment in fragments:
            self.assertIn(fragment, str(err))
        return err

    def test_bad_entries_are_named(self):
        self.assertBad(f"nodes:\n  - uuid: {U1}\n  - uuid: not-a-uuid\n",
                       "nodes[1] (not-a-uuid)", "'uuid' must be a UUID")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n  - name: n2\n",
                       "nodes[1] (n2)", "'uuid' is required")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n    maintenance: maybe\n",
                       f"nodes[0] ({U1})", "'maintenance' must be true or false")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n    power_state: sideways\n",
                       "'power_state' must be one of")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n    colour: red\n",
                       "unknown key(s) 'colour'")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n    capabilities: [a, b]\n",
                       "'capabilities' must be")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n    properties: 3\n",
                       "'properties' must be a mapping")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n    instance_uuid: nope\n",
                       "'instance_uuid' must be a UUID")
        self.assertBad(f"nodes:\n  - uuid: {U1}\n    resource_class: 7\n",
                       "'resource_class' must be a string")
        self.assertBad("nodes:\n  - 42\n", "nodes[0]", "must be a mapping")

    def test_duplicates_are_named(self):
        self.assertBad(f"nodes:\n  - uuid: {U1}\n  - uuid: {U2}\n  - uuid: {U1}\n",
                       f"nodes[2] (uuid {U1}) repeats the uuid of nodes[0]")

    def test_bad_documents(self):
        self.assertBad("nodes: [\n", "is not valid YAML")
        self.assertBad("{", "is not valid JSON", name="fleet.json")
        self.assertBad("- a\n", "expected a mapping with one key 'nodes'")
        self.assertBad("nodes: {}\n", "'nodes' must be a list")
        err = self.assertRaises(InventoryError, load_inventory,
                                os.path.join(self.state_path, "missing.yaml"))
        self.assertIn("cannot be read", str(err))


class TestInventoryDriver(InventoryTestCase):

    def driver(self, path, host="h1"):
        settings = conf.Settings(host=host, state_path=self.state_path, sections={
            "ironic": {"source": "inventory", "inventory_file": path}})
        driver = loader.load_driver("ironic", settings=settings)
        driver.init_host(host)
        return driver

    def test_loaded_through_the_entry_point(self):
        driver = self.driver(self.write(GOOD))
        self.assertIsInstance(driver.source, InventorySource)
        self.assertEqual(sorted([U1, U2]), driver.get_available_nodes())  # U3: foreign
        res = driver.get_available_resource(U1)
        self.assertEqual("CUSTOM_IRON_NFV", res.resource_class)
        self.assertEqual("i686", res.supported_instances[0].arch)
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, dict(driver.get_available_resource(U2)
                                                       .reserved))

    def test_bad_file_at_start_names_the_entry(self):
        path = self.write(f"nodes:\n  - uuid: {U1}\n    maintenance: 3\n")
        err = self.assertRaises(InventoryError, self.driver, path)
        self.assertIn("nodes[0]", str(err))

    def test_edits_are_picked_up(self):
        path = self.write(GOOD)
        driver = self.driver(path)
        self.assertEqual(2, len(driver.get_available_nodes()))
        time.sleep(0.01)
        self.write(f"nodes:\n  - uuid: {U1}\n    resource_class: iron-nfv\n")
        self.assertEqual([U1], driver.get_available_nodes())
        self.assertTrue(driver.is_node_deleted(U2))
        self.assertFalse(driver.is_node_deleted(U1))

    def test_file_turning_bad_means_not_ready(self):
        path = self.write(GOOD)
        driver = self.driver(path)
        driver.get_available_nodes()
        self.write(f"nodes:\n  - uuid: {U1}\n    maintenance: 3\n")
        err = self.assertRaises(DriverNotReady, driver.get_available_nodes)
        self.assertIn("nodes[0]", str(err))
        self.write(GOOD)
        self.assertEqual(2, len(driver.get_available_nodes()))

    def test_deployments_survive_a_reload(self):
        path = self.write(GOOD)
        driver = self.driver(path)
        driver.get_available_nodes()
        inst = base.instance(node=U1, host="h1")
        driver.spawn(inst)
        self.write(GOOD + "  # touched\n")
        self.assertIn(U1, driver.get_available_nodes())
        self.assertEqual([inst.uuid], driver.list_instances())
        driver.destroy(inst)
        self.assertEqual([], driver.list_instances())

    def test_source_required_options(self):
        settings = conf.Settings(host="h1", state_path=self.state_path,
                                 sections={"ironic": {"source": "inventory"}})
        err = self.assertRaises(loader.DriverLoadError, loader.load_driver, "ironic",
                                settings=settings)
        self.assertIn("[ironic] inventory_file", str(err))
