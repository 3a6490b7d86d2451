"""PCI aliases: [pci] alias, flavors' pci_passthrough:alias, builds and the views."""

import json
import os

import testtools

from nova_lite import conf, objects, pci_alias, reports
from nova_lite.compute import api
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import InvalidConfig, InvalidInput
from nova_lite.objects import PciDevice
from nova_lite.pci import PciStats
from nova_lite.scheduler import NoValidHost
from nova_lite.virt.fake import FakeDriver
from tests import base
from tests.test_cli import CliTestCase
from tests import test_scheduler
from tests.test_scheduler import SchedulerScenario

GPU = '{"name": "gpu", "vendor_id": "10DE", "product_id": "1db4"}'
VF = '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}'
ALIASES = f"[{GPU}, {VF}]"
#: A GPU, and a PF with one VF of the same ids (so only the type tells them apart).
DEVICES = (PciDevice(address="0000:81:00.0", vendor_id="10de", product_id="1db4", numa_node=0),
           PciDevice(address="0000:05:00.0", vendor_id="8086", product_id="1520",
                     dev_type="type-PF"),
           PciDevice(address="0000:05:10.0", vendor_id="8086", product_id="1520",
                     dev_type="type-VF", parent_addr="0000:05:00.0"))


def alias_flavor(spec, name="gpu.small"):
    return base.flavor(name=name, memory_mb=512, extra_specs={pci_alias.EXTRA_SPEC: spec})


class TestParse(testtools.TestCase):

    def test_one_object_or_a_list(self):
        one = pci_alias.parse_aliases(GPU)
        self.assertEqual({"gpu": pci_alias.PciAlias(name="gpu", vendor_id="10de",
                                                    product_id="1db4")}, dict(one))
        both = pci_alias.parse_aliases(ALIASES)
        self.assertEqual(("type-VF", "legacy"), (both["vf"].device_type, both["vf"].numa_policy))
        self.assertEqual({}, pci_alias.parse_aliases(" "))

    def test_bad_aliases_say_what_is_wrong(self):
        cases = {
            "{": "not JSON",
            '"gpu"': "an alias must be a JSON object",
            '{"name": "gpu", "vendor_id": "10de"}': "'product_id' is required",
            '{"name": "gpu", "vendor_id": "10de", "product_id": "1db4", "colour": "red"}':
                "unknown key(s) colour",
            '{"name": "gpu", "vendor_id": "10de", "product_id": "xyz1"}':
                "(alias 'gpu'): 'product_id' must be 4 hex digits, got 'xyz1'",
            '{"name": "gpu", "vendor_id": "10de", "product_id": "1db4", "device_type": "vdpa"}':
                "'device_type' must be one of type-PCI, type-PF, type-VF",
            '{"name": "gpu", "vendor_id": "10de", "product_id": "1db4", "numa_policy": "x"}':
                "'numa_policy' must be one of legacy, preferred, required",
            f"[{GPU}, {GPU}]": "alias 'gpu' is given twice",
            '{"name": 3, "vendor_id": "10de", "product_id": "1db4"}': "'name' must be a string",
        }
        for text, expected in cases.items():
            exc = self.assertRaises(InvalidInput, pci_alias.parse_aliases, text)
            self.assertIn(expected, str(exc), text)
            self.assertTrue(str(exc).startswith("[pci] alias"), str(exc))

    def test_the_option_is_checked_when_the_settings_are_read(self):
        path = os.path.join(self.useFixture(base.fixtures.TempDir()).path, "n.conf")
        with open(path, "w") as f:
            f.write(f"[pci]\nalias = [{GPU},\n  {VF}]\n")
        self.assertEqual(["gpu", "vf"], sorted(conf.load_settings(path).pci_aliases))
        with open(path, "w") as f:
            f.write('[pci]\nalias = {"name": "gpu", "vendor_id": "10de"}\n')
        exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
        self.assertIn("[pci] alias", str(exc))
        self.assertIn("'product_id' is required", str(exc))

    def test_flavor_requests(self):
        aliases = pci_alias.parse_aliases(ALIASES)
        (gpu, vf) = pci_alias.flavor_pci_requests(
            {pci_alias.EXTRA_SPEC: "gpu:2, vf:1"}, aliases, "flavor f")
        self.assertEqual((2, "10de", "1db4", "gpu", None),
                         (gpu.count, gpu.vendor_id, gpu.product_id, gpu.alias_name, gpu.dev_type))
        self.assertEqual((1, "type-VF"), (vf.count, vf.dev_type))
        self.assertEqual((), pci_alias.flavor_pci_requests({}, aliases))
        for spec, expected in {"gpu": "each item must be <alias name>:<count>",
                               "gpu:0": "the count of 'gpu' must be a positive integer",
                               "gpu:two": "must be a positive integer, got 'two'",
                               "fpga:1": "no PCI alias 'fpga' in [pci] alias (known: gpu, vf)"
                               }.items():
            exc = self.assertRaises(InvalidInput, pci_alias.flavor_pci_requests,
                                    {pci_alias.EXTRA_SPEC: spec}, aliases, "flavor f")
            self.assertIn(f"flavor f extra spec {pci_alias.EXTRA_SPEC}=", str(exc))
            self.assertIn(expected, str(exc))

    def test_a_device_type_takes_only_devices_of_that_type(self):
        aliases = pci_alias.parse_aliases(ALIASES)
        stats = PciStats(DEVICES)
        self.assertEqual(("0000:05:10.0",), stats.claim([aliases["vf"].request(1)]))
        untyped = objects.PciRequest(count=1, vendor_id="8086", product_id="1520")
        self.assertEqual(("0000:05:00.0",), stats.claim([untyped]))   # the lowest address


