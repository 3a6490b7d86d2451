"""Every code example of the driver guide runs.

The guide (doc/source/drivers/) shows Python only through
``literalinclude`` of files under doc/source/examples/, and each of those
files is run here:

- ``noop_driver.py`` is installed and loaded (tests/test_cli_docs.py runs
  the conformance suite and ``compute --once --demo`` on it);
- the test modules (``conformance_*.py``, ``fake_host_test.py``) run with a
  real driver ``mydriver`` installed exactly as the guide's ``setup.cfg``
  example declares it (distribution, version, entry point), and must pass;
- the ``setup.cfg`` example itself is read: its entry point group is the
  one the loader uses;
- every ``$ nova-lite ...`` command of the guide's console examples runs
  (with a private state path and a configuration file of its own) and
  exits 0.
"""

import configparser
import importlib.util
import os
import re
import shlex
import sys
import textwrap
import unittest

import fixtures
import testtools

from nova_lite import conf
from nova_lite.exception import InvalidConfig
from nova_lite.virt import loader
from tests.entry_points import ThrowawayDistributions
from tests.test_cli import CliTestCase
from tests.test_cli_docs import install_noop

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "doc", "source")
GUIDE = os.path.join(DOC, "drivers")
EXAMPLES = os.path.join(DOC, "examples")

#: Every example file and how this module runs it.
RUN_AS_TESTS = ("conformance_by_entry_point.py", "conformance_own_driver.py",
                "fake_host_test.py")
LOADED_AS_DRIVER = ("noop_driver.py",)
#: Installed as a driver whose declared options are read from a file.
OPTIONS_EXAMPLES = ("driver_options.py",)


def _guide_pages():
    for name in sorted(os.listdir(GUIDE)):
        if name.endswith(".rst"):
            with open(os.path.join(GUIDE, name), encoding="utf-8") as handle:
                yield name, handle.read()


def _code_blocks(text, language):
    """Bodies of ``.. code-block:: <language>`` blocks, dedented."""
    blocks = []
    for match in re.finditer(rf"^\.\. code-block:: {language}\n\n((?:   .*\n|\n)+)", text,
                             re.MULTILINE):
        blocks.append(textwrap.dedent(match.group(1)))
    return blocks


def _setup_cfg_example():
    for _name, text in _guide_pages():
        for block in _code_blocks(text, "ini"):
            if "[options.entry_points]" in block:
                parser = configparser.ConfigParser()
                parser.read_string(block)
                return parser
    raise AssertionError("the driver guide shows no setup.cfg with entry points")


def install_mydriver(test):
    """Install ``mydriver`` as the guide's setup.cfg example declares it.

    Its code is the guide's no-op driver, with the ``endpoint`` argument the
    examples pass.
    """
    cfg = _setup_cfg_example()
    group, = [g for g in cfg["options.entry_points"] if cfg["options.entry_points"][g]]
    (ep_name, target), = [
        [part.strip() for part in line.split("=", 1)]
        for line in cfg["options.entry_points"][group].strip().splitlines()]
    module, _, cls = target.partition(":")
    package, _, submodule = module.partition(".")
    dists = test.useFixture(ThrowawayDistributions())
    pkg_dir = os.path.join(dists.path, package)
    os.mkdir(pkg_dir)
    with open(os.path.join(EXAMPLES, "noop_driver.py"), encoding="utf-8") as handle:
        source = handle.read()
    source += textwrap.dedent(f"""

        class {cls}(NoopDriver):
            def __init__(self, settings=None, endpoint=None, **sizes):
                super().__init__(settings=settings, **sizes)
                self.endpoint = endpoint
        """)
    with open(os.path.join(pkg_dir, "__init__.py"), "w", encoding="utf-8") as handle:
        handle.write("")
    with open(os.path.join(pkg_dir, submodule + ".py"), "w", encoding="utf-8") as handle:
        handle.write(source)
    test.addCleanup(lambda: [sys.modules.pop(name) for name in list(sys.modules)
                             if name == package or name.startswith(package + ".")])
    dists.add(cfg["metadata"]["name"], version=cfg["metadata"]["version"],
              entry_points={group: {ep_name: target}})
    return group, ep_name


def _load_example(test, filename):
    name = "doc_example_" + filename[:-3]
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_tests_of(module):
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    result = testtools.TestResult()
    suite.run(result)
    return suite.countTestCases(), result


