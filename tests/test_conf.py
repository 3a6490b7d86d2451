"""Settings: Nova's option names and defaults, INI loading, bad values."""

import os
import textwrap
from fractions import Fraction

import attrs
import fixtures
import testtools

from nova_lite import conf
from nova_lite.exception import InvalidConfig, InvalidInput
from tests.entry_points import ThrowawayDistributions


class TestDefaults(testtools.TestCase):

    def test_nova_defaults(self):
        s = conf.Settings()
        self.assertEqual(512, s.reserved_host_memory_mb)
        self.assertEqual(0, s.reserved_host_disk_mb)
        self.assertEqual(0, s.reserved_host_cpus)
        self.assertIsNone(s.cpu_allocation_ratio)
        self.assertIsNone(s.ram_allocation_ratio)
        self.assertIsNone(s.disk_allocation_ratio)
        self.assertEqual(4.0, s.initial_cpu_allocation_ratio)
        self.assertEqual(1.0, s.initial_ram_allocation_ratio)
        self.assertEqual(1.0, s.initial_disk_allocation_ratio)
        self.assertIsNone(s.vcpu_pin_set)
        self.assertIsNone(s.cpu_shared_set)
        self.assertIsNone(s.cpu_dedicated_set)
        self.assertGreater(s.update_resources_interval, 0)
        self.assertEqual(60, s.service_down_time)
        self.assertEqual("sqlite:///" + os.path.join(s.state_path, "nova-lite.db"),
                         s.database_url)
        self.assertEqual("qemu:///system", s.libvirt_connection_uri)

    def test_effective_ratios(self):
        s = conf.Settings()
        self.assertEqual(Fraction(4), s.allocation_ratio("cpu"))
        self.assertEqual(Fraction(1), s.allocation_ratio("ram"))
        s = conf.Settings(cpu_allocation_ratio=0.7, initial_cpu_allocation_ratio=16.0)
        self.assertEqual(Fraction(7, 10), s.allocation_ratio("cpu"))
        s = conf.Settings(initial_ram_allocation_ratio=1.5)
        self.assertEqual(Fraction(3, 2), s.allocation_ratio("ram"))

    def test_no_global_mutable_config(self):
        a = conf.Settings(reserved_host_memory_mb=0)
        b = conf.Settings()
        self.assertEqual(512, b.reserved_host_memory_mb)
        self.assertRaises(attrs.exceptions.FrozenInstanceError, setattr, a,
                          "reserved_host_memory_mb", 1)
        self.assertEqual(1, attrs.evolve(a, reserved_host_memory_mb=1).reserved_host_memory_mb)

    def test_state_path_derives_paths(self):
        s = conf.Settings(state_path="/srv/nl")
        self.assertEqual("sqlite:////srv/nl/nova-lite.db", s.database_url)
        self.assertEqual("/srv/nl/instances", s.instances_path)

    def test_redacted_url(self):
        s = conf.Settings(database_url="postgresql://nova:s3cret@db:5432/nova")
        self.assertEqual("postgresql://nova:***@db:5432/nova", s.redacted_database_url())
        self.assertNotIn("s3cret", repr(s))

    def test_every_form_of_password_is_redacted(self):
        for url, shown in [
                ("postgresql://u:p@ss@db/nova", "postgresql://u:***@db/nova"),
                ("postgresql://u@db/nova?password=s3cret&sslmode=require",
                 "postgresql://u@db/nova?password=***&sslmode=require"),
                ("postgresql+psycopg://db/nova?user=u&PASSWORD=s3cret",
                 "postgresql+psycopg://db/nova?user=u&PASSWORD=***"),
                ("postgresql://db/nova?Password=s3cret#x", "postgresql://db/nova?Password=***#x"),
                ("POSTGRESQL://U:s3cret@DB/nova", "POSTGRESQL://U:***@DB/nova"),
                ("host=db password='s3 cret' user=u", "host=db password=*** user=u"),
                ("sqlite:////var/lib/x.db", "sqlite:////var/lib/x.db")]:
            self.assertEqual(shown, conf.redact_url(url))
            s = conf.Settings(database_url=url)
            self.assertNotIn("s3", s.redacted_database_url().replace("sqlite", ""))


