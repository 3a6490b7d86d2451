#!/usr/bin/env python3
"""Run test ids from the current directory, stopping at the first failure.

``python tools/guard_run.py REPORT [--import MODULE ...] TEST_ID ...``:
``tools/mutants.py`` runs it in each mutant's copy of the tree (with the
copy as the current directory and on ``PYTHONPATH``).  Each ``TEST_ID``
names a test module, class or test, exactly as ``python -m unittest``
takes it.  Each ``MODULE`` (the mutated module) is imported first.

The test output goes to standard output; what happened goes to ``REPORT``,
one JSON object a line, written as it happens:

- ``{"load_error": ID, "detail": TEXT}``: a ``--import`` module failed to
  import, or ``ID`` did not load (its module did not import, it names
  nothing, or it names no test); nothing runs then;
- ``{"start": TEST}`` when a test starts, ``{"outcome": KIND, "test":
  TEST, "detail": TEXT}`` when it ends, ``KIND`` one of ``success``,
  ``failure``, ``error``, ``skip``, ``expected_failure`` and
  ``unexpected_success`` (an error of a class or module fixture has a
  ``TEST`` such as ``setUpClass (tests.test_x.TestX)``);
- ``{"done": N}`` at the end, ``N`` the tests run.

A report without ``done`` is from a process that ended before the end.
"""

import argparse
import importlib
import json
import os
import sys
import traceback
import unittest


def _tests(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _tests(test)
        else:
            yield test


def _failed_to_load(test):
    return type(test).__name__ == "_FailedTest"


def _write(report, **event):
    report.write(json.dumps(event) + "\n")
    report.flush()


class _Reporting(unittest.TextTestResult):
    """A text result that also writes each start and outcome to the report."""

    report = None

    def _outcome(self, kind, test, detail=""):
        _write(self.report, outcome=kind, test=test.id(), detail=detail)

    def startTest(self, test):
        _write(self.report, start=test.id())
        super().startTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._outcome("success", test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._outcome("failure", test, self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._outcome("error", test, self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._outcome("skip", test, reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._outcome("expected_failure", test)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._outcome("unexpected_success", test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "failure" if issubclass(err[0], test.failureException) else "error"
            self._outcome(kind, subtest, self._exc_info_to_string(err, test))


def load(loader, ids, imports):
    """The suite of ``ids`` and the load errors, ``[(id, detail)]``."""
    errors = []
    for module in imports:
        try:
            importlib.import_module(module)
        except BaseException:   # noqa: B036 - whatever the import raised
            errors.append((f"import {module}", traceback.format_exc()))
    suite, seen = unittest.TestSuite(), set()
    for test_id in ids:
        known = len(loader.errors)
        try:
            tests = list(_tests(loader.loadTestsFromName(test_id)))
        except BaseException:   # noqa: B036 - a SyntaxError in a module, say
            errors.append((test_id, traceback.format_exc()))
            continue
        if len(loader.errors) > known or any(_failed_to_load(t) for t in tests):
            errors.append((test_id, "\n".join(loader.errors[known:]) or "did not load"))
        elif not tests:
            errors.append((test_id, "names no test"))
        for test in tests:
            if test.id() not in seen:
                seen.add(test.id())
                suite.addTest(test)
    return suite, errors


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="the file to write what happened to")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="a module to import before the tests")
    parser.add_argument("ids", nargs="+", help="test modules, classes or tests")
    args = parser.parse_args(argv)
    # As ``python -m unittest``: the current directory first, not this one.
    sys.path[0] = os.getcwd()
    with open(args.report, "w") as report:
        _Reporting.report = report
        suite, errors = load(unittest.TestLoader(), args.ids, args.imports)
        for test_id, detail in errors:
            print(f"LOAD ERROR: {test_id}\n{detail}")
            _write(report, load_error=test_id, detail=detail)
        run = 0
        if not errors:
            result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, failfast=True,
                                             resultclass=_Reporting).run(suite)
            run = result.testsRun
        _write(report, done=run)
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads a test left behind do not keep the process (and the mutant) waiting.
    os._exit(0)


if __name__ == "__main__":
    main()
