"""``nova-lite driver scaffold``: a driver distribution that installs and passes.

The fast tests check names, files and refusals in-process.  The slow class
does what the generated README says, from nothing: a new virtualenv, the
core installed from this checkout (``pip install -e``), the scaffolded
distribution with its test extra (``pip install -e .[test]``), its stestr
suite run unchanged, and ``nova-lite driver list`` from that virtualenv.
One virtualenv for the whole class.
"""

import configparser
import importlib.util
import json
import os
import subprocess
import sys
import time
import unittest

import fixtures
import testtools
import testtools.content

from nova_lite import conf, scaffold
from nova_lite.exception import InvalidInput
from nova_lite.testing import DriverConformanceTests
from tests.test_cli import CliTestCase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPECTED_FILES = (
    ".gitignore", ".stestr.conf", "README.md", "nova_lite_acme_kvm/__init__.py",
    "nova_lite_acme_kvm/driver.py", "nova_lite_acme_kvm/tests/__init__.py",
    "nova_lite_acme_kvm/tests/test_conformance.py", "nova_lite_acme_kvm/tests/test_driver.py",
    "pyproject.toml", "setup.cfg", "tox.ini")


def read(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return handle.read()


def import_driver_module(directory, package):
    """The generated driver module, imported from ``directory`` without installing it."""
    path = os.path.join(directory, package, "driver.py")
    spec = importlib.util.spec_from_file_location(f"scaffolded_{package}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestNames(testtools.TestCase):

    def test_good_names(self):
        names = scaffold.driver_names("acme-kvm")
        self.assertEqual(scaffold.DriverNames(
            driver="acme-kvm", distribution="nova-lite-acme-kvm", package="nova_lite_acme_kvm",
            class_name="AcmeKvmDriver"), names)
        self.assertEqual("nova_lite_x9", scaffold.driver_names("x9").package)
        self.assertEqual("nova_lite_a_b", scaffold.driver_names("a_b").package)
        self.assertEqual("acme", scaffold.driver_names("nova-lite-acme").driver)
        self.assertEqual("acme", scaffold.driver_names("nova_lite_acme").driver)

    def test_bad_names_say_what_is_wrong(self):
        for bad, words in [("", "empty"), ("nova-lite-", "empty"),
                           ("9lives", "start with a letter"), ("my driver", "start with"),
                           ("a--b", "single '-' or '_'"), ("acme-", "single"),
                           ("acme.kvm", "only lower-case"), ("Acme", "use lower case ('acme')"),
                           ("x" * 41, "longer than 40"), ("café", "only lower-case")]:
            exc = self.assertRaises(InvalidInput, scaffold.driver_names, bad)
            self.assertIn(repr(bad), str(exc))
            self.assertIn(words, str(exc))
        self.assertRaises(InvalidInput, scaffold.driver_names, None)


class TestScaffoldFiles(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.root = self.useFixture(fixtures.TempDir()).path
        self.target = os.path.join(self.root, "out", "acme")

    def test_writes_a_complete_distribution(self):
        done = scaffold.scaffold("acme-kvm", self.target, core_source="/src/nova-lite")
        self.assertEqual(EXPECTED_FILES, done.files)
        found = sorted(os.path.relpath(os.path.join(d, f), self.target)
                       for d, _, files in os.walk(self.target) for f in files)
        self.assertEqual(sorted(EXPECTED_FILES), found)
        for relative in done.files:
            text = read(self.target, relative)
            self.assertNotIn("{{", text, relative)
            if relative.endswith(".py"):
                compile(text, relative, "exec")
        cfg = configparser.ConfigParser()
        cfg.read(os.path.join(self.target, "setup.cfg"))
        self.assertEqual("nova-lite-acme-kvm", cfg["metadata"]["name"])
        self.assertEqual("acme-kvm = nova_lite_acme_kvm.driver:AcmeKvmDriver",
                         cfg["options.entry_points"]["nova_lite.virt.drivers"].strip())
        self.assertIn("stestr", cfg["options.extras_require"]["test"])
        self.assertIn("nova-lite>=", cfg["options"]["install_requires"])
        self.assertIn('build-backend = "setuptools.build_meta"',
                      read(self.target, "pyproject.toml"))
        stestr = configparser.ConfigParser()
        stestr.read(os.path.join(self.target, ".stestr.conf"))
        self.assertTrue(os.path.isdir(os.path.join(self.target,
                                                   stestr["DEFAULT"]["test_path"])))
        readme = read(self.target, "README.md")
        self.assertIn("pip install -e /src/nova-lite", readme)
        self.assertIn("pip install -e '.[test]'", readme)
        self.assertIn("-e{env:NOVA_LITE_SOURCE:/src/nova-lite}", read(self.target, "tox.ini"))
        self.assertIn("DriverConformanceTests", read(
            self.target, "nova_lite_acme_kvm", "tests", "test_conformance.py"))

    def test_readme_names_this_checkout_by_default(self):
        scaffold.scaffold("acme", self.target)
        self.assertEqual(ROOT, scaffold.core_checkout())
        self.assertIn(f"pip install -e {ROOT}", read(self.target, "README.md"))

    def test_generated_driver_passes_conformance_without_installing(self):
        scaffold.scaffold("acme", self.target)
        module = import_driver_module(self.target, "nova_lite_acme")

        class Case(DriverConformanceTests, testtools.TestCase):
            def make_driver(self):
                return module.AcmeDriver(settings=self.make_settings())

        suite = unittest.TestSuite(
            Case(name) for name in dir(Case) if name.startswith("test_"))
        result = testtools.TestResult()
        suite.run(result)
        self.assertTrue(result.wasSuccessful(), result.errors + result.failures)
        self.assertGreaterEqual(result.testsRun, 10)

    def test_readme_configuration_is_accepted(self):
        scaffold.scaffold("acme", self.target)
        readme = read(self.target, "README.md")
        ini = readme.split("```ini\n", 1)[1].split("```", 1)[0]
        path = os.path.join(self.root, "nova-lite.conf")
        with open(path, "w") as handle:
            handle.write(ini)
        settings = conf.load_settings(path)
        self.assertEqual("acme", settings.compute_driver)
        module = import_driver_module(self.target, "nova_lite_acme")
        drv = module.AcmeDriver(settings=settings)
        self.assertEqual({"vcpus": 8, "memory_mb": 16384, "local_gb": 100,
                          "memory_overhead_mb": 32}, drv.sizes)

    def test_empty_directory_is_used(self):
        os.makedirs(self.target)
        self.assertEqual(EXPECTED_FILES[:3], scaffold.scaffold("acme-kvm", self.target).files[:3])

    def test_refusals_change_nothing(self):
        os.makedirs(self.target)
        with open(os.path.join(self.target, "mine.txt"), "w") as handle:
            handle.write("keep me")
        exc = self.assertRaises(InvalidInput, scaffold.scaffold, "acme", self.target)
        self.assertIn(f"{self.target} is not empty", str(exc))
        self.assertEqual(["mine.txt"], os.listdir(self.target))
        self.assertEqual("keep me", read(self.target, "mine.txt"))
        afile = os.path.join(self.root, "afile")
        open(afile, "w").close()
        exc = self.assertRaises(InvalidInput, scaffold.scaffold, "acme", afile)
        self.assertIn("is not a directory", str(exc))
        fresh = os.path.join(self.root, "fresh")
        exc = self.assertRaises(InvalidInput, scaffold.scaffold, "fake", fresh,
                                installed=["fake", "fake.small"])
        self.assertIn("'fake' is already installed", str(exc))
        self.assertRaises(InvalidInput, scaffold.scaffold, "Bad Name", fresh)
        self.assertFalse(os.path.exists(fresh))


class TestScaffoldCommand(CliTestCase):

    def test_scaffold(self):
        target = os.path.join(self.useFixture(fixtures.TempDir()).path, "d")
        out = self.json("driver", "scaffold", "acme-kvm", "--dir", target, state=False)
        self.assertEqual("acme-kvm", out["driver"])
        self.assertEqual("nova-lite-acme-kvm", out["distribution"])
        self.assertEqual("nova_lite_acme_kvm.driver:AcmeKvmDriver", out["class"])
        self.assertEqual(target, out["directory"])
        self.assertEqual(list(EXPECTED_FILES), out["files"])
        self.assertIn("pip install -e '.[test]'", out["next_steps"])
        # a second time: the directory is no longer empty
        code, _, err = self.cli("driver", "scaffold", "other", "--dir", target, state=False)
        self.assertEqual(2, code)
        self.assertIn("is not empty", err)

    def test_bad_name_and_taken_name(self):
        target = os.path.join(self.useFixture(fixtures.TempDir()).path, "d")
        for name, words in [("no way", "invalid driver name 'no way'"),
                            ("fake", "'fake' is already installed")]:
            code, _, err = self.cli("driver", "scaffold", name, "--dir", target, state=False)
            self.assertEqual(2, code)
            self.assertIn(words, err)
            self.assertFalse(os.path.exists(target))

    def test_default_directory(self):
        cwd = self.useFixture(fixtures.TempDir()).path
        previous = os.open(".", os.O_RDONLY)
        self.addCleanup(os.close, previous)
        self.addCleanup(os.fchdir, previous)
        os.chdir(cwd)
        out = self.json("driver", "scaffold", "acme", state=False)
        self.assertEqual(os.path.join(cwd, "nova-lite-acme"), out["directory"])
        self.assertTrue(os.path.isfile(os.path.join(cwd, "nova-lite-acme", "setup.cfg")))


def run(argv, cwd, what):
    """Run ``argv``; returns (seconds, stdout); fails the class set-up with the output."""
    started = time.monotonic()
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    env.pop("PYTHONPATH", None)
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{what} failed ({done.returncode}): {' '.join(argv)}\n"
                             f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return time.monotonic() - started, done.stdout + done.stderr


class TestScaffoldedDistributionInstalls(testtools.TestCase):
    """Slow: scaffold, new venv, install core and driver, run its tests.

    One test method, so that a parallel runner never splits the class and
    builds the virtualenv twice.
    """

    def test_scaffold_install_and_pass(self):
        work = self.useFixture(fixtures.TempDir()).path
        target = os.path.join(work, "nova-lite-acme")
        venv = os.path.join(work, "venv")
        bin_dir = os.path.join(venv, "bin")
        seconds = {}
        seconds["scaffold"], _ = run(
            [os.path.join(os.path.dirname(sys.executable), "nova-lite"), "driver", "scaffold",
             "acme", "--dir", target], work, "nova-lite driver scaffold")
        seconds["venv"], _ = run([sys.executable, "-m", "venv", venv], work, "venv")
        pip = [os.path.join(bin_dir, "python"), "-m", "pip", "install", "-q"]
        seconds["core"], _ = run(pip + ["-e", ROOT], work, "pip install -e nova-lite")
        seconds["driver"], _ = run(pip + ["-e", ".[test]"], target, "pip install -e .[test]")
        seconds["tests"], out = run([os.path.join(bin_dir, "stestr"), "run"], target,
                                    "stestr run")
        self.addDetail("seconds", testtools.content.text_content(
            f"scaffold to green: {sum(seconds.values()):.1f} s ("
            + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + ")"))

        # the generated suite passed unchanged: conformance and the driver's own tests
        self.assertIn(" - Failed: 0", out)
        passed = int(out.split(" - Passed: ")[1].split()[0])
        self.assertGreaterEqual(passed, 16, out)
        for test in ("test_conformance.TestConformance.test_tracker_audit_claim_and_free",
                     "test_conformance.TestConformance."
                     "test_tracker_refuses_a_claim_that_does_not_fit",
                     "test_conformance.TestConformance.test_lifecycle",
                     "test_driver.TestDriver.test_entry_point"):
            self.assertRegex(out, rf"nova_lite_acme\.tests\.{test} .* \.\.\. ok")

        # and the installed core sees it
        _, listing = run([os.path.join(bin_dir, "nova-lite"), "driver", "list", "-f", "json"],
                         work, "nova-lite driver list")
        rows = {row["Name"]: row for row in json.loads(listing)}
        self.assertEqual(("nova-lite-acme", "0.1.0", "1.0", None),
                         (rows["acme"]["Distribution"], rows["acme"]["Version"],
                          rows["acme"]["API version"], rows["acme"]["Load error"]))
        self.assertIn("fake", rows)