class TestBadValues(testtools.TestCase):

    def test_constructor_names_option_and_value(self):
        for option, value in [("reserved_host_memory_mb", -1), ("reserved_host_memory_mb", "1"),
                              ("reserved_host_cpus", 1.5), ("reserved_host_disk_mb", True),
                              ("cpu_allocation_ratio", -1), ("ram_allocation_ratio", -2.0),
                              ("cpu_allocation_ratio", 1e300), ("ram_allocation_ratio", 10001),
                              ("disk_allocation_ratio", float("inf")),
                              ("initial_cpu_allocation_ratio", 1e300),
                              ("driver_timeout", 1e-9), ("driver_timeout", 0.05),
                              ("report_interval", 1e-9),
                              ("disk_allocation_ratio", float("nan")),
                              ("initial_cpu_allocation_ratio", None),
                              ("update_resources_interval", 0),
                              ("service_down_time", -5), ("host", ""),
                              ("vcpu_pin_set", "0-"), ("cpu_shared_set", 7)]:
            exc = self.assertRaises(InvalidConfig, conf.Settings, **{option: value})
            self.assertIsInstance(exc, InvalidInput)
            self.assertEqual(option, exc.option)
            self.assertIn(option, str(exc))
            self.assertIn(repr(value), str(exc))

    def test_cpu_options_that_leave_no_cpus(self):
        for option in ("vcpu_pin_set", "cpu_shared_set", "cpu_dedicated_set"):
            for spec in ("0-3,^0-3", "^1", "1,^1"):
                exc = self.assertRaises(InvalidConfig, conf.Settings, **{option: spec})
                self.assertEqual(option, exc.option)
                self.assertIn("no CPUs", str(exc))
                self.assertIn(spec, str(exc))

    def test_malformed_cpu_spec_quotes_the_bad_part(self):
        exc = self.assertRaises(InvalidConfig, conf.Settings, cpu_dedicated_set="0-3,x")
        self.assertIn("cpu_dedicated_set", str(exc))
        self.assertIn("x", exc.reason)

    def test_cpu_sets_must_not_overlap(self):
        exc = self.assertRaises(InvalidConfig, conf.Settings, cpu_shared_set="0-3",
                                cpu_dedicated_set="3-5")
        self.assertEqual("cpu_dedicated_set", exc.option)
        self.assertIn("[3]", str(exc))
        conf.Settings(cpu_shared_set="0-3", cpu_dedicated_set="4-7")

    def test_vcpu_pin_set_excludes_cpu_dedicated_set_only(self):
        exc = self.assertRaises(InvalidConfig, conf.Settings, vcpu_pin_set="0-3",
                                cpu_dedicated_set="4-5")
        self.assertEqual("vcpu_pin_set", exc.option)
        self.assertIn("cpu_dedicated_set", str(exc))
        # As Nova: accepted beside cpu_shared_set (the libvirt driver warns).
        s = conf.Settings(vcpu_pin_set="0-3", cpu_shared_set="0-1")
        self.assertEqual(("0-3", "0-1"), (s.vcpu_pin_set, s.cpu_shared_set))

    def test_ratio_zero_means_unset_as_in_nova(self):
        for kind in ("cpu", "ram", "disk"):
            s = conf.Settings(**{f"{kind}_allocation_ratio": 0.0})
            self.assertIsNone(getattr(s, f"{kind}_allocation_ratio"))
            self.assertEqual(s.allocation_ratio(kind),
                             conf.Settings().allocation_ratio(kind))
        self.assertEqual(10000, conf.Settings(cpu_allocation_ratio=10000).cpu_allocation_ratio)


