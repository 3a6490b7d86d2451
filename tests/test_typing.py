"""nova_lite type-checks cleanly with mypy, and says so to its users (py.typed).

mypy runs as the installed tool would, in a subprocess of this
interpreter, with the ``[mypy]`` settings of setup.cfg (``files =
nova_lite``).  A missing mypy fails the test: it is part of the ``test``
extra, so a skip here would hide a broken set-up.
"""

import configparser
import importlib.util
import os
import subprocess
import sys

import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_CFG = os.path.join(ROOT, "setup.cfg")
# A cold run checks ~80 modules in well under a minute; this only bounds a hang.
MYPY_TIMEOUT_S = 600


def _setup_cfg():
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    return parser


class TestTyping(testtools.TestCase):

    def test_mypy_finds_no_errors(self):
        if importlib.util.find_spec("mypy") is None:
            self.fail(f"mypy is not installed in {sys.prefix}: "
                      f"pip install -e '.[test]' (the test extra has it)")
        proc = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", SETUP_CFG],
            cwd=ROOT, capture_output=True, text=True, timeout=MYPY_TIMEOUT_S)
        self.assertEqual(0, proc.returncode,
                         f"mypy reported problems:\n{proc.stdout}{proc.stderr}")
        self.assertIn("Success: no issues found", proc.stdout)

    def test_mypy_checks_the_package(self):
        cfg = _setup_cfg()
        self.assertEqual("nova_lite", cfg.get("mypy", "files").strip())
        self.assertEqual("3.10", cfg.get("mypy", "python_version").strip())

    def test_untyped_bodies_are_checked(self):
        self.assertEqual("true", _setup_cfg().get("mypy", "check_untyped_defs").strip().lower())

    def test_functions_must_be_annotated(self):
        cfg = _setup_cfg()
        self.assertEqual("true", cfg.get("mypy-nova_lite,nova_lite.*",
                                         "disallow_untyped_defs").strip().lower())

    def test_public_api_is_never_exempted(self):
        # What a plugin author or library user types against: the driver
        # contract, its loader and fakes, the testing helpers, the settings,
        # the scheduler's public modules and the leak and audit API.
        public = ("nova_lite.virt.", "nova_lite.testing.", "nova_lite.conf",
                  "nova_lite.leaks", "nova_lite.explain", "nova_lite.audit",
                  "nova_lite.holds", "nova_lite.findings", "nova_lite.scheduler.request",
                  "nova_lite.scheduler.weighers", "nova_lite.scheduler.host_state",
                  "nova_lite.compute.manager", "nova_lite.compute.api",
                  "nova_lite.db.engine", "nova_lite.db.rows", "nova_lite.db.snapshot")
        cfg = _setup_cfg()
        exempted = []
        for section in cfg.sections():
            if not section.startswith("mypy-"):
                continue
            relaxed = any(cfg.get(section, key, fallback="true").strip().lower() == "false"
                          for key in ("disallow_untyped_defs", "check_untyped_defs"))
            if relaxed:
                exempted += [m.strip() for m in section[len("mypy-"):].split(",")]
        self.assertEqual([], [m for m in exempted
                              if m.startswith(public) or m.endswith(".*")])

    def test_package_is_marked_typed(self):
        self.assertTrue(os.path.isfile(os.path.join(ROOT, "nova_lite", "py.typed")))
        declared = _setup_cfg().get("options.package_data", "nova_lite").split()
        self.assertIn("py.typed", declared)
