"""Only ``nova_lite.db`` touches the database behind a Store.

Everything else (the scheduler, the CLI, the API, the metrics, the drivers'
packages) asks the Store a method named for what it wants, never
``store.db.read(...)``, ``store.db.write(...)`` or ``store.db.engine``.
The check reads the source with :mod:`ast`: any attribute named ``db``
(``store.db``, ``self.store.db``) outside ``nova_lite/db/`` is a finding,
with its file, line and text.  Tests may still reach the database for
their fixtures.
"""

import ast
import glob
import os

import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What may use ``<store>.db``: the store's own package.
ALLOWED = (os.path.join(ROOT, "nova_lite", "db") + os.sep,)


def checked_sources():
    """The Python files of nova_lite/ (outside nova_lite/db/) and of the drivers'
    packages (drivers/*/nova_lite_*/), sorted."""
    found = glob.glob(os.path.join(ROOT, "nova_lite", "**", "*.py"), recursive=True)
    found += glob.glob(os.path.join(ROOT, "drivers", "*", "nova_lite_*", "**", "*.py"),
                       recursive=True)
    return sorted(p for p in found if not p.startswith(ALLOWED))


def database_uses(source, filename="<source>"):
    """``[(line, text)]`` of every ``<expr>.db`` attribute in ``source`` (the
    ``nova_lite.db`` package named as ``nova_lite.db`` is not one)."""
    tree = ast.parse(source, filename)
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "db" and not (
                isinstance(node.value, ast.Name) and node.value.id == "nova_lite"):
            parent_text = ast.get_source_segment(source, node) or "<expr>.db"
            uses.append((node.lineno, parent_text))
    return sorted(uses)


class StoreLayerTests(testtools.TestCase):

    def test_nothing_outside_nova_lite_db_reaches_the_database(self):
        sources = checked_sources()
        # The check covers the package and the drivers (it cannot pass on nothing).
        rel = {os.path.relpath(p, ROOT) for p in sources}
        for expected in (os.path.join("nova_lite", "scheduler", "host_manager.py"),
                         os.path.join("nova_lite", "cli", "service.py"),
                         os.path.join("nova_lite", "cluster.py"),
                         os.path.join("drivers", "ironic", "nova_lite_ironic", "peers.py")):
            self.assertIn(expected, rel)
        self.assertFalse(any(r.startswith(os.path.join("nova_lite", "db") + os.sep)
                             for r in rel))
        findings = []
        for path in sources:
            with open(path, encoding="utf-8") as f:
                for line, text in database_uses(f.read(), path):
                    findings.append(f"{os.path.relpath(path, ROOT)}:{line}: {text}")
        self.assertEqual([], findings,
                         "outside nova_lite/db/, use a Store method (named for what it "
                         "does) instead of the store's database")

    def test_the_check_finds_each_way_of_reaching_the_database(self):
        source = (
            "from nova_lite.db import queries\n"
            "import nova_lite.db\n"
            "x = nova_lite.db.Store\n"
            "a = store.db.read('op', queries.change_mark)\n"
            "b = self.store.db.write('op', lambda conn: None)\n"
            "with store.db.engine.begin() as conn:\n"
            "    pass\n"
            "database = store.db\n")
        self.assertEqual(
            [(4, "store.db"), (5, "self.store.db"), (6, "store.db"), (8, "store.db")],
            database_uses(source))
