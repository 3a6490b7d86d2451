"""The mutants of ``tools/mutants.py`` still apply to the tree they guard.

A mutant is a text replaced in one file; one whose text is gone (the code
it breaks was rewritten) or found twice stops the mutant run at that
mutant; and a guard that names no test that loads makes each run of its
mutants a broken one.  These checks say so in the suite, in a second, not
at the end of the mutant run.
"""

import importlib.util
import os
import unittest

from tests import base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool(name):
    spec = importlib.util.spec_from_file_location(
        f"nova_lite_{name}", os.path.join(ROOT, "tools", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mutants_module():
    return _tool("mutants")


def _text(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


class TestMutantList(base.TestCase):

    def setUp(self):
        super().setUp()
        self.mutants = _mutants_module()

    def test_each_mutant_s_text_is_in_its_file_exactly_once(self):
        replaced = [(name, path, old) for name, (_, path, old, _) in
                    self.mutants.MUTANTS.items()]
        replaced += [(f"{name} (second)", path, old) for name, (path, old, _) in
                     self.mutants.SECOND.items()]
        wrong = {name: _text(path).count(old) for name, path, old in replaced
                 if _text(path).count(old) != 1}
        self.assertEqual({}, wrong, "mutants whose text is not found exactly once "
                                    "(name: copies found)")

    def test_each_mutant_changes_its_text_and_has_guards_that_exist(self):
        self.assertEqual(set(self.mutants.MUTANTS), set(self.mutants.GUARDS))
        for name, (_, _, old, new) in self.mutants.MUTANTS.items():
            with self.subTest(name):
                self.assertNotEqual(old, new)
                self.assertTrue(self.mutants.GUARDS[name])
                missing = [t for t in self.mutants.GUARDS[name]
                           if not self.mutants._names_a_module(ROOT, t)]
                self.assertEqual([], missing)

    def test_each_guard_loads_and_names_a_test(self):
        # As the mutant run loads them (tools/guard_run.py): a guard that
        # does not load would make every mutant it guards a broken run.
        load = _tool("guard_run").load
        guards = set(self.mutants.GUARD_TESTS).union(*self.mutants.GUARDS.values())
        for guard in sorted(guards):
            with self.subTest(guard):
                suite, errors = load(unittest.TestLoader(), [guard], [])
                self.assertEqual([], errors)
                self.assertGreater(suite.countTestCases(), 0)
