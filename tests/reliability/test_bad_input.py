"""A table of bad inputs: each gets a clear error naming what was wrong, and
the store does not change (a full dump of every table, before and after).

Rows run against one SQLite file holding a host with two nodes, a claimed
instance and a resize in progress.  Kinds of rows:

- ``raises``: the call raises the given error whose message holds every
  given word; the store is byte-for-byte unchanged;
- ``report``: a node's driver returns the given report; the audit skips
  that node with a reason holding every word, marks it (``last_error``, the
  only column that may change) and keeps its last good inventory;
- ``cli``: ``nova-lite`` exits with the given status and says the words on
  stderr (or stdout).

One test per row (``test_<kind>_<name>``), so a failure names the input.
"""

import contextlib
import io
import math
import os
import textwrap
import uuid

import attrs
import fixtures
from hypothesis import HealthCheck, given, settings, strategies as st

from nova_lite import conf, hardware, objects
from nova_lite.cli.main import main as cli_main
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import (
    InstanceNotFound, InvalidConfig, InvalidCPUSpec, InvalidInput, NodeNotFound, StoreError)
from nova_lite.objects import Flavor, Instance
from nova_lite.testing import components
from nova_lite.virt import loader
from tests.reliability import base

HOST = "bad-host"
#: Columns that move with a node's last error: recording it moves the
#: node's change sequence and described_seq (so the fleet's readers see
#: it) and, on SQLite, the counter they take their values from.
_SEQUENCE = ("compute_nodes.change_seq", "compute_nodes.described_seq",
             "change_counter.value")
#: What a bad report may change: the node's mark, when it was written, and
#: the sequence with them; nothing else.
_MARKED = ("compute_nodes.last_error", "compute_nodes.updated_at", *_SEQUENCE)
_ERROR_MARKED = ("compute_nodes.last_error", *_SEQUENCE)
SMALL = Flavor(name="small", vcpus=1, memory_mb=512, root_gb=1)
BIG = Flavor(name="big", vcpus=2, memory_mb=1024, root_gb=2)


def _ghost(**kw):
    return Instance(uuid=str(uuid.uuid4()), flavor=SMALL, **kw)


def _flavor(**kw):
    return lambda t: Flavor(**dict(dict(name="f", vcpus=1, memory_mb=512), **kw))


def _settings(**kw):
    return lambda t: conf.Settings(state_path=t.tmp, **kw)


def _ini(text):
    def load(t):
        path = os.path.join(t.tmp, "bad.conf")
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))
        return conf.load_settings(path)
    return load


def _claim(inst_factory, node="n0", limits=None):
    return lambda t: t.rt.instance_claim(inst_factory(t), node, limits=limits)


