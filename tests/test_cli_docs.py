"""The documentation's promises, checked.

- The no-op example driver of the driver author guide
  (doc/source/examples/noop_driver.py), installed as a real distribution
  with a real entry point, loads, shows in ``nova-lite driver list``, runs
  ``nova-lite compute --once --demo`` and passes DriverConformanceTests.
- The operator guide's option reference is the generated one (every option
  of ``nova_lite.conf.Settings``: see tests/test_conf_reference.py).
"""

import json
import os

import attrs
import testtools

from nova_lite import conf
from nova_lite.testing import DriverConformanceTests
from nova_lite.virt import loader
from tests.entry_points import ThrowawayDistributions
from tests.test_cli import CliTestCase

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "doc", "source")
EXAMPLE = os.path.join(DOC, "examples", "noop_driver.py")


def install_noop(test):
    """Install the example as distribution nova-lite-noop, entry point ``noop``."""
    with open(EXAMPLE) as handle:
        source = handle.read()
    dists = test.useFixture(ThrowawayDistributions())
    dists.add("nova-lite-noop", version="1.0",
              entry_points={loader.GROUP: {"noop": "nova_lite_noop:NoopDriver"}},
              modules={"nova_lite_noop": source})


class TestNoopExampleConformance(DriverConformanceTests, testtools.TestCase):
    """The guide's example passes the conformance suite, as the guide shows."""

    driver_name = "noop"

    def make_driver(self):
        install_noop(self)
        return super().make_driver()


class TestNoopExample(CliTestCase):

    def setUp(self):
        super().setUp()
        install_noop(self)

    def test_example_is_about_fifty_lines(self):
        with open(EXAMPLE) as handle:
            self.assertLess(len(handle.readlines()), 60)

    def test_listed_and_loaded(self):
        rows = {r["Name"]: r for r in self.json("driver", "list")}
        self.assertEqual("nova-lite-noop", rows["noop"]["Distribution"])
        self.assertEqual("1.0", rows["noop"]["API version"])
        self.assertIsNone(rows["noop"]["Load error"])
        driver = loader.load_driver("noop", vcpus=2)
        driver.init_host("h")
        self.assertEqual(2, driver.get_available_resource("h").vcpus)

    def test_compute_demo_on_the_example(self):
        code, out, err = self.cli("compute", "--once", "--demo", "--driver", "noop",
                                  "--host", "noop-host", "-f", "json")
        self.assertEqual(0, code, err)
        data = json.loads(out)
        self.assertTrue(data["demo"]["ok"])
        inv = {r["resource_class"]: r for r in data["nodes"][0]["inventory"]}
        self.assertEqual(32, inv["VCPU"]["capacity"])   # 8 x initial ratio 4.0


    def test_its_device_and_trait_show_and_can_be_asked_for(self):
        # A third party's driver reports a PCI device and a trait: both show
        # in the node's views, and a flavor that asks for both lands there.
        config = os.path.join(self.state, "n.conf")
        os.makedirs(self.state, exist_ok=True)
        with open(config, "w") as handle:
            handle.write('[pci]\nalias = {"name": "gpu", "vendor_id": "10de", '
                         '"product_id": "1db4"}\n')
        self.json("--config-file", config, "compute", "--once", "--driver", "noop",
                  "--host", "noop-host")
        shown = self.json("hypervisor", "show", "noop-host")
        self.assertEqual({"CUSTOM_NOOP", "COMPUTE_NODE"}, set(shown["traits"]))
        self.assertEqual([("0000:81:00.0", "10de", "1db4", True)],
                         [(d["address"], d["vendor_id"], d["product_id"], d["free"])
                          for d in shown["pci_devices"]])
        flavors = os.path.join(self.state, "flavors.ini")
        with open(flavors, "w") as handle:
            handle.write("[noop.gpu]\nvcpus = 1\nmemory_mb = 256\n"
                         "trait:CUSTOM_NOOP = required\npci_passthrough:alias = gpu:1\n")
        (server,) = self.json("--config-file", config, "server", "create", "--flavors-file",
                              flavors, "--flavor", "noop.gpu")
        self.assertEqual("noop-host", server["Host"])
        node = self.json("node", "show", "noop-host")
        self.assertEqual([True], [d["in_use"] for d in node["pci_devices"]])
        # Its child provider (a GPU with 2 vGPUs) shows and takes VGPU claims.
        self.assertEqual([("noop-host_gpu0", 2, 0)],
                         [(p["name"], p["inventories"][0]["capacity"],
                           p["inventories"][0]["used"]) for p in shown["providers"]])
        with open(flavors, "a") as handle:
            handle.write("[noop.vgpu]\nvcpus = 1\nmemory_mb = 256\nresources:VGPU = 1\n")
        self.json("server", "create", "--flavors-file", flavors, "--flavor", "noop.vgpu",
                  "--count", "2")
        (gpu,) = self.json("node", "show", "noop-host")["providers"]
        self.assertEqual((2, 0), (gpu["inventories"][0]["used"], gpu["inventories"][0]["free"]))
        code, out, err = self.cli("server", "create", "--flavors-file", flavors, "--flavor",
                                  "noop.vgpu")
        self.assertEqual(1, code, out + err)
        self.assertIn("VGPU: no child provider has room for 1", out + err)


    def test_its_pci_device_is_a_provider_when_the_operator_says_so(self):
        # [pci] report_in_placement: the example's device is a child provider
        # with its trait, and a server asking for it by alias holds its unit.
        config = os.path.join(self.state, "n.conf")
        os.makedirs(self.state, exist_ok=True)
        with open(config, "w") as handle:
            handle.write('[pci]\nreport_in_placement = true\nalias = {"name": "gpu", '
                         '"vendor_id": "10de", "product_id": "1db4", '
                         '"traits": "CUSTOM_NOOP_GPU"}\n')
        self.json("--config-file", config, "compute", "--once", "--driver", "noop",
                  "--host", "noop-host")
        flavors = os.path.join(self.state, "flavors.ini")
        with open(flavors, "w") as handle:
            handle.write("[noop.gpu]\nvcpus = 1\nmemory_mb = 256\n"
                         "pci_passthrough:alias = gpu:1\n")
        self.json("--config-file", config, "server", "create", "--flavors-file", flavors,
                  "--flavor", "noop.gpu")
        shown = {p["name"]: p for p in self.json("node", "show", "noop-host")["providers"]}
        device = shown["noop-host_0000:81:00.0"]
        self.assertEqual((["COMPUTE_MANAGED_PCI_DEVICE", "CUSTOM_NOOP_GPU"],
                          "CUSTOM_PCI_10DE_1DB4", 1, 1),
                         (device["traits"], device["inventories"][0]["resource_class"],
                          device["inventories"][0]["capacity"],
                          device["inventories"][0]["used"]))


class TestOperatorGuide(testtools.TestCase):

    def test_every_option_is_documented(self):
        with open(os.path.join(DOC, "operator", "config.rst")) as handle:
            text = handle.read()
        # The reference is generated from each option's declaration.
        self.assertIn("\n.. nova-lite-config::\n", text)
        declared = {f.name for f in attrs.fields(conf.Settings)
                    if conf.OPTION_KEY in f.metadata}
        # Settings fields with no INI option of the core's: the raw sections, and
        # the libvirt connection, which the libvirt plugin's own option fills.
        code_only = {"sections", "libvirt_connection_uri"}
        self.assertEqual({f.name for f in attrs.fields(conf.Settings)} - code_only,
                         declared)
        self.assertIn("libvirt_connection_uri", text)
