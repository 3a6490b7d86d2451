"""Flavors files as the operator guide documents them, and every malformed one refused.

The guide's INI and YAML examples (doc/source/operator/scheduling.rst) are
read from the page and used as they are; a malformed file is refused with
a message naming the file, the flavor and the key, exit status 2, and
nothing changed.
"""

import json
import os
import re
import sqlite3
import textwrap

import fixtures

from tests.test_cli import CliTestCase

GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "doc", "source", "operator", "scheduling.rst")


def guide_example(language):
    """The flavors file example of the scheduling guide in ``language`` (ini, yaml)."""
    with open(GUIDE, encoding="utf-8") as handle:
        text = handle.read()
    section = text.split("\nFlavors\n-------\n", 1)[1]
    match = re.search(rf"^\.\. code-block:: {language}\n\n((?:   .*\n|\n)+)", section,
                      re.MULTILINE)
    return textwrap.dedent(match.group(1))


#: (file name, content, words the error must hold besides the path)
MALFORMED = [
    ("f.yaml", "half:\n  vcpus: 1.9\n  memory_mb: 512\n",
     ["'half'", "vcpus = 1.9 is not an integer"]),
    ("f.yaml", "yes:\n  vcpus: true\n  memory_mb: 512\n",
     ["'True'", "vcpus = True is not an integer"]),
    ("f.yaml", "inf:\n  vcpus: 1\n  memory_mb: .inf\n",
     ["'inf'", "memory_mb = inf is not an integer"]),
    ("f.yaml", "l:\n  vcpus: 1\n  memory_mb: 1\n  extra_specs: [1]\n",
     ["'l'", "extra_specs must be a mapping"]),
    ("f.yaml", "n:\n  vcpus: 1\n  memory_mb: 1\n  extra_specs: {'hw:x': [1]}\n",
     ["'n'", "extra_specs 'hw:x' = [1] must be a string, number or boolean"]),
    ("f.yaml", "s:\n  vcpus: [1]\n  memory_mb: 1\n", ["'s'", "vcpus = [1] is not an integer"]),
    ("f.yaml", "neg:\n  vcpus: -1\n  memory_mb: 1\n",
     ["'neg'", "Flavor.vcpus must be >= 0, got -1"]),
    ("f.yaml", "u:\n  vcpus: 1\n  memory_mb: 1\n  colour: red\n",
     ["'u'", "unknown key 'colour'"]),
    ("f.yaml", "d:\n  vcpus: 1\n  ram: 1\n  memory_mb: 2\n", ["'d'", "memory_mb twice"]),
    ("f.yaml", "- vcpus: 1\n", ["expected a mapping of flavor name"]),
    ("f.yaml", "bare: 4\n", ["flavor 'bare' must be a mapping"]),
    ("f.yaml", "x: [unclosed\n", ["is not valid YAML"]),
    ("f.ini", "[half]\nvcpus = 1.5\nram = 1\n", ["[half]", "vcpus = '1.5' is not an integer"]),
    ("f.ini", "[c]\nvcpus: 1\nram = 1\n", ["is not valid INI", "KEY = VALUE"]),
    ("f.ini", "[u]\nvcpus = 1\nram = 1\nhw = x\n", ["[u]", "unknown key 'hw'"]),
    ("f.ini", "vcpus = 1\n", ["is not valid INI"]),
    # read, then refused as a claim would refuse it
    ("f.ini", "[x]\nvcpus = 1\nram = 64\nhw:cpu_policy = bogus\n",
     ["flavor 'x' extra spec hw:cpu_policy='bogus' must be shared or dedicated"]),
    ("f.yaml", "x:\n  vcpus: 1\n  ram: 64\n  extra_specs: {'resources:VCPU': lots}\n",
     ["flavor 'x' extra spec resources:VCPU='lots' is not an integer"]),
]