#: (name, callable(test), error class, words the message must hold)
RAISES = [
    # CPU specs.
    ("cpu_spec_open_range", lambda t: hardware.parse_cpu_spec("0-"), InvalidCPUSpec,
     ['"0-"', "bad item"]),
    ("cpu_spec_letters", lambda t: hardware.parse_cpu_spec("0-3,a"), InvalidCPUSpec,
     ['"a"', '"0-3,a"']),
    ("cpu_spec_reversed_range", lambda t: hardware.parse_cpu_spec("7-2"), InvalidCPUSpec,
     ["7-2", "greater than end"]),
    ("cpu_spec_lone_caret", lambda t: hardware.parse_cpu_spec("1,^"), InvalidCPUSpec,
     ['"^"']),
    ("cpu_spec_negative", lambda t: hardware.parse_cpu_spec("-1"), InvalidCPUSpec, ['"-1"']),
    ("cpu_spec_double_range", lambda t: hardware.parse_cpu_spec("1-2-3"), InvalidCPUSpec,
     ['"1-2-3"']),
    ("cpu_spec_huge", lambda t: hardware.parse_cpu_spec("0-99999999"), InvalidCPUSpec,
     ["99999999", "maximum"]),
    ("cpu_spec_semicolon", lambda t: hardware.parse_cpu_spec("1;2"), InvalidCPUSpec,
     ['"1;2"']),
    ("cpu_spec_not_text", lambda t: hardware.parse_cpu_spec(3), InvalidCPUSpec,
     ["3", "expected a string"]),
    # Configuration values.
    ("conf_cpu_set_malformed", _settings(cpu_dedicated_set="4-x"), InvalidConfig,
     ["cpu_dedicated_set", "4-x"]),
    ("conf_cpu_set_empty", _settings(cpu_shared_set="1,^1"), InvalidConfig,
     ["cpu_shared_set", "leaves no CPUs"]),
    ("conf_cpu_sets_overlap", _settings(cpu_shared_set="0-3", cpu_dedicated_set="2-5"),
     InvalidConfig, ["cpu_dedicated_set", "overlaps", "[2, 3]"]),
    ("conf_pin_set_with_new_sets", _settings(vcpu_pin_set="0-3", cpu_dedicated_set="4-5"),
     InvalidConfig, ["vcpu_pin_set", "cannot be combined"]),
    ("conf_negative_reserved", _settings(reserved_host_memory_mb=-1), InvalidConfig,
     ["reserved_host_memory_mb", "-1"]),
    ("conf_reserved_not_int", _settings(reserved_host_cpus="two"), InvalidConfig,
     ["reserved_host_cpus", "'two'", "integer"]),
    ("conf_huge_ratio", _settings(cpu_allocation_ratio=1e300), InvalidConfig,
     ["cpu_allocation_ratio", "1e+300", "at most 10000"]),
    ("conf_nan_ratio", _settings(ram_allocation_ratio=math.nan), InvalidConfig,
     ["ram_allocation_ratio", "nan"]),
    ("conf_infinite_ratio", _settings(initial_disk_allocation_ratio=math.inf), InvalidConfig,
     ["initial_disk_allocation_ratio", "inf"]),
    ("conf_zero_interval", _settings(update_resources_interval=0), InvalidConfig,
     ["update_resources_interval", "0"]),
    ("conf_zero_driver_timeout", _settings(driver_timeout=-5), InvalidConfig,
     ["driver_timeout", "-5"]),
    ("conf_zero_retries", _settings(claim_retries=0), InvalidConfig, ["claim_retries", "0"]),
    ("conf_blank_host", _settings(host="  "), InvalidConfig, ["host"]),
    ("ini_not_a_number", _ini("[DEFAULT]\nreserved_host_memory_mb = lots\n"), InvalidConfig,
     ["[DEFAULT] reserved_host_memory_mb", "lots"]),
    ("ini_negative_ratio", _ini("[DEFAULT]\ncpu_allocation_ratio = -2\n"), InvalidConfig,
     ["[DEFAULT] cpu_allocation_ratio", "-2"]),
    ("ini_unknown_option", _ini("[compute]\ncpu_shard_set = 0-3\n"), InvalidConfig,
     ["[compute] cpu_shard_set", "unknown option"]),
    ("ini_bad_cpu_set", _ini("[compute]\ncpu_dedicated_set = 0-3,x\n"), InvalidConfig,
     ["[compute] cpu_dedicated_set", "0-3,x"]),
    ("ini_not_ini", _ini("this is not an ini file\n"), InvalidConfig,
     ["bad.conf", "not valid INI"]),
    ("ini_missing_file", lambda t: conf.load_settings(os.path.join(t.tmp, "absent.conf")),
     InvalidConfig, ["absent.conf", "cannot be read"]),
    # Absurd flavors.
    ("flavor_zero_vcpus", _flavor(vcpus=0), InvalidInput, ["Flavor.vcpus", "0"]),
    ("flavor_negative_memory", _flavor(memory_mb=-512), InvalidInput,
     ["Flavor.memory_mb", "-512"]),
    ("flavor_negative_disk", _flavor(root_gb=-1), InvalidInput, ["Flavor.root_gb", "-1"]),
    ("flavor_huge_disk", _flavor(root_gb=2 ** 60), InvalidInput,
     ["Flavor.root_gb", "absurdly large"]),
    ("flavor_text_vcpus", _flavor(vcpus="2"), InvalidInput, ["Flavor.vcpus", "'2'"]),
    ("flavor_float_memory", _flavor(memory_mb=512.5), InvalidInput,
     ["Flavor.memory_mb", "512.5"]),
    ("flavor_bool_swap", _flavor(swap=True), InvalidInput, ["Flavor.swap", "True"]),
    ("flavor_blank_name", _flavor(name=""), InvalidInput, ["Flavor.name"]),
    ("flavor_huge_but_valid", _claim(lambda t: Instance(
        uuid=str(uuid.uuid4()), flavor=Flavor(name="huge", vcpus=10 ** 6, memory_mb=10 ** 9,
                                              root_gb=10 ** 7))),
     ComputeResourcesUnavailable, ["Free memory", "Free disk", "Free vcpu", "; "]),
    ("flavor_negative_resource_override", _claim(lambda t: Instance(
        uuid=str(uuid.uuid4()), flavor=attrs.evolve(SMALL, extra_specs={
            "resources:VCPU": "-1"}))), InvalidInput, ["resources:VCPU", "-1", "negative"]),
    ("flavor_text_resource_override", _claim(lambda t: Instance(
        uuid=str(uuid.uuid4()), flavor=attrs.evolve(SMALL, extra_specs={
            "resources:VCPU": "many"}))), InvalidInput, ["resources:VCPU", "many"]),
    ("flavor_unknown_resource_class", _claim(lambda t: Instance(
        uuid=str(uuid.uuid4()), flavor=attrs.evolve(SMALL, extra_specs={
            "resources:GOLD": "1"}))), InvalidInput, ["GOLD", "resource class"]),
    ("limits_not_a_number", _claim(lambda t: _ghost(), limits={"memory_mb": "lots"}),
     InvalidInput, ["memory_mb", "lots"]),
    ("limits_nan", _claim(lambda t: _ghost(), limits={"vcpu": math.nan}), InvalidInput,
     ["vcpu", "nan"]),
    # Unknown nodes and instances, and instances in the wrong state.
    ("claim_unknown_node", _claim(lambda t: _ghost(), node="nowhere"), NodeNotFound,
     ["'nowhere'", HOST]),
    ("resize_to_unknown_node", lambda t: t.rt.resize_claim(t.active, BIG, "nowhere"),
     NodeNotFound, ["'nowhere'"]),
    ("show_unknown_node", lambda t: t.rt.get_node("nowhere"), NodeNotFound, ["'nowhere'"]),
    ("store_unknown_node", lambda t: t.store.get_compute_node(HOST, "nowhere"),
     NodeNotFound, ["'nowhere'"]),
    ("delete_unknown_node_record", lambda t: t.store.delete_compute_node(HOST, "nowhere"),
     NodeNotFound, ["'nowhere'"]),
    ("delete_unknown_instance", lambda t: t.rt.update_usage(_ghost(vm_state="deleted")),
     InstanceNotFound, ["not found"]),
    ("update_unknown_instance", lambda t: t.rt.update_usage(_ghost(vm_state="active")),
     InstanceNotFound, ["not found"]),
    ("abort_unknown_instance", lambda t: t.rt.abort_instance_claim(_ghost(), "n0"),
     InstanceNotFound, ["not found"]),
    ("resize_unknown_instance", lambda t: t.rt.resize_claim(_ghost(host=HOST, node="n0"),
                                                           BIG, "n1"),
     InstanceNotFound, ["not found"]),
    ("resize_twice", lambda t: t.rt.resize_claim(t.moving, BIG, "n0"), InvalidInput,
     ["already has migration", "in progress"]),
    ("resize_deleted_instance", lambda t: t.rt.resize_claim(t.deleted, BIG, "n0"),
     InvalidInput, ["deleted", "nothing to move"]),
    ("claim_instance_twice_elsewhere", lambda t: t.rt.instance_claim(t.active, "n1"),
     InvalidInput, ["already holds a claim", f"{HOST}/n0"]),
    ("claim_instance_twice_same_node", lambda t: t.rt.instance_claim(t.active, "n0"),
     InvalidInput, ["already holds a claim", f"{HOST}/n0"]),
    ("confirm_without_migration", lambda t: t.rt.drop_move_claim(t.active, "n0", SMALL),
     InstanceNotFound, ["migration in progress"]),
    ("confirm_unknown_instance", lambda t: t.rt.drop_move_claim(_ghost(), "n0", SMALL),
     InstanceNotFound, ["migration in progress"]),
    ("revert_with_wrong_flavor", lambda t: t.rt.drop_move_claim(t.moving, "n1", SMALL),
     InstanceNotFound, ["holding flavor 'small'", "'n1'"]),
    ("drop_on_unknown_node", lambda t: t.rt.drop_move_claim(t.moving, "nowhere", BIG),
     NodeNotFound, ["'nowhere'"]),
    ("not_an_instance", lambda t: t.rt.instance_claim({"uuid": "x"}, "n0"), InvalidInput,
     ["Instance", "dict"]),
    ("instance_bad_state", lambda t: _ghost(vm_state="exploded"), InvalidInput,
     ["vm_state", "exploded"]),
    ("new_flavor_not_a_flavor", lambda t: t.rt.resize_claim(t.active, "m1.big", "n1"),
     InvalidInput, ["new_flavor", "m1.big"]),
    ("store_bad_url", lambda t: Store("nosuchdb://x"), StoreError, ["nosuchdb"]),
]


