"""Names and uuids: checked once, before anything is written, the same on every backend.

A host, node, uuid or resource class the records cannot hold (a control
character, more characters than its column) is refused with a message
naming the field and the limit; a bad node in a driver's report fails
alone while the host's good nodes are recorded.  Each backend case runs
on a SQLite file and on PostgreSQL.
"""

import os
import uuid

import testtools

from nova_lite import conf, resources, validators
from nova_lite.compute.manager import ComputeService
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.exception import (
    InstanceNotFound, InvalidConfig, InvalidInput, InvalidType, NodeNotFound)
from nova_lite.objects import Instance, NodeResources
from nova_lite.virt import fake, loader
from tests import base
from tests.test_cli import CliTestCase

# Names no backend may record, and the words their refusal must carry.
BAD_NAMES = [
    ("a\x00b", "NUL byte"),
    ("x" * 300, "300 characters long; at most 255"),
    ("a\nb", "U+000A"),
    ("a\x1b[31mb", "U+001B"),
    ("a\u202eb", "U+202E"),       # right-to-left override
    ("a\u2028b", "U+2028"),       # line separator
]


class TestTextRules(testtools.TestCase):

    def test_refused_with_the_field_and_the_limit(self):
        for value, words in BAD_NAMES + [("", "is empty"), ("  ", "is blank"),
                                         (None, "NoneType"), (b"host", "bytes"),
                                         ("a\ud800b", "U+D800")]:
            problem = validators.text_problem(value, "host")
            self.assertIsNotNone(problem, repr(value))
            self.assertIn(words, problem)
            self.assertTrue(problem.startswith("host "), problem)
            self.assertTrue(problem.isprintable(), problem)

    def test_the_limits_are_the_columns(self):
        self.assertIsNone(validators.text_problem("x" * 255, "host"))
        self.assertIn("at most 255", validators.text_problem("x" * 256, "host"))
        self.assertIsNone(validators.text_problem("x" * 36, "uuid", validators.UUID_LENGTH))
        self.assertIn("37 characters long; at most 36",
                      validators.text_problem("x" * 37, "uuid", validators.UUID_LENGTH))

    def test_printable_names_of_any_script_are_kept(self):
        for name in ("nœud-é", "узел-1", "ノード", "rack 1 / node\u00a02", "host_1.example.org"):
            self.assertIsNone(validators.text_problem(name, "node name"), name)

    def test_empty_only_where_allowed(self):
        self.assertIsNone(validators.text_problem("", "project_id", empty=True))
        self.assertIn("blank", validators.text_problem(" ", "project_id", empty=True))

    def test_records_check_their_bounded_strings(self):
        flv = base.flavor()
        for kwargs, words in [(dict(uuid="x" * 10240), "Instance.uuid"),
                              (dict(uuid="u\n"), "Instance.uuid"),
                              (dict(uuid="u", host="h" * 256), "Instance.host"),
                              (dict(uuid="u", node="n\x1b"), "Instance.node"),
                              (dict(uuid="u", project_id="p" * 256), "Instance.project_id"),
                              (dict(uuid="u", user_id="\x00"), "Instance.user_id"),
                              (dict(uuid="u", task_state="t\r"), "Instance.task_state")]:
            exc = self.assertRaises(InvalidInput, Instance, flavor=flv, **kwargs)
            self.assertIn(words, str(exc))
        self.assertEqual(36, len(Instance(uuid=str(uuid.uuid4()), flavor=flv).uuid))
        for value in ("CUSTOM_" + "X" * 300, "CUSTOM_A\x00"):
            exc = self.assertRaises(InvalidInput, NodeResources, vcpus=1, memory_mb=1,
                                    local_gb=1, resource_class=value)
            self.assertIn("NodeResources.resource_class", str(exc))

    def test_resource_classes_fit_their_column(self):
        longest = "CUSTOM_" + "X" * 248
        self.assertEqual(longest, resources.validate_resource_class(longest))
        for call in (lambda: resources.validate_resource_class(longest + "X"),
                     lambda: resources.normalize_resource_class("gold" * 75)):
            exc = self.assertRaises(InvalidInput, call)
            self.assertIn("Resource class", str(exc))
            self.assertIn("at most 255", str(exc))

    def test_settings_host(self):
        for value, words in BAD_NAMES:
            exc = self.assertRaises(InvalidConfig, conf.Settings, host=value)
            self.assertIn("'host'", str(exc))
            self.assertIn(words, str(exc))
        self.assertLess(len(str(self.assertRaises(InvalidConfig, conf.Settings,
                                                  host="x" * 10240))), 300)

    def test_settings_host_from_a_file_names_the_option(self):
        path = os.path.join(self.useFixture(base.fixtures.TempDir()).path, "n.conf")
        with open(path, "w") as f:
            f.write("[DEFAULT]\nhost = " + "h" * 256 + "\n")
        exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
        self.assertIn("[DEFAULT] host", str(exc))
        self.assertIn("at most 255", str(exc))


