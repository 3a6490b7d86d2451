"""provider.yaml: read and validated once at start, applied at every audit.

The examples follow the structure of Nova's provider.yaml documentation
(doc/source/admin/managing-resource-providers.rst): one provider
identified by name, by uuid or by ``$COMPUTE_NODE``, with
``inventories.additional`` and ``traits.additional``.
"""

import logging
import os
import re
import textwrap

import attrs
import fixtures
import jsonschema
import testtools
import yaml

from nova_lite import explain, objects
from nova_lite import provider_config as pc
from nova_lite.compute.manager import ComputeService
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.exception import (
    ComputeResourcesUnavailable, InvalidConfig, NodeNotFound, ProviderConfigError)
from nova_lite.resources import Inventory
from nova_lite.scheduler import HostManager, NoValidHost
from nova_lite.traits import OS_TRAITS_VERSION
from nova_lite.virt import loader
from nova_lite.virt.fake import FakeDriver
from tests import base
from tests.test_cli import CliTestCase
from tests import test_scheduler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE_PAGE = os.path.join(ROOT, "doc", "source", "operator", "provider-config.rst")

#: The documented example, identified by name (Nova's example, other values).
BY_NAME = """\
meta:
  schema_version: '1.0'
providers:
  - identification:
      name: 'rack7-node3'
    inventories:
      additional:
        - CUSTOM_LICENSE_SEAT:
            total: 40
            reserved: 4
            min_unit: 1
            max_unit: 8
            step_size: 2
            allocation_ratio: 1.5
    traits:
      additional:
        - 'CUSTOM_LICENSED_DB'
"""
BY_UUID = BY_NAME.replace("name: 'rack7-node3'",
                          "uuid: '4F0A2C1E-93B5-4D8A-A1C7-2E6B0F9D3A55'")
EVERY_NODE = BY_NAME.replace("name: 'rack7-node3'", "uuid: '$COMPUTE_NODE'")


def provider(identification, classes=None, traits=None):
    """One provider entry as YAML text (a list item), indented for ``providers:``."""
    lines = [f"  - identification: {{{identification}}}"]
    if classes:
        lines.append("    inventories:\n      additional:")
        for rc, fields in classes.items():
            body = ", ".join(f"{k}: {v}" for k, v in fields.items())
            lines.append(f"        - {rc}: {{{body}}}")
    if traits:
        lines.append(f"    traits:\n      additional: [{', '.join(traits)}]")
    return "\n".join(lines) + "\n"


def document(*providers, version="'1.0'"):
    return f"meta:\n  schema_version: {version}\nproviders:\n" + "".join(providers)


