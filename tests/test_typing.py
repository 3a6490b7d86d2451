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

    def test_package_is_marked_typed(self):
        self.assertTrue(os.path.isfile(os.path.join(ROOT, "nova_lite", "py.typed")))
        declared = _setup_cfg().get("options.package_data", "nova_lite").split()
        self.assertIn("py.typed", declared)
