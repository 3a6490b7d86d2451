"""One vocabulary of findings: every kind named once, documented, used everywhere."""

import ast
import os

from nova_lite import audit, explain, findings, leaks
from tests import base

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
GUIDE = os.path.join(ROOT, "doc", "source", "operator", "leaks.rst")


class TestOneVocabulary(base.TestCase):

    def test_every_report_uses_the_kinds_of_the_findings_module(self):
        for kinds in (leaks.FINDING_KINDS, explain.CULPRIT_KINDS, audit.KINDS):
            self.assertLessEqual(set(kinds), set(findings.DESCRIPTIONS))
        # The same discrepancy, the same name, in every report.
        self.assertEqual(leaks.STALE_ALLOCATION, explain.STALE_ALLOCATION)
        self.assertEqual(leaks.STALE_ALLOCATION, audit.ALLOCATION_WITHOUT_RECORD)
        self.assertEqual(explain.MISSING_ALLOCATION, audit.RECORD_WITHOUT_ALLOCATION)
        self.assertEqual(leaks.UNKNOWN_GUEST, audit.GUEST_WITHOUT_RECORD)

    def test_no_kind_is_spelled_outside_the_findings_module(self):
        kinds = set(findings.DESCRIPTIONS)
        found = []
        for folder, _, files in os.walk(os.path.join(ROOT, "nova_lite")):
            for name in files:
                path = os.path.join(folder, name)
                if not name.endswith(".py") or path.endswith(os.path.join("nova_lite",
                                                                          "findings.py")):
                    continue
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                            and node.value.value in kinds:
                        found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
        self.assertEqual([], found, "a kind defined again outside nova_lite/findings.py")

    def test_the_guide_lists_every_kind(self):
        with open(GUIDE, encoding="utf-8") as f:
            text = f.read()
        table = text[text.index(":name: finding-kinds"):text.index("From Python")]
        listed = {line.split("``")[1] for line in table.splitlines()
                  if line.startswith("   * - ``")}
        self.assertEqual(set(findings.DESCRIPTIONS), listed)
