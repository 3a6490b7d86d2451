"""Loading drivers through real stevedore entry points.

The plugins here are real distributions (dist-info with entry_points.txt)
installed for one test by :class:`tests.entry_points.ThrowawayDistributions`.
"""

import sys
import uuid

import testtools

from nova_lite import conf
from nova_lite.virt import driver as driver_api
from nova_lite.virt import fake, loader
from tests.entry_points import ThrowawayDistributions

GROUP = "nova_lite.virt.drivers"
FAKES = ("fake", "fake.medium", "fake.multinode", "fake.small")


class TestInstalledFakes(testtools.TestCase):

    def test_fakes_are_registered(self):
        names = loader.installed_driver_names()
        for name in FAKES:
            self.assertIn(name, names)

    def test_load_driver(self):
        settings = conf.Settings(reserved_host_memory_mb=0)
        drv = loader.load_driver("fake", settings=settings)
        self.assertIsInstance(drv, fake.FakeDriver)
        self.assertIs(settings, drv.settings)
        self.assertEqual(driver_api.CURRENT_API_VERSION, drv.api_version)
        self.assertIsInstance(loader.load_driver("fake.small"), fake.SmallFakeDriver)
        self.assertIsInstance(loader.load_driver("fake.medium"), fake.MediumFakeDriver)
        self.assertIsInstance(loader.load_driver("fake.multinode"), fake.FakeMultiNodeDriver)

    def test_extra_kwargs_go_to_the_constructor(self):
        drv = loader.load_driver("fake.multinode", nodes=["a", "b", "c"], vcpus=3)
        drv.init_host("h")
        self.assertEqual(["a", "b", "c"], drv.get_available_nodes())
        self.assertEqual(3, drv.get_available_resource("b").vcpus)

    def test_list_drivers(self):
        infos = {i.name: i for i in loader.list_drivers()}
        for name in FAKES:
            info = infos[name]
            self.assertEqual("nova-lite", info.distribution)
            self.assertTrue(info.version)
            self.assertEqual("1.0", info.api_version)
            self.assertIsNone(info.error)
            self.assertIn("supports_lifecycle", info.capabilities)
            self.assertTrue(info.entry_point.startswith("nova_lite.virt.fake:"))

    def test_unknown_name_lists_installed_drivers(self):
        exc = self.assertRaises(loader.DriverLoadError, loader.load_driver, "no-such-driver")
        self.assertEqual("no-such-driver", exc.name)
        for name in FAKES:
            self.assertIn(name, exc.installed)
            self.assertIn(name, str(exc))
        self.assertIn("'no-such-driver'", str(exc))
        self.assertIn("no driver of that name is installed", str(exc))

    def test_bad_names(self):
        for bad in ("", None):
            self.assertRaises(loader.DriverLoadError, loader.load_driver, bad)

    def test_constructor_failure(self):
        exc = self.assertRaises(loader.DriverLoadError, loader.load_driver, "fake",
                                no_such_option=1)
        self.assertIn("constructor failed", str(exc))
        self.assertIn("no_such_option", str(exc))
        self.assertIn("nova_lite.virt.fake:FakeDriver", str(exc))


class TestVersionNegotiation(testtools.TestCase):

    def test_negotiate(self):
        self.assertEqual("1.0", driver_api.negotiate_api_version(None))
        self.assertEqual("1.0", driver_api.negotiate_api_version("1.0"))
        self.assertEqual("1.0", driver_api.negotiate_api_version(("1.0", "2.0")))
        self.assertIsNone(driver_api.negotiate_api_version(("2.0",)))
        self.assertRaises(ValueError, driver_api.negotiate_api_version, ("one",))

    def test_describe(self):
        self.assertEqual("1.0-2.3", driver_api.describe_versions(("2.3", "1.0", "1.5")))
        self.assertEqual("1.0", driver_api.describe_versions(None))


GOOD = """
    from nova_lite.virt import fake

    class GoodDriver(fake.FakeDriver):
        api_versions = ("1.0", "7.0")
    """
BROKEN = """
    raise RuntimeError("boom while importing {marker}")
    """
NOT_A_DRIVER = """
    class NotADriver:
        def get_available_nodes(self, refresh=False):
            return []
    """
FUTURE = """
    from nova_lite.virt import fake

    class FutureDriver(fake.FakeDriver):
        api_versions = ("9.0", "9.1")
    """
NO_VERSION = """
    from nova_lite.virt import driver

    class PlainDriver(driver.ComputeDriver):
        pass
    """
BAD_CAPS = """
    from nova_lite.virt import fake

    class DictCapsDriver(fake.FakeDriver):
        capabilities = {"supports_lifecycle": True}
    """