def _report(**changes):
    """A legacy report dict of a good node with ``changes`` (None deletes a key)."""
    def build(t):
        good = t.driver.get_available_resource("n1").to_dict()
        for key, value in changes.items():
            if value is _DELETE:
                good.pop(key, None)
            else:
                good[key] = value
        return good
    return build


_DELETE = object()

#: (name, report factory(test), words the reason must hold)
REPORTS = [
    ("missing_keys", _report(vcpus=_DELETE, memory_mb=_DELETE),
     ["missing key 'vcpus'", "missing key 'memory_mb'", "'n1'"]),
    ("empty_dict", lambda t: {}, ["missing key 'vcpus'", "missing key 'local_gb'"]),
    ("wrong_type_text", _report(vcpus="eight"), ["'vcpus'", "integer", "'eight'"]),
    ("wrong_type_list", _report(local_gb=[1, 2]), ["'local_gb'", "integer"]),
    ("wrong_type_bool", _report(memory_mb=True), ["'memory_mb'", "integer"]),
    ("negative_total", _report(memory_mb=-1024), ["'memory_mb'", ">= 0", "-1024"]),
    ("negative_vcpus", _report(vcpus=-3), ["'vcpus'", "-3"]),
    ("nan", _report(local_gb=math.nan), ["'local_gb'", "nan"]),
    ("infinity", _report(vcpus=math.inf), ["'vcpus'", "inf"]),
    ("fractional", _report(vcpus="2.5"), ["'vcpus'", "2.5"]),
    ("absurdly_large", _report(memory_mb=2 ** 80), ["'memory_mb'", "absurdly large"]),
    ("driver_reserved_over_total", _report(reserved={"VCPU": 10 ** 6}),
     ["reserved", "VCPU", "1000000", "total"]),
    ("driver_reserved_negative", _report(reserved={"MEMORY_MB": -1}),
     ["reserved", "MEMORY_MB", "-1"]),
    ("cpu_info_not_json", _report(cpu_info="{not json"), ["'cpu_info'", "not valid JSON"]),
    ("numa_malformed", _report(numa_topology={"cells": [{"id": "zero"}]}),
     ["'numa_topology'", "malformed"]),
    ("pci_malformed", _report(pci_passthrough_devices=[{"address": "0000:00:01.0"}]),
     ["'pci_passthrough_devices'", "malformed"]),
    ("not_a_dict", lambda t: ["vcpus", 8], ["list", "not NodeResources", "'n1'"]),
    ("not_a_report", lambda t: "all good", ["str", "not NodeResources", "'n1'"]),
]


