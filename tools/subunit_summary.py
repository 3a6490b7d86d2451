"""Count the final status of every test in subunit v2 streams.

Usage: subunit_summary.py NAME=FILE [NAME=FILE ...]
Prints one line per suite, then the total line "N passed, N failed, N skipped".
"""

import sys

import subunit
import testtools

_PASSED = {"success", "xfail"}
_FAILED = {"fail", "uxsuccess"}


class _Final(testtools.StreamResult):
    def __init__(self):
        super().__init__()
        self.final = {}

    def status(self, test_id=None, test_status=None, **kwargs):
        if test_id and test_status in _PASSED | _FAILED | {"skip"}:
            self.final[test_id] = test_status


def count(path):
    result = _Final()
    with open(path, "rb") as stream:
        subunit.ByteStreamToStreamResult(stream, non_subunit_name="stdout").run(result)
    statuses = list(result.final.values())
    return (sum(s in _PASSED for s in statuses), sum(s in _FAILED for s in statuses),
            sum(s == "skip" for s in statuses), result.final)


def main(args):
    totals = [0, 0, 0]
    for arg in args:
        name, path = arg.split("=", 1)
        passed, failed, skipped, final = count(path)
        for test_id, status in sorted(final.items()):
            if status in _FAILED:
                print(f"  FAILED [{name}] {test_id}")
        print(f"suite {name}: {passed} passed, {failed} failed, {skipped} skipped")
        totals = [totals[0] + passed, totals[1] + failed, totals[2] + skipped]
    return totals


if __name__ == "__main__":
    p, f, s = main(sys.argv[1:])
    print(f"{p} passed, {f} failed, {s} skipped")