class AliasBuilds(SchedulerScenario):
    """host1 has the GPU, the PF and its VF; host2 and host3 no device."""

    hosts = ("host1", "host2", "host3")

    def setUp(self):
        super().setUp()
        rt = self.trackers["host1"]
        rt.driver._pci = DEVICES
        rt.update_available_resource()
        self.conf = self.settings(reserved_host_memory_mb=0, cpu_allocation_ratio=1.0,
                                  pci_alias=ALIASES)

    def test_a_flavor_with_an_alias_lands_where_the_device_is_and_claims_it(self):
        (inst,) = api.build(self.store, alias_flavor("gpu:1"), settings=self.conf).instances
        self.assertEqual("host1", inst.host)
        stored = self.store.get_instance(inst.uuid)
        self.assertEqual(("gpu", 1), (stored.pci_requests[0].alias_name,
                                      stored.pci_requests[0].count))
        node = self.store.get_compute_node("host1", "host1")
        self.assertEqual({"0000:81:00.0"}, set(node.pci_in_use))
        exc = self.assertRaises(NoValidHost, api.build, self.store, alias_flavor("gpu:1"),
                                settings=self.conf)
        self.assertIn("PciPassthroughFilter removed 3 of 3 hosts", str(exc))
        self.assertIn('alias "gpu"', str(exc))

    def test_a_typed_alias_claims_the_vf_and_leaves_the_pf_unavailable(self):
        (inst,) = api.build(self.store, alias_flavor("vf:1", "vf.small"),
                            settings=self.conf).instances
        node = self.store.get_compute_node("host1", "host1")
        self.assertEqual({"0000:05:10.0"}, set(node.pci_in_use))
        lines = {line.address: line for line in reports.pci_device_lines(node)}
        self.assertEqual((True, False), (lines["0000:05:10.0"].in_use,
                                         lines["0000:05:10.0"].free))
        self.assertEqual((False, False), (lines["0000:05:00.0"].in_use,
                                          lines["0000:05:00.0"].free))   # its VF is in use
        self.assertEqual((False, True), (lines["0000:81:00.0"].in_use,
                                         lines["0000:81:00.0"].free))

    def test_an_unknown_alias_is_refused_and_nothing_claimed(self):
        exc = self.assertRaises(InvalidInput, api.build, self.store, alias_flavor("fpga:1"),
                                settings=self.conf)
        self.assertIn("flavor gpu.small extra spec pci_passthrough:alias='fpga:1': no PCI "
                      "alias 'fpga'", str(exc))
        self.assertEqual([], self.store.list_instances())


class AliasBuildsPostgreSQL(AliasBuilds):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store


