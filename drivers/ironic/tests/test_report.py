"""A node's record: Nova's Ironic cases, through the driver's public names."""

from nova_lite.objects import NodeResources, SupportedInstance

from nova_lite_ironic import node as nodes
from nova_lite_ironic import report
from nova_lite_ironic.exception import NodeConfigurationError

from tests import base


class TestNodeResources(base.TestCase):

    def test_fields_and_zero_cpu_ram_disk(self):
        node = base.bm_node(resource_class="baremetal")
        res = report.node_resources(node)
        self.assertIsInstance(res, NodeResources)
        self.assertEqual((0, 0, 0), (res.vcpus, res.memory_mb, res.local_gb))
        self.assertEqual((0, 0, 0), (res.vcpus_used, res.memory_mb_used, res.local_gb_used))
        self.assertEqual(0, res.disk_available_least)
        self.assertEqual(node.uuid, res.hypervisor_hostname)
        self.assertEqual(node.uuid, res.uuid)
        self.assertEqual("ironic", res.hypervisor_type)
        self.assertEqual(1, res.hypervisor_version)
        self.assertIsNone(res.cpu_info)
        self.assertIsNone(res.numa_topology)
        self.assertEqual((), res.pci_devices)
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, res.totals())
        self.assertEqual({}, dict(res.reserved))

    def test_dict_keys_are_the_core_schema(self):
        res = report.node_resources(base.bm_node())
        legacy = res.to_dict()
        self.assertEqual(res, NodeResources.from_dict(legacy))
        for key in ("vcpus", "memory_mb", "local_gb"):
            self.assertEqual(0, legacy[key])
        self.assertEqual("CUSTOM_BAREMETAL", legacy["resource_class"])

    def test_resource_class_is_normalised(self):
        res = report.node_resources(base.bm_node(resource_class="iron-nfv"))
        self.assertEqual("CUSTOM_IRON_NFV", res.resource_class)
        self.assertEqual({"CUSTOM_IRON_NFV": 1}, res.totals())

    def test_names_are_normalised_exactly_as_nova_does(self):
        # Nova's ironic driver: a run of non-alphanumerics is one "_", upper
        # case comes after (bug 1762789), and the prefix is always added.
        for raw, name in [("gpu_a100 (8x)", "CUSTOM_GPU_A100_8X_"),
                          ("baremetal", "CUSTOM_BAREMETAL"),
                          ("Gold.Large--2", "CUSTOM_GOLD_LARGE_2"),
                          ("CUSTOM_GOLD", "CUSTOM_CUSTOM_GOLD")]:
            res = report.node_resources(base.bm_node(resource_class=raw))
            self.assertEqual(name, res.resource_class, raw)

    def test_missing_resource_class_is_an_error_naming_the_node(self):
        node = base.bm_node(resource_class=None)
        err = self.assertRaises(NodeConfigurationError, report.node_resources, node)
        self.assertIn(node.uuid, str(err))
        self.assertIn("resource_class", str(err))
        self.assertRaises(NodeConfigurationError, report.node_resources,
                          base.bm_node(resource_class="  "))

    def test_supported_instances_x86_64(self):
        res = report.node_resources(base.bm_node(properties={"cpu_arch": "x86_64"}))
        self.assertEqual((SupportedInstance("x86_64", "baremetal", "hvm"),),
                         res.supported_instances)
        self.assertEqual("x86_64", res.stats["cpu_arch"])

    def test_i386_gives_i686(self):
        res = report.node_resources(base.bm_node(properties={"cpu_arch": "i386"}))
        self.assertEqual((SupportedInstance("i686", "baremetal", "hvm"),),
                         res.supported_instances)
        # stats keep the raw arch: flavors' extra specs match it as written
        self.assertEqual("i386", res.stats["cpu_arch"])

    def test_arch_aliases(self):
        self.assertEqual("x86_64", report.canonical_arch("AMD64"))
        self.assertEqual("i686", report.canonical_arch("i586"))
        self.assertEqual("aarch64", report.canonical_arch("aarch64"))

    def test_unknown_or_missing_arch_gives_no_instances(self):
        for props in ({}, {"cpu_arch": None}, {"cpu_arch": ""}, {"cpu_arch": "z80"}):
            res = report.node_resources(base.bm_node(properties=props))
            self.assertEqual((), res.supported_instances, props)
        self.assertNotIn("cpu_arch", report.node_resources(base.bm_node(properties={})).stats)
        self.assertIn("unknown cpu_arch 'z80'", self.log.output)

    def test_capabilities_into_stats(self):
        res = report.node_resources(base.bm_node(properties={
            "cpu_arch": "x86_64", "capabilities": "boot_mode:uefi, raid_level:1,secure_boot:true"}))
        self.assertEqual({"cpu_arch": "x86_64", "boot_mode": "uefi", "raid_level": "1",
                          "secure_boot": "true"}, dict(res.stats))

    def test_malformed_capabilities_skipped_with_warning(self):
        node = base.bm_node(properties={
            "capabilities": "test:capability:1,:no_key,no_val:,no_colon,good:yes,"})
        res = report.node_resources(node)
        self.assertEqual({"good": "yes"}, dict(res.stats))
        for item in ("test:capability:1", ":no_key", "no_val:", "no_colon"):
            self.assertIn(f"Ignoring malformed capability {item!r} of node {node.uuid}",
                          self.log.output)

    def test_parse_capabilities_direct(self):
        self.assertEqual({}, report.parse_capabilities(None))
        self.assertEqual({}, report.parse_capabilities(""))
        self.assertEqual({"a": "b"}, report.parse_capabilities("a:b"))
        self.assertEqual({"a": "1"}, report.parse_capabilities({"a": 1}))


class TestReservedRules(base.TestCase):
    """The one unit is reserved exactly when the node cannot take an instance."""

    def reserved(self, **fields):
        return dict(report.node_resources(base.bm_node(**fields)).reserved)

    def test_available_node_is_free(self):
        self.assertEqual({}, self.reserved())
        self.assertEqual({}, self.reserved(power_state=nodes.POWER_ON))
        self.assertIsNone(report.unavailability(base.bm_node()))

    def test_maintenance(self):
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, self.reserved(maintenance=True))

    def test_power_error_or_none(self):
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, self.reserved(power_state="error"))
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, self.reserved(power_state=None))

    def test_provision_states_other_than_available(self):
        for state in ("active", "deploying", "wait call-back", "deploy failed", "cleaning",
                      "clean wait", "manageable", "enroll", "inspecting", "error",
                      "rescue", None):
            self.assertEqual({"CUSTOM_BAREMETAL": 1}, self.reserved(provision_state=state),
                             state)

    def test_instance_on_node(self):
        self.assertEqual({"CUSTOM_BAREMETAL": 1},
                         self.reserved(instance_uuid="5c0a4a2e-8a5b-4a53-9f1e-6d1f7e5b4c3d"))

    def test_reasons_are_named(self):
        self.assertEqual("in maintenance",
                         report.unavailability(base.bm_node(maintenance=True)))
        self.assertEqual("power state none",
                         report.unavailability(base.bm_node(power_state=None)))
        self.assertEqual("provision state active",
                         report.unavailability(base.bm_node(provision_state="active")))
