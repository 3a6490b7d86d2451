"""Loading drivers through real stevedore entry points.

The third-party plugins here are a real distribution: a ``dist-info``
(METADATA, entry_points.txt, top_level.txt) beside its modules in a
temporary directory, put on ``PYTHONPATH`` of a fresh Python process, as
stevedore tests itself with entry points it really declares.  The child
process loads each plugin through the loader and reports every outcome as
JSON; nothing patches stevedore or importlib.metadata.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import fixtures
import testtools

from nova_lite import conf, exception
from nova_lite.virt import driver as driver_api
from nova_lite.virt import fake, loader

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

    def test_error_class_is_shared(self):
        self.assertIs(exception.DriverLoadError, loader.DriverLoadError)
        self.assertTrue(issubclass(loader.DriverLoadError, exception.NovaLiteError))


class TestAbstractContract(testtools.TestCase):
    """The required methods are abstract: a class without one cannot be built."""

    def test_required_methods_are_abstract(self):
        self.assertEqual({"init_host", "get_available_nodes", "get_available_resource"},
                         set(driver_api.ComputeDriver.__abstractmethods__))
        self.assertEqual(("get_available_nodes", "get_available_resource", "init_host"),
                         driver_api.missing_methods(driver_api.ComputeDriver))
        self.assertEqual((), driver_api.missing_methods(fake.FakeDriver))

    def test_partial_driver_cannot_be_instantiated(self):
        class Partial(driver_api.ComputeDriver):
            def init_host(self, host):
                self.host = host

        self.assertEqual(("get_available_nodes", "get_available_resource"),
                         driver_api.missing_methods(Partial))
        exc = self.assertRaises(TypeError, Partial)
        self.assertIn("get_available_resource", str(exc))


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
    raise RuntimeError("boom while importing nltest_broken")
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
EMPTY = """
    from nova_lite.virt import driver

    class EmptyDriver(driver.ComputeDriver):
        pass
    """
HALF = """
    from nova_lite.virt import driver

    class HalfDriver(driver.ComputeDriver):
        def init_host(self, host):
            self.host = host

        def get_available_nodes(self, refresh=False):
            return [self.host]
    """
NO_VERSION = """
    from nova_lite.virt import fake

    class PlainDriver(fake.FakeDriver):
        api_versions = None
    """
BAD_CAPS = """
    from nova_lite.virt import fake

    class DictCapsDriver(fake.FakeDriver):
        capabilities = {"supports_lifecycle": True}
    """

#: (distribution, module, entry point name, class, source)
PLUGINS = [
    ("nltest-good", "nltest_good", "nltest.good", "GoodDriver", GOOD),
    ("nltest-broken", "nltest_broken", "nltest.broken", "Driver", BROKEN),
    ("nltest-notadriver", "nltest_notadriver", "nltest.notadriver", "NotADriver",
     NOT_A_DRIVER),
    ("nltest-future", "nltest_future", "nltest.future", "FutureDriver", FUTURE),
    ("nltest-empty", "nltest_empty", "nltest.empty", "EmptyDriver", EMPTY),
    ("nltest-half", "nltest_half", "nltest.half", "HalfDriver", HALF),
    ("nltest-dup-one", "nltest_dup1", "nltest.dup", "GoodDriver", GOOD),
    ("nltest-dup-two", "nltest_dup2", "nltest.dup", "GoodDriver", GOOD),
    ("nltest-plain", "nltest_plain", "nltest.plain", "PlainDriver", NO_VERSION),
    ("nltest-caps", "nltest_caps", "nltest.caps", "DictCapsDriver", BAD_CAPS),
]

#: Runs in the child process: loads every name given and prints the outcomes.
PROBE = """
import json, sys
import attrs
from nova_lite.exception import DriverLoadError
from nova_lite.virt import loader

def error(exc):
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "name": exc.name, "entry_point": exc.entry_point, "cause": exc.cause,
            "installed": exc.installed, "missing": list(exc.missing), "text": str(exc)}