class _Table(base.SQLiteBackend, base.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.settings = conf.Settings(host=HOST, state_path=self.tmp)   # 512 MB reserved
        self.url = self.database_url()
        self.store = Store(self.url)
        self.addCleanup(self.store.close)
        self.driver = loader.load_driver("fake.multinode", settings=self.settings,
                                         nodes=["n0", "n1"], vcpus=8, memory_mb=8192,
                                         local_gb=100)
        self.driver.init_host(HOST)
        self.rt = ResourceTracker(HOST, self.driver, store=self.store, settings=self.settings)
        self.rt.update_available_resource()
        self.active = attrs.evolve(self.rt.instance_claim(_ghost(), "n0").instance,
                                   vm_state="active")
        self.rt.update_usage(self.active)
        self.moving = self.rt.instance_claim(_ghost(), "n0").instance
        self.rt.resize_claim(self.moving, BIG, "n1")
        self.deleted = self.rt.instance_claim(_ghost(), "n1").instance
        self.rt.update_usage(attrs.evolve(self.deleted, vm_state="deleted"))
        self.deleted = self.store.get_instance(self.deleted.uuid)
        self.before = base.dump(self.store)
        self.views = {n: self.rt.get_node(n) for n in ("n0", "n1")}


def _raises_test(row):
    name, call, error, words = row

    def test(self):
        exc = self.assertRaises(error, call, self)
        for word in words:
            self.assertIn(word, str(exc))
        self.assertDumpEqual(self.before, base.dump(self.store))
        self.assertEqual(self.views, {n: self.rt.get_node(n) for n in ("n0", "n1")})
        self.assertNoRecordProblems(self.store)
    test.__name__ = f"test_raises_{name}"
    return test


def _report_test(row):
    name, report, words = row

    def test(self):
        before = base.dump(self.store, exclude=_MARKED)
        self.driver.inject_fault("n1", report=report(self))
        result = self.rt.update_available_resource()
        self.assertEqual(("n0",), result.audited)
        reason = result.failed["n1"]
        for word in words:
            self.assertIn(word, reason)
        self.assertEqual(reason, self.store.get_compute_node(HOST, "n1").last_error)
        self.assertDumpEqual(before, base.dump(self.store, exclude=_MARKED))
        self.assertEqual(self.views["n1"].inventories, self.rt.get_node("n1").inventories)
        # The next good report clears the mark (and only that).
        self.driver.clear_faults()
        self.rt.update_available_resource()
        self.assertIsNone(self.store.get_compute_node(HOST, "n1").last_error)
        self.assertDumpEqual(before, base.dump(self.store, exclude=_MARKED))
    test.__name__ = f"test_report_{name}"
    return test


_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)
_REPORT_KEYS = sorted(objects.NodeResources(vcpus=1, memory_mb=1, local_gb=1).to_dict())