class NameTests:
    """Run on each backend: ``make_store()`` opens a new store."""

    def tracker(self, nodes, store=None, host="host1"):
        settings = self.settings(reserved_host_memory_mb=0)
        driver = loader.load_driver("fake.multinode", settings=settings, nodes=nodes)
        driver.init_host(host)
        store = store if store is not None else self.make_store()
        return ResourceTracker(host, driver, store=store, settings=settings)

    def test_a_bad_node_name_fails_alone(self):
        for bad, words in BAD_NAMES:
            rt = self.tracker(["good1", bad, "good2"])
            result = rt.update_available_resource()
            self.assertEqual(("good1", "good2"), result.audited, repr(bad))
            self.assertEqual([validators.printable(bad)], list(result.failed))
            self.assertIn(words, result.failed[validators.printable(bad)])
            self.assertEqual(["good1", "good2"],
                             [n.nodename for n in rt.store.get_compute_nodes()])

    def test_a_bad_resource_class_in_a_report_fails_alone(self):
        # A legacy dict report is normalised by the core, not by the record.
        rt = self.tracker(["good1", "bad", "good2"], host="host2")
        report = rt.driver.get_available_resource("bad").to_dict()
        report["resource_class"] = "gold" * 75
        rt.driver.inject_fault("bad", report=report)
        result = rt.update_available_resource()
        self.assertEqual(("good1", "good2"), result.audited)
        self.assertIn("characters long; at most 255", result.failed["bad"])
        self.assertEqual(["good1", "good2"], [n.nodename for n in rt.store.get_compute_nodes()])

    def test_the_longest_names_are_recorded(self):
        host, node = "h" * 255, "n" * 255
        rt = self.tracker([node], host=host)
        self.assertEqual((node,), rt.update_available_resource().audited)
        inst = Instance(uuid=str(uuid.uuid4()), flavor=base.flavor(), project_id="p" * 255)
        rt.instance_claim(inst, node)
        stored = rt.store.get_instance(inst.uuid)
        self.assertEqual((host, node, "p" * 255), (stored.host, stored.node, stored.project_id))

    def test_an_explicit_bad_nodename_is_refused(self):
        rt = self.tracker(["good1"])
        for bad, words in BAD_NAMES:
            exc = self.assertRaises(InvalidInput, rt.update_available_resource, bad)
            self.assertTrue(str(exc).startswith("Cannot audit: nodename "), str(exc))
            self.assertIn(words, str(exc))
        self.assertEqual([], rt.store.get_compute_nodes())

    def test_a_bad_host_writes_nothing(self):
        store = self.make_store()
        driver = fake.FakeDriver(settings=self.settings())
        for bad, words in BAD_NAMES:
            driver.host = None
            for build in (ResourceTracker, ComputeService):
                exc = self.assertRaises(InvalidInput, build, bad, driver, store=store)
                self.assertIn(f"{build.__name__} host", str(exc))
                self.assertIn(words, str(exc))
            self.assertIsNone(driver.host, "init_host ran")
            exc = self.assertRaises(InvalidInput, store.heartbeat, bad)
            self.assertIn(words, str(exc))
        self.assertEqual([], store.list_services())
        self.assertEqual([], store.get_compute_nodes())

    def test_store_lookups_answer_the_same_on_every_backend(self):
        store = self.make_store()
        # A NUL byte: PostgreSQL refuses it in a query, no record holds one.
        for call, words in [(lambda: store.get_compute_node("host1", "a\x00b"), "nodename"),
                            (lambda: store.get_compute_nodes("h\x00"), "host"),
                            (lambda: store.get_instance("u\x00"), "instance_uuid"),
                            (lambda: store.list_instances(node="n\x00"), "node"),
                            (lambda: store.delete_compute_node("host1", "a\x00"), "nodename")]:
            exc = self.assertRaises(InvalidInput, call)
            self.assertIn(f"{words} ", str(exc))
            self.assertIn("NUL byte", str(exc))
        # Anything else is looked up, and not found.
        self.assertRaises(NodeNotFound, store.get_compute_node, "host1", "n" * 300)
        self.assertRaises(InstanceNotFound, store.get_instance, "x" * 10240)
        self.assertEqual([], store.get_compute_nodes("h" * 256))
        self.assertEqual([], store.list_allocations(node_uuid="n" * 37))
        self.assertIn("str", str(self.assertRaises(InvalidType, store.get_instance, None)))

    def test_a_disabled_reason_fits_its_column(self):
        store = self.make_store()
        store.heartbeat("host1")
        for reason, words in BAD_NAMES:
            exc = self.assertRaises(InvalidInput, store.set_service_disabled, "host1", True,
                                    reason)
            self.assertIn("disabled reason", str(exc))
            self.assertIn(words, str(exc))
        self.assertEqual([False], [s.disabled for s in store.list_services()])
        store.set_service_disabled("host1", True, "r" * 255)
        self.assertEqual([True], [s.disabled for s in store.list_services()])

    def test_a_nul_byte_in_a_driver_error_fails_the_node_alone(self):
        rt = self.tracker(["good1", "bad", "good2"])
        rt.update_available_resource()
        rt.driver.inject_fault("bad", exception=RuntimeError("hypervisor said a\x00b"))
        result = rt.update_available_resource()
        self.assertEqual(("good1", "good2"), result.audited)
        self.assertEqual("RuntimeError: hypervisor said a\\x00b",
                         rt.store.get_compute_node("host1", "bad").last_error)