class TestGuideShowsOnlyTestedCode(testtools.TestCase):

    def test_no_inline_python(self):
        for name, text in _guide_pages():
            self.assertEqual([], _code_blocks(text, "python"),
                             f"doc/source/drivers/{name}: show Python with literalinclude "
                             "of a file under doc/source/examples/ that the tests run")

    def test_every_example_file_is_run_here(self):
        files = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py"))
        self.assertEqual(sorted(RUN_AS_TESTS + LOADED_AS_DRIVER + OPTIONS_EXAMPLES), files)

    def test_every_included_file_exists(self):
        included = set()
        for name, text in _guide_pages():
            for path in re.findall(r"^\.\. literalinclude:: (\S+)$", text, re.MULTILINE):
                self.assertTrue(os.path.isfile(os.path.join(GUIDE, path)), f"{name}: {path}")
                included.add(os.path.basename(path))
        self.assertEqual(set(RUN_AS_TESTS + LOADED_AS_DRIVER + OPTIONS_EXAMPLES), included)


class TestExamplesRun(testtools.TestCase):

    def test_setup_cfg_example_uses_the_drivers_group(self):
        group, ep_name = install_mydriver(self)
        self.assertEqual(loader.GROUP, group)
        driver = loader.load_driver(ep_name, endpoint="http://x")
        self.assertEqual("http://x", driver.endpoint)

    def test_declared_options_example(self):
        dists = self.useFixture(ThrowawayDistributions())
        with open(os.path.join(EXAMPLES, "driver_options.py"), encoding="utf-8") as handle:
            source = handle.read()
        dists.add("nova-lite-acme", entry_points={loader.GROUP: {
            "acme": "nltest_doc_acme:AcmeDriver"}}, modules={"nltest_doc_acme": source})
        # The configuration file of the example's docstring.
        text = source.split("::\n", 1)[1].split('"""', 1)[0]
        path = self.useFixture(fixtures.TempDir()).join("nova-lite.conf")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(textwrap.dedent(text))
        settings = conf.load_settings(path, host="h")
        driver = loader.load_driver(settings.compute_driver, settings=settings)
        self.assertEqual(("https://acme.example.org", 30),
                         (driver.acme.endpoint, driver.acme.poll_interval))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(textwrap.dedent(text).replace("poll_interval = 30",
                                                       "poll_interval = 0"))
        exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
        self.assertEqual("[acme] poll_interval", exc.option)

    def test_example_test_modules_pass(self):
        install_mydriver(self)
        for filename in RUN_AS_TESTS:
            module = _load_example(self, filename)
            count, result = _run_tests_of(module)
            self.assertGreater(count, 0, filename)
            problems = [f"{test.id()}: {text}" for test, text in
                        result.errors + result.failures]
            self.assertEqual([], problems, filename)
            self.assertEqual(count, result.testsRun, filename)

    def test_a_broken_driver_fails_the_conformance_example(self):
        install_mydriver(self)
        from nova_lite_mydriver.driver import MyDriver
        self.patch(MyDriver, "get_available_nodes", lambda self, refresh=False: ["", ""])
        _, result = _run_tests_of(_load_example(self, "conformance_by_entry_point.py"))
        self.assertNotEqual([], result.failures + result.errors)


def _console_commands():
    """``(page, argv)`` of every ``$ nova-lite ...`` line of the guide."""
    found = []
    for name, text in _guide_pages():
        for block in _code_blocks(text, "console"):
            for line in block.splitlines():
                if line.startswith("$ nova-lite "):
                    found.append((name, shlex.split(line[len("$ nova-lite "):])))
    return found


class TestConsoleExamples(CliTestCase):

    def test_every_command_of_the_guide_runs(self):
        install_noop(self)
        install_mydriver(self)
        config = os.path.join(self.useFixture(fixtures.TempDir()).path, "my.conf")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write("[DEFAULT]\nhost = docs-host\n")
        # As a user's shell would: ~ is their home; relative paths land in
        # the working directory (both temporary here).
        home = self.useFixture(fixtures.TempDir()).path
        self.useFixture(fixtures.EnvironmentVariable("HOME", home))
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(home)
        commands = _console_commands()
        self.assertGreater(len(commands), 4)
        for page, argv in commands:
            argv = [os.path.expanduser(arg) for arg in argv]
            if "--state-path" in argv:        # the test's own state path instead
                at = argv.index("--state-path")
                del argv[at:at + 2]
            argv = [config if arg == "my.conf" else arg for arg in argv]
            code, out, err = self.cli(*argv)
            self.assertEqual(0, code, f"{page}: nova-lite {' '.join(argv)}\n{out}\n{err}")
