"""The layers of nova_lite: dependencies point down, and no module waits on itself.

``cli``/``api`` -> ``compute``/``scheduler`` -> ``db`` -> ``model`` -> the
records (``objects``, ``numa``, ``pci``, ...).  The source is read with
:mod:`ast`, so an import inside a function counts as much as one at the
top of a module:

- nothing in ``nova_lite.db`` or ``nova_lite.model`` imports from
  ``compute``, ``scheduler``, ``cli`` or ``api``;
- nothing in ``nova_lite.model`` imports from ``db`` either;
- the imports a module runs when it is imported (those outside functions,
  and outside ``if TYPE_CHECKING:``) form no cycle;
- no cycle passes through ``db``, ``model`` or the records even through an
  import inside a function.

Each rule is checked on the package and, first, on a small package written
for the test that breaks it, so a checker that sees nothing cannot pass.
"""

import ast
import os
import textwrap

import fixtures
import testtools

import nova_lite

PACKAGE_DIR = os.path.dirname(os.path.abspath(nova_lite.__file__))

#: Package -> the packages none of its modules may import from.
FORBIDDEN = {
    "nova_lite.db": ("nova_lite.compute", "nova_lite.scheduler", "nova_lite.cli",
                     "nova_lite.api"),
    "nova_lite.model": ("nova_lite.db", "nova_lite.compute", "nova_lite.scheduler",
                        "nova_lite.cli", "nova_lite.api"),
}
#: Modules (and packages) that may be in no cycle, even through a lazy import.
FOUNDATIONS = ("nova_lite.db", "nova_lite.model", "nova_lite.objects", "nova_lite.numa",
               "nova_lite.pci", "nova_lite.resources", "nova_lite.hardware")


def _within(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


#: When an import runs: as its module is imported, when a function is called,
#: or never (``if TYPE_CHECKING:``, for the type checker only).
AT_IMPORT, LAZY, TYPE_ONLY = "at import", "lazy", "type checking"


class Import:
    """One import statement's target: ``source`` imports ``target`` at ``line``,
    ``when`` one of :data:`AT_IMPORT`, :data:`LAZY`, :data:`TYPE_ONLY`."""

    def __init__(self, source, target, path, line, when):
        self.source, self.target = source, target
        self.path, self.line, self.when = path, line, when

    def __str__(self):
        return (f"{os.path.relpath(self.path)}:{self.line}: {self.source} imports "
                f"{self.target} ({self.when})")


def modules_of(package_dir, package_name):
    """``{module name: path}`` of every .py file under ``package_dir``."""
    found = {}
    base = os.path.dirname(package_dir)
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            path = os.path.join(dirpath, filename)
            parts = os.path.relpath(path, base)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    if package_name not in found:
        raise ValueError(f"{package_dir} is not the package {package_name}")
    return found


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node, module, is_package, modules):
    """The modules an Import/ImportFrom node names (each submodule, else the module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    out = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        out.append(full if full in modules else base)
    return out


def imports_of(modules, prefix="nova_lite"):
    """Every :class:`Import` of a module of ``modules`` whose target is under ``prefix``."""
    found = []
    for module, path in sorted(modules.items()):
        found.extend(_module_imports(module, path, modules, prefix))
    return found


def _module_imports(module, path, modules, prefix):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    found = []

    def visit(node, when):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend(Import(module, target, path, node.lineno, when)
                         for target in _targets(node, module, is_package, modules)
                         if _within(target, prefix))
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                visit(stmt, TYPE_ONLY)
            for stmt in node.orelse:
                visit(stmt, when)
        else:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and when == AT_IMPORT:
                when = LAZY
            for child in ast.iter_child_nodes(node):
                visit(child, when)
    visit(tree, AT_IMPORT)
    return found


def layer_violations(imports, forbidden=None):
    """The imports that break :data:`FORBIDDEN` (or ``forbidden``)."""
    forbidden = FORBIDDEN if forbidden is None else forbidden
    return [imp for imp in imports for layer, banned in forbidden.items()
            if _within(imp.source, layer) and any(_within(imp.target, b) for b in banned)]


def _graph(imports, modules, kinds):
    """``{module: {module it imports}}`` through the imports ``when`` one of
    ``kinds``; importing ``a.b.c`` runs ``a`` and ``a.b`` first, except those
    the importer is inside (already running)."""
    graph = {m: set() for m in modules}
    for imp in imports:
        if imp.when in kinds:
            graph[imp.source] |= _runs(imp, modules)
    return graph


def _runs(imp, modules):
    """The modules ``imp`` runs: its target and the packages above it, but
    not those its importer is inside (they are running already)."""
    parts = imp.target.split(".")
    names = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {n for n in names
            if n in modules and n != imp.source and not _within(imp.source, n)}


def cycles(graph):
    """The strongly connected sets of ``graph`` with more than one module (or a
    module importing itself), each sorted; found without recursion."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1 or node in graph[node]:
                        out.append(sorted(members))
    return sorted(out)


def _describe(cycle, imports, kinds):
    """The cycle's modules, then the imports that close it, one a line."""
    members = set(cycle)
    lines = {str(imp): None for imp in imports if imp.source in members and imp.when in kinds
             and _runs(imp, members)}
    return " <-> ".join(cycle) + "\n    " + "\n    ".join(lines)


#: The imports that run as a module is imported; and those that run at all.
IMPORT_TIME, RUNTIME = (AT_IMPORT,), (AT_IMPORT, LAZY)


