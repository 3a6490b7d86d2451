"""``tools/mutants.py`` counts a mutant killed only when a test failed.

Each test writes small test modules to a directory of its own and runs
them as the mutant run runs a mutant's guards (``run_guards``: a real
``tools/guard_run.py`` process, stopping at the first failure), then reads
the verdict: a failed or erroring test kills; a guard module that does
not import, a mutated module that does not import, a guard id that names
no test, or a process that ends before its report is a broken run, which
proves nothing; tests that all pass or all skip let the mutant survive.
"""

import os
import textwrap

import fixtures

from tests import base
from tests import test_mutant_list

FAILS = """
    import unittest


    class T(unittest.TestCase):
        def test_a_passes(self):
            pass

        def test_b_fails(self):
            self.fail("caught")

        def test_c_fails_too(self):
            self.fail("never run: the run stops at the first failure")
"""

ERRS = """
    import unittest


    class T(unittest.TestCase):
        def test_errs(self):
            raise RuntimeError("caught")
"""

PASSES = """
    import unittest


    class T(unittest.TestCase):
        def test_passes(self):
            pass

        def test_skips(self):
            self.skipTest("not here")


    class Empty(unittest.TestCase):
        pass
"""

SKIPS = """
    import unittest


    class T(unittest.TestCase):
        def test_one(self):
            self.skipTest("no server")

        def test_two(self):
            self.skipTest("no server")
"""

# Would fail if it imported: the guard run never gets that far.
IMPORTS_MISSING = """
    import unittest

    import no_such_module_here


    class T(unittest.TestCase):
        def test_fails(self):
            self.fail("never run")
"""

IMPORTS_BAD_SYNTAX = """
    import unittest

    import bad_syntax


    class T(unittest.TestCase):
        def test_fails(self):
            self.fail("never run")
"""

BAD_SYNTAX = """
    def broken(:
        pass
"""

RAISES_AT_IMPORT = """
    NAME = undefined_name
"""

# Imports the module it tests only inside its test: an import error of that
# module would be a test's error.
IMPORTS_LATE = """
    import unittest


    class T(unittest.TestCase):
        def test_uses_it(self):
            import raises_at_import
            self.assertTrue(raises_at_import.NAME)
"""

EXITS = """
    import os
    import unittest


    class T(unittest.TestCase):
        def test_exits(self):
            os._exit(3)
"""

SLEEPS = """
    import time
    import unittest


    class T(unittest.TestCase):
        def test_sleeps(self):
            time.sleep(60)
"""


class TestGuardRuns(base.TestCase):

    def setUp(self):
        super().setUp()
        self.mutants = test_mutant_list._mutants_module()
        self.tree = self.useFixture(fixtures.TempDir()).path

    def write(self, **modules):
        for name, text in modules.items():
            with open(os.path.join(self.tree, f"{name}.py"), "w") as f:
                f.write(textwrap.dedent(text))

    def run_guards(self, *tests, **kw):
        return self.mutants.run_guards(self.tree, list(tests), **kw)

    def test_a_failing_test_kills_and_the_run_stops_there(self):
        self.write(fails=FAILS)
        verdict, output = self.run_guards("fails")
        self.assertEqual(("killed", ["fails.T.test_b_fails"]), verdict[:2])
        self.assertIn("Ran 2 tests", output)
        self.assertNotIn("test_c_fails_too", output)

    def test_an_erroring_test_kills(self):
        self.write(errs=ERRS, passes=PASSES)
        verdict, _ = self.run_guards("passes.T", "errs")
        self.assertEqual(("killed", ["errs.T.test_errs"]), verdict[:2])

    def test_a_guard_module_that_does_not_import_is_broken_not_killed(self):
        self.write(imports_missing=IMPORTS_MISSING, fails=FAILS)
        for tests in (["imports_missing"], ["imports_missing.T"],
                      ["fails", "imports_missing.T.test_fails"]):
            with self.subTest(tests):
                verdict, output = self.run_guards(*tests)
                self.assertEqual("broken", verdict.kind)
                self.assertEqual([], verdict.failing)
                self.assertIn("did not load: imports_missing", verdict.note)
                self.assertIn("No module named 'no_such_module_here'", output)
                self.assertNotIn("Ran ", output)

    def test_a_syntax_error_that_stops_a_guard_module_loading_is_broken(self):
        self.write(imports_bad_syntax=IMPORTS_BAD_SYNTAX, bad_syntax=BAD_SYNTAX)
        verdict, output = self.run_guards("imports_bad_syntax.T")
        self.assertEqual(("broken", []), verdict[:2])
        self.assertIn("SyntaxError", output)

    def test_a_mutated_module_that_does_not_import_is_broken_though_a_test_errs(self):
        self.write(imports_late=IMPORTS_LATE, raises_at_import=RAISES_AT_IMPORT)
        verdict, _ = self.run_guards("imports_late")
        self.assertEqual("killed", verdict.kind)   # the test's own error, without the check
        verdict, output = self.run_guards("imports_late", imports=["raises_at_import"])
        self.assertEqual(("broken", []), verdict[:2])
        self.assertIn("did not load: import raises_at_import", verdict.note)
        self.assertIn("NameError", output)

    def test_a_guard_id_that_names_no_test_is_broken(self):
        self.write(passes=PASSES)
        for missing in ("passes.Empty", "passes.Gone", "passes.T.test_gone"):
            with self.subTest(missing):
                verdict, _ = self.run_guards("passes.T", missing)
                self.assertEqual(("broken", []), verdict[:2])
                self.assertIn(f"did not load: {missing}", verdict.note)

    def test_passing_tests_let_the_mutant_survive(self):
        self.write(passes=PASSES)
        verdict = self.run_guards("passes")[0]
        self.assertEqual(("survived", [], "2 tests passed or skipped (1 skipped)"), verdict)

    def test_tests_that_all_skip_let_the_mutant_survive(self):
        self.write(skips=SKIPS)
        verdict = self.run_guards("skips")[0]
        self.assertEqual(("survived", [], "every one of the 2 tests skipped"), verdict)

    def test_a_process_that_ends_in_a_test_is_broken(self):
        self.write(exits=EXITS)
        verdict, _ = self.run_guards("exits")
        self.assertEqual(("broken", []), verdict[:2])
        self.assertIn("exited with 3 before the end of its report, in exits.T.test_exits",
                      verdict.note)

    def test_a_run_past_its_timeout_is_ended_and_broken(self):
        self.write(sleeps=SLEEPS)
        verdict, _ = self.run_guards("sleeps", timeout=1)
        self.assertEqual(("broken", []), verdict[:2])
        # Whether the test had started by then depends on the machine's
        # speed (naming the running test is checked with a test that exits).
        self.assertIn("was ended after 1 s before the end of its report", verdict.note)