class TestLoadSettings(testtools.TestCase):

    def write(self, text):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, "nova-lite.conf")
        with open(path, "w") as handle:
            handle.write(textwrap.dedent(text))
        return path

    def test_nova_names_and_sections(self):
        path = self.write("""
            [DEFAULT]
            host = compute7
            compute_driver = fake.multinode
            state_path = /srv/nova-lite
            reserved_host_memory_mb = 2048
            reserved_host_disk_mb = 10240
            reserved_host_cpus = 2
            cpu_allocation_ratio = 16.0
            ram_allocation_ratio = 1.5
            disk_allocation_ratio = 1.0
            initial_cpu_allocation_ratio = 8.0
            update_resources_interval = 30
            service_down_time = 120

            [compute]
            cpu_shared_set = 0-3, 8-11
            cpu_dedicated_set = 4-7,^6

            [database]
            connection = postgresql://nova:pw@db.example.org/nova

            [libvirt]
            connection_uri = qemu+ssh://root@kvm1/system
            """)
        s = conf.load_settings(path)
        # [libvirt] is the libvirt driver's section, declared by it; load_settings
        # also copies its connection to Settings.libvirt_connection_uri.
        self.assertEqual({"connection_uri": "qemu+ssh://root@kvm1/system"},
                         dict(s.section("libvirt")))
        self.assertEqual("qemu+ssh://root@kvm1/system", s.libvirt_connection_uri)
        self.assertEqual("compute7", s.host)
        self.assertEqual("fake.multinode", s.compute_driver)
        self.assertEqual(2048, s.reserved_host_memory_mb)
        self.assertEqual(10240, s.reserved_host_disk_mb)
        self.assertEqual(2, s.reserved_host_cpus)
        self.assertEqual(16.0, s.cpu_allocation_ratio)
        self.assertEqual(Fraction(3, 2), s.allocation_ratio("ram"))
        self.assertEqual(8.0, s.initial_cpu_allocation_ratio)
        self.assertEqual(30, s.update_resources_interval)
        self.assertEqual(120, s.service_down_time)
        self.assertEqual("0-3, 8-11", s.cpu_shared_set)
        self.assertEqual("4-7,^6", s.cpu_dedicated_set)
        self.assertEqual("postgresql://nova:pw@db.example.org/nova", s.database_url)
        self.assertEqual("/srv/nova-lite/instances", s.instances_path)

    def test_defaults_when_file_is_empty(self):
        s = conf.load_settings(self.write("[DEFAULT]\n"))
        self.assertEqual(conf.Settings(host=s.host), s)

    def test_plugin_sections_are_kept_raw(self):
        s = conf.load_settings(self.write("""
            [ironic]
            api_endpoint = http://ironic:6385
            """))
        self.assertEqual("http://ironic:6385", s.section("ironic")["api_endpoint"])
        self.assertEqual({}, dict(s.section("nothing")))

    def test_overrides_win(self):
        s = conf.load_settings(self.write("[DEFAULT]\nreserved_host_memory_mb = 1024\n"),
                               reserved_host_memory_mb=0)
        self.assertEqual(0, s.reserved_host_memory_mb)

    def test_bad_values_name_section_option_and_value(self):
        for section, option, raw in [
                ("DEFAULT", "reserved_host_memory_mb", "lots"),
                ("DEFAULT", "reserved_host_memory_mb", "-1"),
                ("DEFAULT", "reserved_host_cpus", "1.5"),
                ("DEFAULT", "cpu_allocation_ratio", "abc"),
                ("DEFAULT", "cpu_allocation_ratio", "-1"),
                ("DEFAULT", "cpu_allocation_ratio", "1e300"),
                ("DEFAULT", "ram_allocation_ratio", "inf"),
                ("DEFAULT", "driver_timeout", "1e-9"),
                ("DEFAULT", "driver_timeout", "0.05"),
                ("DEFAULT", "report_interval", "1e-9"),
                ("DEFAULT", "report_interval", "0.5"),
                ("DEFAULT", "update_resources_interval", "0.001"),
                ("DEFAULT", "service_down_time", "0.2"),
                ("DEFAULT", "ram_allocation_ratio", "nan"),
                ("DEFAULT", "update_resources_interval", "-10"),
                ("DEFAULT", "vcpu_pin_set", "0-3,^0-3"),
                ("compute", "cpu_dedicated_set", "4,^4"),
                ("compute", "cpu_shared_set", "1-x")]:
            path = self.write(f"[{section}]\n{option} = {raw}\n")
            exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
            self.assertIn(f"[{section}] {option}", str(exc), raw)
            self.assertIn(raw, str(exc))

    def test_ratio_zero_in_a_file_means_unset(self):
        s = conf.load_settings(self.write(
            "[DEFAULT]\ncpu_allocation_ratio = 0.0\nram_allocation_ratio = 0\n"
            "driver_timeout = 0.1\nreport_interval = 1\n"))
        self.assertEqual((None, None), (s.cpu_allocation_ratio, s.ram_allocation_ratio))
        self.assertEqual((0.1, 1), (s.driver_timeout, s.report_interval))

    def test_unknown_option_in_a_nova_lite_section(self):
        exc = self.assertRaises(InvalidConfig, conf.load_settings,
                                self.write("[compute]\ncpu_sharde_set = 0-3\n"))
        self.assertIn("[compute] cpu_sharde_set", str(exc))

    def test_unreadable_or_invalid_file(self):
        exc = self.assertRaises(InvalidConfig, conf.load_settings, "/no/such/nova-lite.conf")
        self.assertIn("/no/such/nova-lite.conf", str(exc))
        exc = self.assertRaises(InvalidConfig, conf.load_settings,
                                self.write("reserved_host_memory_mb = 1\n"))
        self.assertIn("not valid INI", str(exc))


# A driver declaring its own [acme] options, installed with a real entry point.
ACME_DRIVER = """
import attrs

from nova_lite import conf
from nova_lite.virt import fake


@attrs.frozen
class AcmeOptions:
    endpoint: str = attrs.field(
        default="http://acme:8080", validator=conf.string_option,
        metadata=conf.option("acme", "endpoint", "Where the Acme API listens."))
    retries: int = attrs.field(
        default=3, validator=conf.int_option(0, 10),
        metadata=conf.option("acme", "retries", "Times a call is retried.",
                             minimum=0, maximum=10))
    poll_interval: float = attrs.field(
        default=5.0, validator=conf.seconds_option(),
        metadata=conf.option("acme_extra", "poll_interval", "Time between polls.",
                             file_minimum=1.0, unit="seconds"))


class AcmeDriver(fake.FakeDriver):
    options = AcmeOptions
"""