out = {"loads": {}, "imported_after_good": None}
for name in sys.argv[1:]:
    try:
        drv = loader.load_driver(name)
    except DriverLoadError as exc:
        out["loads"][name] = {"error": error(exc)}
    else:
        out["loads"][name] = {"class": type(drv).__name__, "api_version": drv.api_version}
    if name == "nltest.good":
        out["imported_after_good"] = sorted(m for m in sys.modules if m.startswith("nltest_"))
out["installed"] = loader.installed_driver_names()
out["list"] = [attrs.asdict(info) for info in loader.list_drivers()]
print(json.dumps(out))
"""


def write_distribution(path, dist, version, module, entry_points, source):
    """Install ``dist`` into directory ``path`` as pip would: module + dist-info."""
    with open(os.path.join(path, module + ".py"), "w") as handle:
        handle.write(textwrap.dedent(source))
    info = os.path.join(path, f"{dist.replace('-', '_')}-{version}.dist-info")
    os.mkdir(info)
    with open(os.path.join(info, "METADATA"), "w") as handle:
        handle.write(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                     "Requires-Dist: nova-lite\n")
    with open(os.path.join(info, "top_level.txt"), "w") as handle:
        handle.write(module + "\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as handle:
        handle.write(f"[{GROUP}]\n")
        handle.writelines(f"{name} = {target}\n" for name, target in entry_points.items())


def probe(site_dir, cache_dir, names):
    """Load ``names`` in a fresh interpreter that also sees ``site_dir``."""
    env = dict(os.environ, PYTHONPATH=site_dir, XDG_CACHE_HOME=cache_dir)
    done = subprocess.run([sys.executable, "-c", PROBE, *names], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise AssertionError(f"probe failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


class TestThirdPartyPlugins(testtools.TestCase):
    """Every kind of bad plugin breaks only itself (one child process per class)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory(prefix="nltest-dists-")
        site_dir = os.path.join(cls._tmp.name, "site")
        cache_dir = os.path.join(cls._tmp.name, "cache")
        os.mkdir(site_dir)
        for dist, module, ep, attr, source in PLUGINS:
            write_distribution(site_dir, dist, "2.5", module, {ep: f"{module}:{attr}"}, source)
        names = ["nltest.good"] + sorted({p[2] for p in PLUGINS} - {"nltest.good"}) + [
            "fake", "no-such-driver"]
        cls.outcome = probe(site_dir, cache_dir, names)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def loaded(self, name):
        result = self.outcome["loads"][name]
        self.assertNotIn("error", result, f"{name} failed to load")
        return result

    def assertLoadError(self, name, *words):
        result = self.outcome["loads"][name]
        self.assertIn("error", result, f"{name} loaded, expected a DriverLoadError")
        exc = result["error"]
        self.assertEqual("nova_lite.exception.DriverLoadError", exc["type"])
        self.assertEqual(name, exc["name"])
        self.assertIn(repr(name), exc["text"])
        for word in words:
            self.assertIn(word, exc["text"])
        # the installed drivers are named, the bad ones too
        for installed in FAKES + ("nltest.good", "nltest.broken", "nltest.empty"):
            self.assertIn(installed, exc["installed"])
            self.assertIn(installed, exc["text"])
        return exc

    def test_good_plugin_loads_and_negotiates(self):
        self.assertEqual({"class": "GoodDriver", "api_version": "1.0"},
                         self.loaded("nltest.good"))
        self.assertEqual({"class": "PlainDriver",
                          "api_version": driver_api.CURRENT_API_VERSION},
                         self.loaded("nltest.plain"))
        self.assertEqual("FakeDriver", self.loaded("fake")["class"])

    def test_import_failure(self):
        exc = self.assertLoadError(
            "nltest.broken", "nltest_broken:Driver", "nltest-broken 2.5",
            "RuntimeError", "boom while importing nltest_broken")
        self.assertIn("nltest_broken", exc["entry_point"])
        self.assertIn("import failed", exc["cause"])
        self.assertEqual([], exc["missing"])

    def test_not_a_compute_driver(self):
        exc = self.assertLoadError("nltest.notadriver", "NotADriver",
                                   "not a subclass of nova_lite.virt.driver.ComputeDriver")
        self.assertIn("nltest-notadriver", exc["entry_point"])

    def test_missing_every_required_method(self):
        exc = self.assertLoadError(
            "nltest.empty", "nltest_empty.EmptyDriver", "nltest-empty 2.5",
            "does not implement the required methods",
            "get_available_nodes, get_available_resource, init_host")
        self.assertEqual(["get_available_nodes", "get_available_resource", "init_host"],
                         exc["missing"])

    def test_missing_one_required_method(self):
        exc = self.assertLoadError("nltest.half", "nltest_half.HalfDriver",
                                   "does not implement the required method "
                                   "get_available_resource of")
        self.assertEqual(["get_available_resource"], exc["missing"])
        self.assertNotIn("init_host", exc["cause"])

    def test_unsupported_api_versions(self):
        exc = self.assertLoadError("nltest.future", "9.0-9.1", "1.0", "not supported")
        self.assertIn("nltest_future", exc["entry_point"])

    def test_capabilities_must_be_a_record(self):
        self.assertLoadError("nltest.caps", "Capabilities")

    def test_duplicate_names_are_reported_not_picked(self):
        exc = self.assertLoadError("nltest.dup", "more than one plugin",
                                   "nltest_dup1:GoodDriver", "nltest_dup2:GoodDriver",
                                   "nltest-dup-one", "nltest-dup-two")
        self.assertIsNone(exc["entry_point"])

    def test_unknown_name_lists_installed_drivers(self):
        exc = self.assertLoadError("no-such-driver", "no driver of that name is installed")
        self.assertIsNone(exc["entry_point"])

    def test_loading_one_plugin_imports_no_other(self):
        self.assertEqual(["nltest_good"], self.outcome["imported_after_good"])

    def test_installed_names(self):
        names = self.outcome["installed"]
        self.assertEqual(sorted(set(names)), names)
        for name in FAKES + tuple(p[2] for p in PLUGINS):
            self.assertIn(name, names)

    def test_list_drivers_reports_every_plugin(self):
        by_name = {}
        for info in self.outcome["list"]:
            by_name.setdefault(info["name"], []).append(info)
        good, = by_name["nltest.good"]
        self.assertEqual(("nltest-good", "2.5", "1.0", None),
                         (good["distribution"], good["version"], good["api_version"],
                          good["error"]))
        self.assertIn("supports_lifecycle", good["capabilities"])
        for name, word in [("nltest.broken", "boom while importing"),
                           ("nltest.notadriver", "not a subclass"),
                           ("nltest.future", "not supported"),
                           ("nltest.empty", "get_available_resource, init_host"),
                           ("nltest.half", "get_available_resource"),
                           ("nltest.caps", "Capabilities")]:
            info, = by_name[name]
            self.assertIsNone(info["api_version"])
            self.assertIn(word, info["error"])
        dups = by_name["nltest.dup"]
        self.assertEqual({"nltest-dup-one", "nltest-dup-two"},
                         {d["distribution"] for d in dups})
        for dup in dups:
            self.assertIn("more than one plugin", dup["error"])
        for name in FAKES:
            info, = by_name[name]
            self.assertIsNone(info["error"])
            self.assertEqual("nova-lite", info["distribution"])


class TestPluginsAreSeenPerProcess(testtools.TestCase):
    """Without the distribution on the path, the child sees none of its plugins."""

    def test_plugins_absent_without_the_distribution(self):
        empty = self.useFixture(fixtures.TempDir()).path
        outcome = probe(empty, empty, ["nltest.good"])
        self.assertNotIn("nltest.good", outcome["installed"])
        self.assertIn("no driver of that name", outcome["loads"]["nltest.good"]["error"]["cause"])
        for name in FAKES:
            self.assertIn(name, outcome["installed"])