class TestNamesSQLite(base.OnSQLiteFile, NameTests, base.TestCase):
    pass


class TestNamesPostgreSQL(base.OnPostgreSQL, NameTests, base.TestCase):
    pass


class TestCommandLineNames(CliTestCase):

    def check_refused(self, *global_args):
        for host, words in [("x" * 10240, "10240 characters long; at most 255"),
                            ("a\nb", "U+000A"), ("a\x1b[31mb", "U+001B")]:
            code, _, err = self.cli(*global_args, "compute", "--once", "--host", host)
            self.assertEqual(2, code, err)
            self.assertIn("--host", err)
            self.assertIn(words, err)

    def test_sqlite_bad_host_leaves_no_database(self):
        self.check_refused()
        self.assertFalse(os.path.exists(self.db_path()))

    def test_postgresql_bad_host_leaves_no_row(self):
        from nova_lite.db import Store
        from nova_lite.testing import databases
        databases.use_postgresql(self)
        url = self.useFixture(databases.PostgreSQLSchema()).url
        store = Store(url)
        self.addCleanup(store.close)
        self.check_refused("--database-url", url)
        self.assertEqual([], store.list_services())

    def test_a_disabled_reason_that_does_not_fit_is_bad_arguments(self):
        self.ok("compute", "--once", "--host", self.host)
        for reason, words in [("r" * 256, "at most 255"), ("a\x1b[2Jb", "U+001B")]:
            code, _, err = self.cli("service", "disable", self.host, "--reason", reason)
            self.assertEqual(2, code, err)
            self.assertIn("--reason", err)
            self.assertIn(words, err)
        self.assertEqual(["enabled"], [row["Status"] for row in self.json("service", "list")])