class TestBadInput(_Table):
    """Every row of RAISES and REPORTS (methods added below), and random junk."""

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(changes=st.dictionaries(st.sampled_from(_REPORT_KEYS), _JUNK, min_size=1,
                                   max_size=3))
    def test_random_junk_in_a_report(self, changes):
        """Reports we did not think of: the audit records them only if they
        are valid, else names a key it could not read; nothing else changes."""
        report = self.driver.get_available_resource("n1").to_dict()
        report.update(changes)
        self.driver.inject_fault("n1", report=report)
        before = base.dump(self.store, exclude=_MARKED)
        result = self.rt.update_available_resource()
        if "n1" in result.failed:
            reason = result.failed["n1"]
            self.assertTrue(reason.startswith(("InvalidNodeResources", "InvalidInput")), reason)
            self.assertTrue(any(repr(k) in reason or k in reason for k in changes),
                            (reason, changes))
            self.assertDumpEqual(before, base.dump(self.store, exclude=_MARKED))
        self.assertNoRecordProblems(self.store)
        self.driver.clear_faults()
        self.rt.update_available_resource()

    def test_unknown_node_audit(self):
        result = self.rt.update_available_resource(nodename="nowhere")
        self.assertEqual((), result.audited)
        self.assertIn("'nowhere'", result.failed["nowhere"])
        self.assertDumpEqual(self.before, base.dump(self.store))


for _row in RAISES:
    setattr(TestBadInput, f"test_raises_{_row[0]}", _raises_test(_row))
for _row in REPORTS:
    setattr(TestBadInput, f"test_report_{_row[0]}", _report_test(_row))


#: (name, argv after the global options, exit status, words)
CLI = [
    ("no_command", [], 2, ["a command is required"]),
    ("unknown_command", ["explode"], 2, ["explode"]),
    ("unknown_option", ["node", "list", "--colour"], 2, ["--colour"]),
    ("missing_argument", ["node", "show"], 2, ["NODE"]),
    ("unknown_node", ["node", "show", "nowhere"], 1, ["'nowhere'", "not found", "n0"]),
    ("delete_without_confirmation", ["node", "delete", "n0"], 2,
     ["Refusing to delete", "--yes-i-really-mean-it", "nothing was changed"]),
    ("unknown_driver", ["audit", "--local", "--driver", "no-such-driver", "--host", HOST], 1,
     ["no-such-driver"]),
    ("bad_format", ["node", "list", "-f", "xml"], 2, ["xml"]),
    ("option_without_value", ["compute", "--once", "--host"], 2, ["--host"]),
]