class TestThirdPartyPlugins(testtools.TestCase):
    """Every kind of bad plugin breaks only itself."""

    def setUp(self):
        super().setUp()
        self.dists = self.useFixture(ThrowawayDistributions())
        suffix = uuid.uuid4().hex[:8]
        self.mod = {kind: f"nltest_{kind}_{suffix}" for kind in
                    ("good", "broken", "notadriver", "future", "dup1", "dup2", "plain",
                     "caps")}
        self.marker = suffix
        plugins = [
            ("nltest-good", "good", "nltest.good", "GoodDriver", GOOD),
            ("nltest-broken", "broken", "nltest.broken", "Driver",
             BROKEN.format(marker=suffix)),
            ("nltest-notadriver", "notadriver", "nltest.notadriver", "NotADriver",
             NOT_A_DRIVER),
            ("nltest-future", "future", "nltest.future", "FutureDriver", FUTURE),
            ("nltest-dup-one", "dup1", "nltest.dup", "GoodDriver", GOOD),
            ("nltest-dup-two", "dup2", "nltest.dup", "GoodDriver", GOOD),
            ("nltest-plain", "plain", "nltest.plain", "PlainDriver", NO_VERSION),
            ("nltest-caps", "caps", "nltest.caps", "DictCapsDriver", BAD_CAPS),
        ]
        for dist, kind, ep, attr, source in plugins:
            self.dists.add(dist, version="2.5",
                           entry_points={GROUP: {ep: f"{self.mod[kind]}:{attr}"}},
                           modules={self.mod[kind]: source})

    def assertLoadError(self, name, *words):
        exc = self.assertRaises(loader.DriverLoadError, loader.load_driver, name)
        self.assertEqual(name, exc.name)
        text = str(exc)
        self.assertIn(repr(name), text)
        for word in words:
            self.assertIn(word, text)
        # the installed drivers are named, the bad ones too
        for installed in FAKES + ("nltest.good", "nltest.broken"):
            self.assertIn(installed, exc.installed)
            self.assertIn(installed, text)
        return exc

    def assertOthersStillLoad(self):
        good = loader.load_driver("nltest.good")
        self.assertEqual("GoodDriver", type(good).__name__)
        self.assertEqual("1.0", good.api_version)
        self.assertIsInstance(loader.load_driver("fake"), fake.FakeDriver)

    def test_good_plugin_loads_and_negotiates(self):
        self.assertOthersStillLoad()
        plain = loader.load_driver("nltest.plain")
        self.assertEqual(driver_api.CURRENT_API_VERSION, plain.api_version)

    def test_import_failure(self):
        exc = self.assertLoadError(
            "nltest.broken", f"{self.mod['broken']}:Driver", "nltest-broken 2.5",
            "RuntimeError", f"boom while importing {self.marker}")
        self.assertIn(self.mod["broken"], exc.entry_point)
        self.assertIn("import failed", exc.cause)
        self.assertOthersStillLoad()

    def test_not_a_compute_driver(self):
        exc = self.assertLoadError("nltest.notadriver", "NotADriver",
                                   "not a subclass of nova_lite.virt.driver.ComputeDriver")
        self.assertIn("nltest-notadriver", exc.entry_point)
        self.assertOthersStillLoad()

    def test_unsupported_api_versions(self):
        exc = self.assertLoadError("nltest.future", "9.0-9.1", "1.0", "not supported")
        self.assertIn(self.mod["future"], exc.entry_point)
        self.assertOthersStillLoad()

    def test_capabilities_must_be_a_record(self):
        self.assertLoadError("nltest.caps", "Capabilities")
        self.assertOthersStillLoad()

    def test_duplicate_names_are_reported_not_picked(self):
        exc = self.assertLoadError("nltest.dup", "more than one plugin",
                                   f"{self.mod['dup1']}:GoodDriver",
                                   f"{self.mod['dup2']}:GoodDriver",
                                   "nltest-dup-one", "nltest-dup-two")
        self.assertIsNone(exc.entry_point)
        self.assertOthersStillLoad()

    def test_loading_one_plugin_imports_no_other(self):
        loader.load_driver("nltest.good")
        self.assertIn(self.mod["good"], sys.modules)
        for kind in ("broken", "notadriver", "future", "caps"):
            self.assertNotIn(self.mod[kind], sys.modules)

    def test_list_drivers_reports_every_plugin(self):
        infos = loader.list_drivers()
        by_name = {}
        for info in infos:
            by_name.setdefault(info.name, []).append(info)
        good, = by_name["nltest.good"]
        self.assertEqual(("nltest-good", "2.5", "1.0", None),
                         (good.distribution, good.version, good.api_version, good.error))
        self.assertIn("supports_lifecycle", good.capabilities)
        for name, word in [("nltest.broken", "boom while importing"),
                           ("nltest.notadriver", "not a subclass"),
                           ("nltest.future", "not supported"),
                           ("nltest.caps", "Capabilities")]:
            info, = by_name[name]
            self.assertIsNone(info.api_version)
            self.assertIn(word, info.error)
        dups = by_name["nltest.dup"]
        self.assertEqual({"nltest-dup-one", "nltest-dup-two"},
                         {d.distribution for d in dups})
        for dup in dups:
            self.assertIn("more than one plugin", dup.error)
        for name in FAKES:
            info, = by_name[name]
            self.assertIsNone(info.error)

    def test_plugins_disappear_after_the_fixture(self):
        extra = ThrowawayDistributions()
        extra.setUp()
        mod = f"nltest_later_{self.marker}"
        extra.add("nltest-later", entry_points={GROUP: {"nltest.later": f"{mod}:GoodDriver"}},
                  modules={mod: GOOD})
        self.assertIn("nltest.later", loader.installed_driver_names())
        loader.load_driver("nltest.later")
        extra.cleanUp()
        self.assertNotIn("nltest.later", loader.installed_driver_names())
        self.assertNotIn(mod, sys.modules)
        self.assertRaises(loader.DriverLoadError, loader.load_driver, "nltest.later")
        # the outer fixture's plugins are still there
        self.assertOthersStillLoad()