def import_time_cycles(imports, modules):
    """Cycles among the imports that run when a module is imported."""
    return cycles(_graph(imports, modules, IMPORT_TIME))


def foundation_cycles(imports, modules, foundations=FOUNDATIONS):
    """Cycles through any import that runs (lazy ones too) and includes a
    module of ``foundations``."""
    return [c for c in cycles(_graph(imports, modules, RUNTIME))
            if any(_within(m, f) for m in c for f in foundations)]


def _write_package(root, files):
    for name, text in files.items():
        path = os.path.join(root, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))


class TestTheChecker(testtools.TestCase):
    """The checker on a small package that breaks each rule once."""

    def setUp(self):
        super().setUp()
        root = self.useFixture(fixtures.TempDir()).path
        _write_package(root, {
            "nova_lite/__init__.py": "",
            "nova_lite/objects.py": "import attrs\n",
            "nova_lite/numa.py": """
                from nova_lite import objects
            """,
            "nova_lite/model/__init__.py": "",
            "nova_lite/model/plans.py": """
                from nova_lite.objects import Allocation

                def plan():
                    from nova_lite.db import store   # model -> db, lazily
            """,
            "nova_lite/db/__init__.py": "from nova_lite.db.store import Store\n",
            "nova_lite/db/store.py": """
                from typing import TYPE_CHECKING
                from nova_lite.model import plans
                from . import rows
                if TYPE_CHECKING:
                    from nova_lite.compute.tracker import Tracker   # db -> compute, for types
            """,
            "nova_lite/db/rows.py": """
                def load():
                    from nova_lite.numa import fit   # lazy: numa -> objects, no cycle
            """,
            "nova_lite/compute/__init__.py": "",
            "nova_lite/compute/tracker.py": """
                from nova_lite.db import store
                from nova_lite.compute import claims
            """,
            "nova_lite/compute/claims.py": """
                from nova_lite.compute.tracker import Tracker   # a cycle at import time
            """,
            "nova_lite/pci.py": """
                def stats():
                    from nova_lite import hardware   # lazy, but a foundation's cycle
            """,
            "nova_lite/hardware.py": "from nova_lite import pci\n",
        })
        self.modules = modules_of(os.path.join(root, "nova_lite"), "nova_lite")
        self.imports = imports_of(self.modules)

    def test_relative_and_package_imports_are_resolved(self):
        edges = {(i.source, i.target, i.when) for i in self.imports}
        self.assertIn(("nova_lite.db.store", "nova_lite.db.rows", AT_IMPORT), edges)
        self.assertIn(("nova_lite.db.store", "nova_lite.model.plans", AT_IMPORT), edges)
        self.assertIn(("nova_lite.numa", "nova_lite.objects", AT_IMPORT), edges)
        self.assertIn(("nova_lite.db.rows", "nova_lite.numa", LAZY), edges)
        self.assertIn(("nova_lite.db.store", "nova_lite.compute.tracker", TYPE_ONLY), edges)

    def test_imports_upwards_are_found_inside_functions_and_type_checking(self):
        found = sorted((i.source, i.target) for i in layer_violations(self.imports))
        self.assertEqual([("nova_lite.db.store", "nova_lite.compute.tracker"),
                          ("nova_lite.model.plans", "nova_lite.db.store")], found)

    def test_a_cycle_at_import_time_is_found(self):
        # Not db.store -> compute.tracker -> db.store: that import is for types only.
        self.assertEqual([["nova_lite.compute.claims", "nova_lite.compute.tracker"]],
                         import_time_cycles(self.imports, self.modules))

    def test_a_lazy_cycle_through_a_foundation_is_found(self):
        self.assertEqual([["nova_lite.db", "nova_lite.db.store", "nova_lite.model.plans"],
                          ["nova_lite.hardware", "nova_lite.pci"]],
                         foundation_cycles(self.imports, self.modules))


class TestLayers(testtools.TestCase):
    """The rules on nova_lite itself."""

    def setUp(self):
        super().setUp()
        self.modules = modules_of(PACKAGE_DIR, "nova_lite")
        self.imports = imports_of(self.modules)

    def test_the_walk_sees_the_package(self):
        self.assertGreater(len(self.modules), 50)
        edges = {(i.source, i.target) for i in self.imports}
        for edge in [("nova_lite.db.store", "nova_lite.model.plans"),
                     ("nova_lite.compute.resource_tracker", "nova_lite.db.store")]:
            self.assertTrue(edge in edges, f"the walk missed {edge[0]} -> {edge[1]}")

    def test_db_and_model_import_nothing_above_them(self):
        found = layer_violations(self.imports)
        self.assertEqual([], [str(i) for i in found],
                         "imports against the layers (cli/api -> compute/scheduler -> db -> "
                         "model):\n" + "\n".join(str(i) for i in found))

    def test_no_cycle_among_the_imports_run_at_import_time(self):
        found = import_time_cycles(self.imports, self.modules)
        self.assertEqual([], found, "import cycles:\n" + "\n".join(
            _describe(c, self.imports, IMPORT_TIME) for c in found))

    def test_no_cycle_through_db_model_or_the_records_even_through_lazy_imports(self):
        found = foundation_cycles(self.imports, self.modules)
        self.assertEqual([], found, "import cycles:\n" + "\n".join(
            _describe(c, self.imports, RUNTIME) for c in found))