CLI_GLOBAL = [
    ("empty_database_url", ["--database-url", "", "node", "list"], 2,
     ["--database-url must not be empty"]),
    ("missing_config_file", ["--config-file", "/nonexistent/nova-lite.conf", "node", "list"],
     1, ["/nonexistent/nova-lite.conf", "cannot be read"]),
    ("bad_config_value", ["--config-file", "{bad_conf}", "node", "list"], 1,
     ["[DEFAULT] reserved_host_memory_mb", "lots"]),
    ("empty_state_path", ["--state-path", "", "node", "list"], 2,
     ["--state-path must not be empty"]),
]


def _cli_test(row, global_row=False):
    name, argv, status, words = row

    def test(self):
        bad_conf = os.path.join(self.tmp, "bad.conf")
        with open(bad_conf, "w", encoding="utf-8") as f:
            f.write("[DEFAULT]\nreserved_host_memory_mb = lots\n")
        args = [a.replace("{bad_conf}", bad_conf) for a in argv]
        if not global_row:
            args = ["--database-url", self.url] + args
        out, err = io.StringIO(), io.StringIO()
        self.useFixture(fixtures.EnvironmentVariable("NOVA_LITE_STATE_PATH", self.tmp))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(args)
        said = out.getvalue() + err.getvalue()
        self.assertEqual(status, code, said)
        for word in words:
            self.assertIn(word, said)
        self.assertNotIn("Traceback", said)
        self.assertDumpEqual(self.before, base.dump(self.store))
    test.__name__ = f"test_cli_{name}"
    return test


class TestBadCommandLine(_Table):
    """``nova-lite`` with bad arguments (methods added below)."""


for _row in CLI:
    setattr(TestBadCommandLine, f"test_cli_{_row[0]}", _cli_test(_row))
for _row in CLI_GLOBAL:
    setattr(TestBadCommandLine, f"test_cli_{_row[0]}", _cli_test(_row, global_row=True))


class TestBrokenLibvirtXML(base.SQLiteBackend, base.TestCase):
    """A libvirt host whose capabilities XML is broken: the audit skips it
    with a reason naming the XML, and keeps its last good record."""

    BROKEN = [
        ("not_well_formed", "<capabilities><host><cpu><arch>x86_64</arch>",
         ["capabilities XML does not parse"]),
        ("wrong_root", "<domain type='kvm'/>", ["expected <capabilities>", "<domain>"]),
        ("empty", "", ["capabilities XML does not parse"]),
        ("bad_cell_memory", "<capabilities><host><cpu><arch>x86_64</arch></cpu><topology>"
         "<cells num='1'><cell id='0'><memory unit='KiB'>lots</memory></cell></cells>"
         "</topology></host></capabilities>", ["lots"]),
    ]

    def setUp(self):
        super().setUp()
        try:
            from nova_lite_libvirt.testing.fixture import FakeLibvirtFixture
        except ImportError as exc:
            components.require(self, "libvirt", f"nova-lite-libvirt is not installed: {exc}")
        self.fake = self.useFixture(FakeLibvirtFixture())
        settings = conf.Settings(host=HOST, state_path=self.useFixture(
            fixtures.TempDir()).path, reserved_host_memory_mb=0)
        self.store = Store(self.database_url())
        self.addCleanup(self.store.close)
        self.driver = loader.load_driver("libvirt", settings=settings)
        self.driver.init_host(HOST)
        self.rt = ResourceTracker(HOST, self.driver, store=self.store, settings=settings)
        self.node = self.driver.get_available_nodes()[0]
        self.assertEqual((self.node,), self.rt.update_available_resource().audited)
        self.before = base.dump(self.store)

    def _break(self, text):
        # The fake host answers getCapabilities() with this text from now on.
        self.fake.hypervisor.capabilities = lambda: text


def _libvirt_test(row):
    name, text, words = row

    def test(self):
        before = base.dump(self.store, exclude=_ERROR_MARKED)
        self._break(text)
        result = self.rt.update_available_resource()
        self.assertEqual((), result.audited)
        reason = result.failed[self.node]
        for word in words:
            self.assertIn(word, reason)
        self.assertEqual(reason, self.store.get_compute_node(HOST, self.node).last_error)
        self.assertDumpEqual(before, base.dump(self.store, exclude=_ERROR_MARKED))
    return test


for _row in TestBrokenLibvirtXML.BROKEN:
    setattr(TestBrokenLibvirtXML, f"test_xml_{_row[0]}", _libvirt_test(_row))