class TestViews(CliTestCase):
    """The devices of a node in every view of it, from the records."""

    def setUp(self):
        super().setUp()
        os.makedirs(self.state)
        self.config = os.path.join(self.state, "n.conf")
        with open(self.config, "w") as f:
            f.write(f"[pci]\nalias = {ALIASES}\n")
        store = Store(f"sqlite:///{self.db_path()}")
        self.addCleanup(store.close)
        settings = conf.Settings(host=self.host, reserved_host_memory_mb=0,
                                 state_path=self.state, pci_alias=ALIASES)
        driver = FakeDriver(settings=settings, pci_devices=DEVICES)
        driver.init_host(self.host)
        self.rt = ResourceTracker(self.host, driver, store=store, settings=settings)
        self.rt.update_available_resource()
        store.heartbeat(self.host)
        (inst,) = api.build(store, alias_flavor("vf:1", "vf.small"), settings=settings,
                            trackers={self.host: self.rt}).instances
        self.inst = inst

    def expected(self):
        return [
            {"address": "0000:05:00.0", "vendor_id": "8086", "product_id": "1520",
             "dev_type": "type-PF", "numa_node": None, "parent_addr": None, "in_use": False,
             "free": False, "provider": None},
            {"address": "0000:05:10.0", "vendor_id": "8086", "product_id": "1520",
             "dev_type": "type-VF", "numa_node": None, "parent_addr": "0000:05:00.0",
             "in_use": True, "free": False, "provider": None},
            {"address": "0000:81:00.0", "vendor_id": "10de", "product_id": "1db4",
             "dev_type": "type-PCI", "numa_node": 0, "parent_addr": None, "in_use": False,
             "free": True, "provider": None}]

    def test_hypervisor_show_and_node_show(self):
        self.assertEqual(self.expected(), self.json("hypervisor", "show", self.host)["pci_devices"])
        self.assertEqual(self.expected(), self.json("node", "show", self.host)["pci_devices"])
        table = self.ok("hypervisor", "show", self.host)
        self.assertIn("0000:05:10.0 8086:1520 type-VF of 0000:05:00.0 in use", table)
        self.assertIn("0000:81:00.0 10de:1db4 type-PCI numa 0 free", table)
        self.assertIn("0000:05:00.0 8086:1520 type-PF unavailable", table)

    def test_the_api(self):
        from werkzeug.test import Client

        from nova_lite.api import make_app
        store = Store(f"sqlite:///{self.db_path()}", readonly=True)
        self.addCleanup(store.close)
        response = Client(make_app(store, conf.Settings())).get(f"/v1/hypervisors/{self.host}")
        self.assertEqual(200, response.status_code)
        self.assertEqual(self.expected(), json.loads(response.get_data())["hypervisor"][
            "pci_devices"])

    def test_compute_once_lists_the_devices(self):
        self.assertEqual(self.expected(), self.rt_view()["pci_devices"])

    def rt_view(self):
        from nova_lite.cli import views
        return views.node_dict(self.rt.get_node(self.host))

    def test_server_create_asks_for_the_alias_of_its_flavor(self):
        flavors = os.path.join(self.state, "flavors.ini")
        with open(flavors, "w") as f:
            f.write("[gpu.small]\nvcpus = 1\nmemory_mb = 256\n"
                    "pci_passthrough:alias = gpu:1\n"
                    "[fpga.small]\nvcpus = 1\nmemory_mb = 256\n"
                    "pci_passthrough:alias = fpga:1\n")
        args = ("--config-file", self.config, "server", "create", "--flavors-file", flavors,
                "--flavor")
        (server,) = self.json(*args, "gpu.small")
        self.assertEqual(self.host, server["Host"])
        node = self.json("node", "show", self.host)
        self.assertEqual({"0000:81:00.0", "0000:05:10.0"},
                         {d["address"] for d in node["pci_devices"] if d["in_use"]})
        code, _, err = self.cli(*args, "gpu.small")   # the only GPU is taken
        self.assertEqual(1, code, err)
        self.assertIn("PciPassthroughFilter removed 1 of 1 hosts", err)
        code, _, err = self.cli(*args, "fpga.small")
        self.assertEqual(2, code, err)
        self.assertIn("no PCI alias 'fpga' in [pci] alias (known: gpu, vf); nothing was "
                      "changed", err)
        self.assertEqual(2, len(self.json("server", "list")))
