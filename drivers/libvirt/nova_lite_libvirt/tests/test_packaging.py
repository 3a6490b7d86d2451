"""Packaging: the entry point, and libvirt imported in exactly one place."""

import ast
import importlib.metadata
import os
import subprocess
import sys
import textwrap

import testtools

from nova_lite.virt import loader

import nova_lite_libvirt
from nova_lite_libvirt.driver import LibvirtDriver

PACKAGE_DIR = os.path.dirname(nova_lite_libvirt.__file__)


def _python_files():
    for root, _dirs, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(root, name)


def _libvirt_imports(path):
    """Places in ``path`` that import the real ``libvirt`` module."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [node.lineno for a in node.names if a.name.split(".")[0] == "libvirt"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "libvirt":
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and _called_name(node) in _DYNAMIC_IMPORTS:
            if any(isinstance(a, ast.Constant) and a.value == "libvirt" for a in node.args):
                found.append(node.lineno)
    return found


_DYNAMIC_IMPORTS = {"import_module", "__import__"}


def _called_name(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


class PackagingTest(testtools.TestCase):

    def test_entry_point(self):
        (ep,) = [ep for ep in importlib.metadata.entry_points(group=loader.GROUP)
                 if ep.name == "libvirt"]
        self.assertEqual("nova_lite_libvirt.driver:LibvirtDriver", ep.value)
        self.assertIs(LibvirtDriver, ep.load())
        self.assertEqual("nova-lite-libvirt", ep.dist.name)
        self.assertEqual(nova_lite_libvirt.__version__, ep.dist.version)
        info = {d.name: d for d in loader.list_drivers()}["libvirt"]
        self.assertIsNone(info.error)

    def test_libvirt_is_imported_in_exactly_one_place(self):
        places = {os.path.relpath(p, PACKAGE_DIR): _libvirt_imports(p) for p in _python_files()}
        places = {p: lines for p, lines in places.items() if lines}
        self.assertEqual(["libvirt_api.py"], sorted(places))
        self.assertEqual(1, len(places["libvirt_api.py"]))

    def test_package_and_fake_tier_work_without_libvirt_python(self):
        script = textwrap.dedent("""
            import sys
            sys.modules["libvirt"] = None   # "import libvirt" now fails
            import uuid
            import testtools
            from nova_lite import conf, objects
            from nova_lite.virt import loader
            from nova_lite_libvirt import libvirt_api
            from nova_lite_libvirt.testing import FakeLibvirtFixture, HostSpec
            import tempfile
            state = tempfile.mkdtemp()
            settings = conf.Settings(host="h", state_path=state)
            driver = loader.load_driver("libvirt", settings=settings)
            try:
                driver.init_host("h")
            except libvirt_api.LibvirtUnavailable as exc:
                assert "pip install libvirt-python" in str(exc), exc
                assert "libvirt-dev" in str(exc), exc
            else:
                raise AssertionError("init_host worked without libvirt")
            with FakeLibvirtFixture(HostSpec(cores=4, threads=1)):
                driver = loader.load_driver("libvirt", settings=settings)
                driver.init_host("h")
                report = driver.get_available_resource(driver.get_available_nodes()[0])
                assert report.vcpus == 4, report
            assert sys.modules["libvirt"] is None
            print("ok")
        """)
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=120)
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertEqual("ok", result.stdout.strip())