class TestDriverOptions(testtools.TestCase):
    """Options a driver declares: read from its sections, checked like the core's."""

    def setUp(self):
        super().setUp()
        self.dists = self.useFixture(ThrowawayDistributions())
        self.dists.add("nltest-acme", entry_points={"nova_lite.virt.drivers": {
            "nltest.acme": "nltest_acme_driver:AcmeDriver"}},
            modules={"nltest_acme_driver": ACME_DRIVER})
        import nltest_acme_driver
        self.driver_cls = nltest_acme_driver.AcmeDriver
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def write(self, text):
        path = os.path.join(self.tmp, "nova-lite.conf")
        with open(path, "w") as handle:
            handle.write(textwrap.dedent(text))
        return path

    def test_declared_options_are_read_from_the_file(self):
        s = conf.load_settings(self.write("""
            [acme]
            endpoint = https://acme.example.org
            retries = 7
            [acme_extra]
            poll_interval = 2.5
            """))
        options = conf.driver_options(s, self.driver_cls)
        self.assertEqual(("https://acme.example.org", 7, 2.5),
                         (options.endpoint, options.retries, options.poll_interval))

    def test_defaults_when_the_section_is_absent(self):
        options = conf.driver_options(conf.Settings(), self.driver_cls)
        self.assertEqual(("http://acme:8080", 3, 5.0),
                         (options.endpoint, options.retries, options.poll_interval))
        self.assertIsNone(conf.driver_options(conf.Settings(), object))

    def test_settings_built_in_code_are_read_too(self):
        s = conf.Settings(sections={"acme": {"retries": "0"}})
        self.assertEqual(0, conf.driver_options(s, self.driver_cls).retries)

    def test_bad_values_name_section_option_and_value(self):
        for section, option, raw in [("acme", "retries", "many"),
                                     ("acme", "retries", "11"),
                                     ("acme", "endpoint", " "),
                                     ("acme_extra", "poll_interval", "soon"),
                                     ("acme_extra", "poll_interval", "0.5"),
                                     ("acme_extra", "poll_interval", "-3")]:
            path = self.write(f"[{section}]\n{option} = {raw}\n")
            exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
            self.assertEqual(f"[{section}] {option}", exc.option, raw)
            self.assertEqual(raw.strip(), str(exc.value).strip(), raw)
            s = conf.Settings(sections={section: {option: raw}})
            exc = self.assertRaises(InvalidConfig, conf.driver_options, s, self.driver_cls)
            self.assertEqual(f"[{section}] {option}", exc.option, raw)

    def test_unknown_option_in_a_declared_section(self):
        exc = self.assertRaises(InvalidConfig, conf.load_settings,
                                self.write("[acme]\nretires = 2\n"))
        self.assertEqual("[acme] retires", exc.option)
        self.assertIn("unknown option", str(exc))
        s = conf.Settings(sections={"acme": {"retires": "2"}})
        exc = self.assertRaises(InvalidConfig, conf.driver_options, s, self.driver_cls)
        self.assertEqual("[acme] retires", exc.option)

    def test_a_section_nobody_declares_is_kept_raw(self):
        s = conf.load_settings(self.write("[acme_other]\nretires = 2\n"))
        self.assertEqual({"retires": "2"}, dict(s.section("acme_other")))

    def test_a_driver_may_not_declare_core_options(self):
        @attrs.frozen
        class Bad:
            host: str = attrs.field(default="x", metadata=conf.option("DEFAULT", "host", "H."))

        class Driver:
            options = Bad

        exc = self.assertRaises(TypeError, conf.driver_options, conf.Settings(), Driver)
        self.assertIn("[DEFAULT]", str(exc))

        class NotAttrs:
            options = dict

        self.assertRaises(TypeError, conf.driver_options, conf.Settings(), NotAttrs)

    def test_a_badly_declared_driver_breaks_only_itself(self):
        self.dists.add("nltest-badopts", entry_points={"nova_lite.virt.drivers": {
            "nltest.badopts": "nltest_badopts_driver:Driver"}},
            modules={"nltest_badopts_driver": """
                from nova_lite.virt import fake

                class Driver(fake.FakeDriver):
                    options = "not a class"
                """})
        s = conf.load_settings(self.write("[acme]\nretries = 1\n"))
        self.assertEqual(1, conf.driver_options(s, self.driver_cls).retries)