class ConfigDir(fixtures.Fixture):
    """A provider config directory; ``write(name, text)`` adds a file to it."""

    def _setUp(self):
        self.path = self.useFixture(fixtures.TempDir()).path

    def write(self, name, text):
        path = os.path.join(self.path, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(textwrap.dedent(text))
        return path


class LoadingTests(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(ConfigDir())
        self.log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))

    def refused(self, text, name="a.yaml"):
        """The ProviderConfigError of a directory holding only ``text``; its
        message starts with the file's path."""
        path = self.dir.write(name, text)
        exc = self.assertRaises(ProviderConfigError, pc.load_provider_configs, self.dir.path)
        self.assertEqual(path, exc.path)
        self.assertTrue(str(exc).startswith(f"Invalid provider config file {path}: "), str(exc))
        os.unlink(path)
        return exc

    def test_a_missing_directory_is_logged_and_gives_nothing(self):
        missing = os.path.join(self.dir.path, "nope")
        configs = pc.load_provider_configs(missing)
        self.assertFalse(configs)
        self.assertEqual([], configs.entries())
        self.assertIn(f"Provider config directory {missing} does not exist", self.log.output)

    def test_only_yaml_files_are_read_in_name_order(self):
        self.dir.write("notes.txt", "not yaml: [")
        self.dir.write("old.yml", "not yaml: [")
        self.assertFalse(pc.load_provider_configs(self.dir.path))
        self.assertIn("No provider config files (*.yaml)", self.log.output)
        self.dir.write("b.yaml", document(provider("name: n2", traits=["CUSTOM_B"])))
        self.dir.write("a.yaml", document(provider("name: n1", traits=["CUSTOM_A"])))
        sources = [os.path.basename(e.source) for e in
                   pc.load_provider_configs(self.dir.path).entries()]
        self.assertEqual(["a.yaml", "b.yaml"], sources)

    def test_a_location_that_is_not_a_directory_is_refused(self):
        path = self.dir.write("file", "")
        exc = self.assertRaises(ProviderConfigError, pc.load_provider_configs, path)
        self.assertIn(f"{path}: the directory cannot be read: Not a directory", str(exc))
        self.assertIsInstance(exc, InvalidConfig)
        self.assertEqual("[compute] provider_config_location", exc.option)

    def test_the_documented_example_by_name(self):
        self.dir.write("example.yaml", BY_NAME)
        configs = pc.load_provider_configs(self.dir.path)
        entry = configs.names["rack7-node3"]
        self.assertEqual({"CUSTOM_LICENSE_SEAT": Inventory(
            total=40, reserved=4, min_unit=1, max_unit=8, step_size=2,
            allocation_ratio="1.5")}, entry.inventories)
        self.assertEqual(54, entry.inventories["CUSTOM_LICENSE_SEAT"].capacity)
        self.assertEqual(frozenset({"CUSTOM_LICENSED_DB"}), entry.traits)
        self.assertEqual(("name", 0, 4), (entry.by, entry.index, entry.line))
        self.assertEqual({}, dict(configs.uuids))
        self.assertIsNone(configs.every_node)

    def test_the_documented_example_by_uuid_and_for_every_node(self):
        self.dir.write("example.yaml", BY_UUID)
        configs = pc.load_provider_configs(self.dir.path)
        self.assertEqual(["4f0a2c1e-93b5-4d8a-a1c7-2e6b0f9d3a55"], list(configs.uuids))
        os.unlink(os.path.join(self.dir.path, "example.yaml"))
        self.dir.write("example.yaml", EVERY_NODE)
        configs = pc.load_provider_configs(self.dir.path)
        self.assertEqual(pc.COMPUTE_NODE, configs.every_node.identifier)
        self.assertEqual(frozenset({"CUSTOM_LICENSED_DB"}), configs.every_node.traits)

    def test_the_examples_validate_against_the_published_schema(self):
        jsonschema.Draft202012Validator.check_schema(pc.SCHEMA)
        for text in (BY_NAME, BY_UUID, EVERY_NODE):
            jsonschema.validate(yaml.safe_load(text), pc.SCHEMA)

    def test_fields_left_out_take_placements_defaults(self):
        self.dir.write("a.yaml", document(provider("name: n1", {"CUSTOM_X": {"total": 5}})))
        inv = pc.load_provider_configs(self.dir.path).names["n1"].inventories["CUSTOM_X"]
        self.assertEqual(Inventory(total=5, reserved=0, min_unit=1, max_unit=None,
                                   step_size=1, allocation_ratio=1), inv)

    def test_each_schema_problem_names_the_place_its_line_and_what_is_wrong(self):
        gpu = "providers[0].inventories.additional[0].CUSTOM_GPU"
        cases = [
            (provider("name: n1", {"CUSTOM_GPU": {"total": -1}}),
             f"{gpu}.total (line 7): -1 is less than the minimum of 1"),
            (provider("name: n1", {"CUSTOM_GPU": {"total": "'ten'"}}),
             f"{gpu}.total (line 7): 'ten' is not of type 'integer'"),
            (provider("name: n1", {"CUSTOM_GPU": {"total": 2, "reserved": -1}}),
             f"{gpu}.reserved (line 7): -1 is less than the minimum of 0"),
            (provider("name: n1", {"CUSTOM_GPU": {"total": 2 ** 31}}),
             f"{gpu}.total (line 7): 2147483648 is greater than the maximum of 2147483647"),
            (provider("name: n1", {"CUSTOM_GPU": {"total": 2, "allocation_ratio": 0}}),
             f"{gpu}.allocation_ratio (line 7): 0 is less than or equal to the minimum of 0"),
            (provider("name: n1", {"CUSTOM_GPU": {"total": 2, "step": 1}}),
             f"{gpu} (line 7): Additional properties are not allowed ('step' was unexpected)"),
            (provider("name: n1", {"CUSTOM_GPU": {"reserved": 1}}),
             f"{gpu} (line 7): 'total' is a required property"),
            (provider("name: n1", {"custom_gpu": {"total": 1}}),
             "providers[0].inventories.additional[0].custom_gpu (line 7): 'custom_gpu' is "
             "not a resource class name (CUSTOM_ followed by upper-case letters, digits and "
             "underscores)"),
            (provider("name: n1", traits=["custom-fast"]),
             "providers[0].traits.additional[0] (line 6): 'custom-fast' is not a trait name "
             "(CUSTOM_ followed by upper-case letters, digits and underscores)"),
            (provider("uuid: not-a-uuid", traits=["CUSTOM_A"]),
             "providers[0].identification.uuid (line 4): 'not-a-uuid' must be a uuid or "
             "$COMPUTE_NODE"),
            (provider("name: n1, uuid: '$COMPUTE_NODE'", traits=["CUSTOM_A"]),
             "providers[0].identification (line 4): {'name': 'n1', 'uuid': '$COMPUTE_NODE'} "
             "must hold only one of name and uuid"),
            (provider("", traits=["CUSTOM_A"]),
             "providers[0].identification (line 4): {} must hold one of name and uuid"),
            (provider("hostname: n1", traits=["CUSTOM_A"]),
             "providers[0].identification (line 4): Additional properties are not allowed "
             "('hostname' was unexpected)"),
            ("  - traits: {additional: [CUSTOM_A]}\n",
             "providers[0] (line 4): 'identification' is a required property"),
        ]
        for text, expected in cases:
            exc = self.refused(document(text))
            self.assertEqual([expected], exc.problems, text)
        exc = self.refused("meta:\n  schema_version: '1.0'\nproviders: {}\n")
        self.assertEqual(["providers (line 3): {} is not of type 'array'"], exc.problems)

    def test_every_schema_problem_of_a_file_is_named_in_document_order(self):
        exc = self.refused(document(
            provider("name: n1", {"CUSTOM_A": {"total": 1}}),
            provider("name: n2", {"CUSTOM_FOO": {"total": 0}}),
            provider("name: n3", {"CUSTOM_B": {"total": 1, "max_unit": 0}})))
        self.assertEqual([
            "providers[1].inventories.additional[0].CUSTOM_FOO.total (line 11): 0 is less "
            "than the minimum of 1",
            "providers[2].inventories.additional[0].CUSTOM_B.max_unit (line 15): 0 is less "
            "than the minimum of 1"], exc.problems)

    def test_standard_classes_and_traits_and_impossible_inventories_are_refused(self):
        exc = self.refused(document(provider(
            "name: n1",
            {"VCPU": {"total": 4}, "CUSTOM_A": {"total": 1}, "MEMORY_MB": {"total": 1}},
            traits=["HW_CPU_X86_AVX2", "CUSTOM_OK", "FAST"]), provider(
            "name: n2", {"CUSTOM_R": {"total": 3, "reserved": 4},
                         "CUSTOM_M": {"total": 3, "min_unit": 3, "max_unit": 2},
                         "CUSTOM_A": {"total": 1}, "GOLD": {"total": 1}})
                                    + "        - CUSTOM_A: {total: 2}\n"))
        add = "inventories.additional"
        self.assertEqual([
            f"providers[0].{add}[0].VCPU (line 7): VCPU is a standard resource class: only "
            "custom classes (CUSTOM_*) may be added",
            f"providers[0].{add}[2].MEMORY_MB (line 9): MEMORY_MB is a standard resource "
            "class: only custom classes (CUSTOM_*) may be added",
            "providers[0].traits.additional[0] (line 11): HW_CPU_X86_AVX2 is a standard "
            "trait: only custom traits (CUSTOM_*) may be added",
            "providers[0].traits.additional[2] (line 11): unknown trait 'FAST': not a "
            f"standard trait of os-traits {OS_TRAITS_VERSION}, "
            "nor CUSTOM_<NAME>",
            f"providers[1].{add}[0].CUSTOM_R (line 15): Inventory reserved 4 is greater "
            "than total 3",
            f"providers[1].{add}[1].CUSTOM_M (line 16): Inventory max_unit 2 is smaller "
            "than min_unit 3",
            f"providers[1].{add}[3].GOLD (line 18): GOLD is not a custom resource class "
            "(CUSTOM_ followed by a name)",
            f"providers[1].{add}[4].CUSTOM_A (line 19): CUSTOM_A is given twice for this "
            f"provider (first at providers[1].{add}[2].CUSTOM_A (line 17))",
        ], exc.problems)

    def test_malformed_yaml_names_the_file_and_the_position(self):
        exc = self.refused("meta:\n  schema_version: '1.0'\nproviders:\n"
                           "  - identification: {name: n1\n")
        self.assertEqual(["not valid YAML: line 5, column 1: while parsing a flow mapping, "
                          "expected ',' or '}', but got '<stream end>'"], exc.problems)
        exc = self.refused(document(provider("name: n1", traits=["CUSTOM_A"]))
                           + "    traits: {additional: [CUSTOM_B]}\n")
        self.assertEqual(["not valid YAML: line 7, column 5: the key 'traits' is given "
                          "twice (first at line 5)"], exc.problems)
        exc = self.refused("meta: {schema_version: '1.0'}\n---\nmeta: {}\n")
        self.assertEqual(["not valid YAML: line 2, column 1: expected a single document in "
                          "the stream, but found another document"], exc.problems)
        path = os.path.join(self.dir.path, "a.yaml")
        with open(path, "wb") as handle:
            handle.write(b"meta: {schema_version: '1.0'}\n# \xff\n")
        exc = self.assertRaises(ProviderConfigError, pc.load_provider_configs, self.dir.path)
        self.assertEqual(["the file is not UTF-8 text (byte 32)"], exc.problems)

    def test_a_file_that_cannot_be_read_is_named(self):
        os.mkdir(os.path.join(self.dir.path, "sub.yaml"))
        exc = self.assertRaises(ProviderConfigError, pc.load_provider_configs, self.dir.path)
        self.assertEqual(os.path.join(self.dir.path, "sub.yaml"), exc.path)
        self.assertEqual(["the file cannot be read: Is a directory"], exc.problems)

    def test_the_document_must_be_a_mapping_with_a_schema_version(self):
        cases = {
            "": "the document is empty: it must be a mapping with meta.schema_version",
            "- 1\n": "the document is a list: it must be a mapping with meta.schema_version",
            "providers: []\n": "meta.schema_version (line 1): missing (the file's schema "
                               "version, such as '1.0', is required)",
            "meta: '1.0'\n": "meta (line 1): '1.0' must be a mapping holding schema_version",
            "meta:\n  schema_version: 1.0\n": "meta.schema_version (line 2): 1.0 must be a "
                                              "string such as '1.0' (quote it: YAML reads "
                                              "1.0 as a number)",
            "meta:\n  schema_version: 'one'\n": "meta.schema_version (line 2): 'one' is not "
                                                "a version such as '1.0'",
            "meta:\n  schema_version: '2.0'\nproviders: []\n":
                "meta.schema_version (line 2): schema major version 2 is not supported "
                "(this nova-lite reads 1.x)",
        }
        for text, expected in cases.items():
            self.assertEqual([expected], self.refused(text).problems, text)

    def test_a_newer_minor_version_is_read_with_a_warning(self):
        path = self.dir.write("a.yaml", document(
            provider("name: n1", traits=["CUSTOM_A"]) + "    colour: blue\n",
            version="'1.4'") + "future_section: {}\n")
        configs = pc.load_provider_configs(self.dir.path)
        self.assertEqual(frozenset({"CUSTOM_A"}), configs.names["n1"].traits)
        self.assertIn(f"Provider config file {path} is at schema version 1.4; this nova-lite "
                      "knows 1.0", self.log.output)

    def test_a_provider_configured_twice_is_refused_naming_both_files(self):
        first = self.dir.write("a.yaml", document(
            provider("name: n1", traits=["CUSTOM_A"]),
            provider("uuid: 4f0a2c1e-93b5-4d8a-a1c7-2e6b0f9d3a55", traits=["CUSTOM_A"])))
        second = self.dir.write("b.yaml", document(
            provider("name: n2", traits=["CUSTOM_B"]),
            provider("name: n1", traits=["CUSTOM_B"])))
        exc = self.assertRaises(ProviderConfigError, pc.load_provider_configs, self.dir.path)
        self.assertEqual(second, exc.path)
        self.assertEqual([f"providers[1] (name 'n1') (line 7): the provider is already "
                          f"configured by {first} line 4 providers[0] (name 'n1'); each "
                          "provider may be configured once across all files"], exc.problems)
        self.dir.write("b.yaml", document(
            provider("uuid: 4F0A2C1E-93B5-4D8A-A1C7-2E6B0F9D3A55", traits=["CUSTOM_B"])))
        exc = self.assertRaises(ProviderConfigError, pc.load_provider_configs, self.dir.path)
        self.assertIn("providers[0] (uuid '4f0a2c1e-93b5-4d8a-a1c7-2e6b0f9d3a55') (line 4): "
                      f"the provider is already configured by {first} line 7", str(exc))
        self.dir.write("b.yaml", document(
            provider("uuid: $COMPUTE_NODE", traits=["CUSTOM_B"]),
            provider("uuid: $COMPUTE_NODE", traits=["CUSTOM_C"])))
        exc = self.assertRaises(ProviderConfigError, pc.load_provider_configs, self.dir.path)
        self.assertIn("providers[1] (uuid '$COMPUTE_NODE') (line 7): the provider is already "
                      f"configured by {second} line 4 providers[0]", str(exc))

    def test_an_entry_that_adds_nothing_is_ignored_with_a_warning(self):
        path = self.dir.write("a.yaml", document(
            provider("name: n1"), provider("name: n1", traits=["CUSTOM_A"]),
            provider("name: n2") + "    inventories: {additional: []}\n"))
        configs = pc.load_provider_configs(self.dir.path)
        self.assertEqual(["n1"], list(configs.names))
        self.assertEqual(1, configs.names["n1"].index)
        self.assertIn(f"Provider config file {path}: providers[0] (name 'n1') adds no "
                      "inventory and no trait; it is ignored", self.log.output)
        self.assertIn("providers[2] (name 'n2') adds no inventory", self.log.output)