class TestFlavorsFiles(CliTestCase):

    host = "flavorhost"

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.compute_once("--driver", "fake")

    def write(self, name, text, mode="w"):
        path = os.path.join(self.tmp, name)
        with open(path, mode) as handle:
            handle.write(text)
        return path

    def dump(self):
        conn = sqlite3.connect(f"file:{self.db_path()}?mode=ro", uri=True)
        try:
            return list(conn.iterdump())
        finally:
            conn.close()

    def test_the_guides_examples_work(self):
        for name, language in (("flavors.ini", "ini"), ("flavors.yaml", "yaml")):
            path = self.write(name, guide_example(language))
            data = self.json("claim", "test", "--node", self.host, "--flavors-file", path,
                             "--flavor", "m1.pinned")
            self.assertEqual("m1.pinned", data["flavor"], language)
            self.assertIn("PCPU", data["requested"], language)   # hw:cpu_policy=dedicated
            gold = self.json("claim", "test", "--node", self.host, "--flavors-file", path,
                             "--flavor", "bm.gold")
            self.assertEqual({"CUSTOM_BAREMETAL_GOLD": 1}, gold["requested"], language)
            self.assertFalse(gold["fits"], language)   # no such class on a fake node

    def test_extra_specs_reach_the_flavor(self):
        path = self.write("f.ini", "[pinned]\nvcpus = 2\nram = 512\n"
                                   "hw:cpu_policy = dedicated\ntrait:CUSTOM_X = required\n")
        from nova_lite.cli.flavors import load_flavors
        flavor = load_flavors(path)["pinned"]
        self.assertEqual({"hw:cpu_policy": "dedicated", "trait:CUSTOM_X": "required"},
                         dict(flavor.extra_specs))
        path = self.write("f.yaml", "p:\n  vcpus: 2\n  ram: 512\n  'hw:cpu_realtime': true\n"
                                    "  extra_specs: {'resources:VCPU': 0}\n")
        self.assertEqual({"hw:cpu_realtime": "true", "resources:VCPU": "0"},
                         dict(load_flavors(path)["p"].extra_specs))

    def test_malformed_files_are_refused_naming_file_flavor_and_key(self):
        before = self.dump()
        for name, text, words in MALFORMED:
            path = self.write(name, text)
            for command in (["claim", "test", "--node", self.host],
                            ["server", "create"]):
                code, out, err = self.cli(*command, "--flavors-file", path, "--flavor", "x")
                self.assertEqual(2, code, (text, err))
                self.assertEqual("", out)
                for word in [path, *words]:
                    self.assertIn(word, err, text)
                self.assertIsNone(re.search(r"Error\b|Traceback|invalid literal", err),
                                  err)
        self.assertEqual(before, self.dump())

    def test_files_that_cannot_be_read(self):
        before = self.dump()
        binary = self.write("bin.yaml", b"\xff\xfe\x00", mode="wb")
        for path, words in ((self.tmp, [f"--flavors-file {self.tmp} is a directory"]),
                            (os.path.join(self.tmp, "none.ini"), ["none.ini: no such file"]),
                            (binary, ["bin.yaml is not UTF-8 text"])):
            code, out, err = self.cli("server", "create", "--flavors-file", path, "--flavor",
                                      "x")
            self.assertEqual(2, code, err)
            for word in words:
                self.assertIn(word, err)
        self.assertEqual(before, self.dump())

    def test_unknown_flavor_in_a_file_is_an_error(self):
        path = self.write("f.ini", "[a]\nvcpus = 1\nram = 64\n")
        code, out, err = self.cli("server", "create", "--flavors-file", path, "--flavor", "b")
        self.assertEqual(1, code)
        self.assertIn(f"unknown flavor 'b' in {path}; known: a", err)
        built = json.loads(self.ok("server", "create", "--flavors-file", path, "--flavor",
                                   "a", "-f", "json"))
        self.assertEqual("default", built[0]["Project"])