def node_report(nodename="n1", uuid=None, traits=(), resource_class=None):
    return objects.NodeResources(vcpus=4, memory_mb=4096, local_gb=40,
                                 hypervisor_hostname=nodename, uuid=uuid, traits=traits,
                                 resource_class=resource_class)


BASE_INVENTORY = {"VCPU": Inventory(total=4)}
NODE_UUID = "4f0a2c1e-93b5-4d8a-a1c7-2e6b0f9d3a55"


class ApplyTests(testtools.TestCase):
    """Which entry applies to a node, and what it adds."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(ConfigDir())
        self.log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))

    def configs(self, *providers):
        self.path = self.dir.write("a.yaml", document(*providers))
        return pc.load_provider_configs(self.dir.path)

    def applied(self, configs, nodename, uuid=None, traits=(), resource_class=None):
        report = node_report(nodename, uuid, traits, resource_class)
        inventories = dict(BASE_INVENTORY)
        if resource_class:
            inventories[resource_class] = Inventory(total=1)
        report, inventories = configs.apply(nodename, uuid, report, inventories)
        return report.traits, dict(inventories)

    def test_an_entry_naming_the_node_wins_over_the_compute_node_entry(self):
        configs = self.configs(
            provider("uuid: $COMPUTE_NODE", {"CUSTOM_FPGA": {"total": 2}}, ["CUSTOM_RACK_A"]),
            provider("name: n2", {"CUSTOM_GPU": {"total": 4}}, ["CUSTOM_GPU_NODE"]),
            provider(f"uuid: {NODE_UUID.upper()}", traits=["CUSTOM_BY_UUID"]))
        self.assertEqual(({"CUSTOM_RACK_A"}, {**BASE_INVENTORY,
                                              "CUSTOM_FPGA": Inventory(total=2)}),
                         self.applied(configs, "n1"))
        self.assertEqual(({"CUSTOM_GPU_NODE"}, {**BASE_INVENTORY,
                                                "CUSTOM_GPU": Inventory(total=4)}),
                         self.applied(configs, "n2"))
        self.assertEqual(({"CUSTOM_BY_UUID"}, BASE_INVENTORY),
                         self.applied(configs, "n3", uuid=NODE_UUID))

    def test_an_explicit_entry_adding_nothing_leaves_the_compute_node_entry(self):
        # As Nova: such an entry is dropped when read, so it overrides nothing.
        configs = self.configs(provider("uuid: $COMPUTE_NODE", traits=["CUSTOM_RACK_A"]),
                               provider("name: n1"))
        self.assertEqual(({"CUSTOM_RACK_A"}, BASE_INVENTORY), self.applied(configs, "n1"))

    def test_the_drivers_traits_are_kept_and_may_repeat_a_custom_one(self):
        configs = self.configs(provider("name: n1", traits=["CUSTOM_A", "CUSTOM_B"]))
        traits, _ = self.applied(configs, "n1", traits=["HW_CPU_X86_AVX2", "CUSTOM_A"])
        self.assertEqual({"HW_CPU_X86_AVX2", "CUSTOM_A", "CUSTOM_B"}, traits)

    def test_nothing_applies_to_a_node_no_entry_names(self):
        configs = self.configs(provider("name: n1", traits=["CUSTOM_A"]))
        self.assertEqual((frozenset(), BASE_INVENTORY), self.applied(configs, "n9"))
        self.assertEqual([configs.names["n1"]], configs.unmatched({"n9": None}))
        self.assertEqual([], configs.unmatched({"n1": None, "n9": None}))

    def test_a_class_the_driver_reports_is_refused_naming_the_node_and_the_class(self):
        configs = self.configs(provider("uuid: $COMPUTE_NODE", {"CUSTOM_GOLD": {"total": 1}}))
        exc = self.assertRaises(ProviderConfigError, self.applied, configs, "bm-7",
                                resource_class="CUSTOM_GOLD")
        self.assertEqual(f"Invalid provider config file {self.path}: providers[0] (uuid "
                         "'$COMPUTE_NODE') adds resource class CUSTOM_GOLD to node 'bm-7', "
                         "whose driver reports it; a provider.yaml may only add classes the "
                         "driver does not report", str(exc))

    def test_a_node_named_by_name_and_by_uuid_is_refused(self):
        configs = self.configs(provider("name: n1", traits=["CUSTOM_A"]),
                               provider(f"uuid: {NODE_UUID}", traits=["CUSTOM_B"]))
        exc = self.assertRaises(ProviderConfigError, self.applied, configs, "n1",
                                uuid=NODE_UUID)
        self.assertIn(f"providers[1] (uuid '{NODE_UUID}') names node 'n1', which {self.path} "
                      "line 4 providers[0] (name 'n1') names too", str(exc))


class NoUuidDriver(FakeDriver):
    """A fake driver that reports no uuid: its nodes' uuids are the records'."""

    def get_available_resource(self, nodename):
        return attrs.evolve(super().get_available_resource(nodename), uuid=None)


class GoldDriver(FakeDriver):
    """A bare-metal-like fake: every node offers one CUSTOM_GOLD."""

    def get_available_resource(self, nodename):
        return attrs.evolve(super().get_available_resource(nodename),
                            resource_class="CUSTOM_GOLD")


def gpu_flavor(name="gpu", amount=1):
    return base.flavor(name=name, memory_mb=256, extra_specs={
        "resources:CUSTOM_GPU": str(amount)})


class TrackerTests(base.TestCase):
    """settings -> ResourceTracker audit -> records -> ComputeNode traits and inventories.

    Three fake nodes: ``$COMPUTE_NODE`` gives each CUSTOM_FPGA and CUSTOM_RACK_A;
    n2 is named and gets CUSTOM_GPU (total 4, max_unit 2) and CUSTOM_GPU_NODE
    instead.
    """

    def make_store(self):
        return self.sqlite_store()

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(ConfigDir())
        self.log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        self.file = self.dir.write("nodes.yaml", document(
            provider("uuid: $COMPUTE_NODE", {"CUSTOM_FPGA": {"total": 2}}, ["CUSTOM_RACK_A"]),
            provider("name: n2", {"CUSTOM_GPU": {"total": 4, "max_unit": 2}},
                     ["CUSTOM_GPU_NODE"])))
        self.conf = self.settings(reserved_host_memory_mb=0,
                                  provider_config_location=self.dir.path)
        self.store = self.make_store()

    def tracker(self, driver_name="fake.multinode", settings=None, **kw):
        kw.setdefault("nodes", ["n1", "n2", "n3"])
        return self.make_tracker(driver_name, settings=settings or self.conf,
                                 store=self.store, **kw)

    def test_the_audit_records_the_additions_of_each_node(self):
        _, rt = self.tracker()
        fpga = {"CUSTOM_FPGA": Inventory(total=2)}
        gpu = {"CUSTOM_GPU": Inventory(total=4, max_unit=2)}
        expected = {"n1": (fpga, {"CUSTOM_RACK_A"}), "n2": (gpu, {"CUSTOM_GPU_NODE"}),
                    "n3": (fpga, {"CUSTOM_RACK_A"})}
        for name, (classes, traits) in expected.items():
            node = self.store.get_compute_node(self.host, name)
            self.assertEqual(classes, {rc: inv for rc, inv in node.inventories.items()
                                       if rc.startswith("CUSTOM_")}, name)
            self.assertEqual({"VCPU", "MEMORY_MB", "DISK_GB"} | set(classes),
                             set(node.inventories), name)
            self.assertEqual(traits | {"COMPUTE_SAME_HOST_COLD_MIGRATE", "COMPUTE_NODE"},
                             node.traits, name)
            self.assertEqual(node.traits, rt.get_node(name).traits)
        # The next audit records the same: no generation moves.
        before = {n.nodename: n.generation for n in self.store.get_compute_nodes(self.host)}
        rt.update_available_resource()
        self.assertEqual(before, {n.nodename: n.generation
                                  for n in self.store.get_compute_nodes(self.host)})

    def test_claims_fit_against_the_inventory_of_the_file(self):
        _, rt = self.tracker()
        for _ in range(2):
            rt.instance_claim(base.instance(gpu_flavor(amount=2)), "n2")
        self.assertEqual(4, rt.get_node("n2").used("CUSTOM_GPU"))
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                                base.instance(gpu_flavor()), "n2")
        self.assertIn("CUSTOM_GPU", str(exc))
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                                base.instance(gpu_flavor(amount=1)), "n1")
        self.assertIn("CUSTOM_GPU", str(exc))
        self.assertEqual(4, self.store.get_compute_node(self.host, "n2").used("CUSTOM_GPU"))

    def test_a_claim_beyond_max_unit_is_refused(self):
        _, rt = self.tracker()
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                                base.instance(gpu_flavor(amount=3)), "n2")
        self.assertIn("CUSTOM_GPU", str(exc))
        self.assertIn("max_unit 2", str(exc))

    def test_the_scheduler_finds_the_class_and_the_trait(self):
        self.tracker()
        self.store.heartbeat(self.host)
        manager = HostManager(self.store, self.conf)
        picks = manager.select_destinations(gpu_flavor(), 4)
        self.assertEqual(["n2"] * 4, [s.nodename for s in picks])
        self.assertRaises(NoValidHost, manager.select_destinations, gpu_flavor())
        rack = base.flavor(name="rack", extra_specs={"trait:CUSTOM_RACK_A": "required"})
        self.assertEqual({"n1", "n3"}, {s.nodename for s in
                                        manager.select_destinations(rack, 6)})

    def test_explain_names_the_files_ratio_of_a_custom_class(self):
        self.dir.write("nodes.yaml", document(
            provider("name: n1", {"CUSTOM_VF": {"total": 4, "allocation_ratio": 2.0}})))
        _, rt = self.tracker()
        lines = {line.resource_class: line
                 for line in explain.explain_node(self.store, "n1", self.conf).resources}
        self.assertEqual("2.0 as recorded: this class's own inventory (provider.yaml) sets it",
                         lines["CUSTOM_VF"].ratio_source)
        self.assertEqual(8, self.store.get_compute_node(self.host, "n1").capacity("CUSTOM_VF"))

    def test_the_files_are_read_once_not_at_each_audit(self):
        _, rt = self.tracker()
        os.unlink(self.file)
        self.dir.write("nodes.yaml", "not: [valid")
        rt.update_available_resource()
        self.assertEqual({"CUSTOM_GPU_NODE", "COMPUTE_SAME_HOST_COLD_MIGRATE", "COMPUTE_NODE"},
                         self.store.get_compute_node(self.host, "n2").traits)
        self.assertRaises(ProviderConfigError, self.tracker)

    def test_a_node_named_by_uuid_matches_its_record_from_the_first_audit(self):
        no_file = self.settings(reserved_host_memory_mb=0,
                                provider_config_location=os.path.join(self.dir.path, "no"))
        driver = NoUuidDriver(settings=no_file, nodes=["n1", "n2"])
        driver.init_host(self.host)
        ResourceTracker(self.host, driver, store=self.store,
                        settings=no_file).update_available_resource()
        recorded = self.store.get_compute_node(self.host, "n1").uuid
        os.unlink(self.file)
        self.dir.write("nodes.yaml", document(
            provider(f"uuid: {recorded.upper()}", {"CUSTOM_TAPE": {"total": 3}})))
        # A restarted service: nothing tracked yet, the driver gives no uuid.
        rt = ResourceTracker(self.host, driver, store=self.store, settings=self.conf)
        generation = self.store.get_compute_node(self.host, "n1").generation
        rt.update_available_resource()
        node = self.store.get_compute_node(self.host, "n1")
        self.assertEqual(Inventory(total=3), node.inventories["CUSTOM_TAPE"])
        self.assertEqual(generation + 1, node.generation)
        self.assertNotIn("CUSTOM_TAPE", self.store.get_compute_node(self.host, "n2").inventories)
        rt.update_available_resource()
        self.assertEqual(generation + 1, self.store.get_compute_node(self.host, "n1").generation)

    def test_a_class_the_driver_reports_fails_the_node_naming_file_and_class(self):
        os.unlink(self.file)
        self.dir.write("gold.yaml", document(
            provider("uuid: $COMPUTE_NODE", {"CUSTOM_GOLD": {"total": 2}})))
        driver = GoldDriver(settings=self.conf, nodes=["bm1", "bm2"])
        driver.init_host(self.host)
        # bm1 was recorded before the file was written; bm2 never was.
        ResourceTracker(self.host, driver, store=self.store, settings=self.conf,
                        provider_configs=pc.NO_PROVIDER_CONFIGS).update_available_resource("bm1")
        rt = ResourceTracker(self.host, driver, store=self.store, settings=self.conf)
        result = rt.update_available_resource()
        self.assertEqual((), result.audited)
        for name in ("bm1", "bm2"):
            self.assertEqual(
                "ProviderConfigError: Invalid provider config file "
                f"{self.dir.path}/gold.yaml: providers[0] (uuid '$COMPUTE_NODE') adds "
                f"resource class CUSTOM_GOLD to node '{name}', whose driver reports it; a "
                "provider.yaml may only add classes the driver does not report",
                result.failed[name])
        node = self.store.get_compute_node(self.host, "bm1")
        self.assertEqual(result.failed["bm1"], node.last_error)
        self.assertEqual(Inventory(total=1), node.inventories["CUSTOM_GOLD"])
        self.assertRaises(NodeNotFound, self.store.get_compute_node, self.host, "bm2")

    def test_an_entry_naming_no_node_is_warned_of_once(self):
        self.dir.write("more.yaml", document(provider("name: ghost", traits=["CUSTOM_A"])))
        _, rt = self.tracker(settings=self.settings(
            reserved_host_memory_mb=0, provider_config_location=self.dir.path))
        rt.update_available_resource()
        warning = "more.yaml line 4 providers[0] (name 'ghost') names no node of host host1"
        self.assertEqual(1, self.log.output.count(warning), self.log.output)

    def test_a_bad_file_refuses_the_tracker(self):
        self.dir.write("bad.yaml", document(provider("name: n1", {"CUSTOM_A": {"total": 0}})))
        exc = self.assertRaises(ProviderConfigError, self.tracker, audit=False)
        self.assertIn("bad.yaml: providers[0].inventories.additional[0].CUSTOM_A.total (line 7):"
                      " 0 is less than the minimum of 1", str(exc))


class PostgreSQLTrackerTests(TrackerTests):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store


class ServiceTests(base.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(ConfigDir())

    def test_a_bad_file_stops_the_service_before_anything_is_opened(self):
        path = self.dir.write("a.yaml", document(provider("name: n1", {
            "CUSTOM_FOO": {"total": 1}}), provider("name: n2", {"CUSTOM_FOO": {"total": -5}})))
        settings = self.settings(provider_config_location=self.dir.path)
        driver = loader.load_driver("fake", settings=settings)
        exc = self.assertRaises(ProviderConfigError, ComputeService, self.host, driver,
                                settings=settings)
        self.assertEqual(f"Invalid provider config file {path}: providers[1].inventories."
                         "additional[0].CUSTOM_FOO.total (line 11): -5 is less than the "
                         "minimum of 1", str(exc))
        self.assertFalse(os.path.exists(os.path.join(self.state_path, "nova-lite.db")))
        self.assertIsNone(driver.host)

    def test_each_pass_of_the_service_applies_the_files(self):
        self.dir.write("a.yaml", EVERY_NODE)
        settings = self.settings(provider_config_location=self.dir.path)
        service = ComputeService(self.host, loader.load_driver("fake", settings=settings),
                                 store=self.sqlite_store(), settings=settings)
        self.assertEqual((self.host,), service.run_once().audited)
        node = service.store.get_compute_node(self.host, self.host)
        self.assertIn("CUSTOM_LICENSED_DB", node.traits)
        self.assertEqual(54, node.capacity("CUSTOM_LICENSE_SEAT"))


class CliTests(CliTestCase):

    def config(self, text):
        directory = self.useFixture(ConfigDir())
        directory.write("a.yaml", text)
        return directory.write("nova-lite.conf", f"[compute]\nprovider_config_location = "
                                                 f"{directory.path}\n")

    def test_compute_refuses_to_start_naming_the_file_and_the_place(self):
        conf_file = self.config(document(provider("name: n1", {"CUSTOM_A": {"total": 0}})))
        code, out, err = self.cli("--config-file", conf_file, "compute", "--once",
                                  "--host", self.host)
        self.assertEqual(1, code)
        self.assertIn(os.path.join(os.path.dirname(conf_file), "a.yaml") + ": providers[0]."
                      "inventories.additional[0].CUSTOM_A.total (line 7): 0 is less than the "
                      "minimum of 1", err)

    def test_compute_once_shows_the_added_class(self):
        conf_file = self.config(EVERY_NODE)
        report = self.json("--config-file", conf_file, "compute", "--once",
                           "--host", self.host)
        self.assertIn("CUSTOM_LICENSE_SEAT", str(report["nodes"]))


class GuideExamplesTests(testtools.TestCase):
    """Every provider.yaml example of the operator guide loads."""

    def test_every_example_loads(self):
        with open(GUIDE_PAGE, encoding="utf-8") as handle:
            text = handle.read()
        blocks = re.findall(r"\.\. code-block:: yaml\n\n((?:   .*\n|\n)+)", text)
        self.assertGreaterEqual(len(blocks), 2)
        directory = self.useFixture(ConfigDir())
        for i, block in enumerate(blocks):
            path = directory.write(f"{i}.yaml", textwrap.dedent(block))
            self.assertTrue(pc.load_file(path), block)
            os.unlink(path)
