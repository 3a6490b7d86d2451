"""The option metadata, the generated sample and the generated reference.

- every Settings field but ``sections`` declares its option metadata;
- the committed ``etc/nova-lite.conf.sample`` is what
  ``tools/gen-sample-config`` writes now;
- the sample is a real configuration file: loaded as it is it gives the
  defaults, and with every literal default uncommented too;
- the bounds the metadata states are the bounds the validators enforce;
- the configuration reference lists every option with its section.
"""

import os
import re
import tempfile

import attrs
import testtools

from nova_lite import conf, conf_reference
from nova_lite.exception import InvalidConfig
from tests.entry_points import ThrowawayDistributions
from tests.test_conf import ACME_DRIVER

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "etc", "nova-lite.conf.sample")


def _write(test, text):
    handle = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    test.addCleanup(os.unlink, handle.name)
    with handle:
        handle.write(text)
    return handle.name


class TestMetadata(testtools.TestCase):

    def test_every_field_declares_its_option(self):
        # sections: raw text for plugins; libvirt_connection_uri: set from code
        # only (the libvirt driver declares [libvirt] connection_uri itself).
        missing = [f.name for f in attrs.fields(conf.Settings)
                   if f.name not in ("sections", "libvirt_connection_uri")
                   and conf.OPTION_KEY not in f.metadata]
        self.assertEqual([], missing, "Settings fields without option(...) metadata")

    def test_ini_names_are_unique_and_read_by_the_loader(self):
        keys = [(opt.section, opt.name) for _, opt in conf.options()]
        self.assertEqual(len(keys), len(set(keys)))
        for field, opt in conf.options():
            self.assertEqual(field, conf._INI_OPTIONS[(opt.section, opt.name)])

    def test_help_is_a_sentence(self):
        for field, opt in conf.options():
            self.assertTrue(opt.help.endswith("."), field)
            self.assertGreater(len(opt.help), 20, field)

    def test_stated_bounds_are_enforced(self):
        checked = 0
        for name, opt in conf.options():
            kind = conf.value_type(name)
            if opt.minimum is not None:
                low = opt.minimum
                if opt.exclusive_minimum:
                    # 0 itself means "unset" for the optional ratios: go below it.
                    conf.Settings(**{name: kind(low + 0.5)})
                    self.assertRaises(InvalidConfig, conf.Settings,
                                      **{name: kind(low - 0.5)})
                else:
                    conf.Settings(**{name: kind(low)})
                    below = low - 1 if kind is int or low == 0 else low / 2
                    self.assertRaises(InvalidConfig, conf.Settings, **{name: kind(below)})
                checked += 1
            if opt.maximum is not None:
                conf.Settings(**{name: kind(opt.maximum)})
                self.assertRaises(InvalidConfig, conf.Settings,
                                  **{name: kind(opt.maximum) + 1})
                checked += 1
        self.assertGreater(checked, 20)

    def test_file_minimum_is_enforced_from_a_file(self):
        for name, opt in conf.options():
            if opt.file_minimum is None:
                continue
            path = _write(self, f"[{opt.section}]\n{opt.name} = {opt.file_minimum / 2}\n")
            exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
            self.assertIn(f"[{opt.section}] {opt.name}", str(exc))
            path = _write(self, f"[{opt.section}]\n{opt.name} = {opt.file_minimum}\n")
            self.assertEqual(opt.file_minimum, getattr(conf.load_settings(path), name))


class TestSample(testtools.TestCase):

    def test_committed_sample_is_current(self):
        with open(SAMPLE, encoding="utf-8") as handle:
            committed = handle.read()
        self.assertEqual(conf_reference.sample_config(), committed,
                         "etc/nova-lite.conf.sample is stale: run tools/gen-sample-config")

    def test_every_option_is_in_the_sample(self):
        text = conf_reference.sample_config()
        for section, items in conf_reference._sections(conf_reference.option_docs()):
            body = text.split(f"[{section}]\n", 1)[1].split("\n[", 1)[0]
            for doc in items:
                self.assertRegex(body, rf"(?m)^#{re.escape(doc.name)} =", doc.field)

    def test_sample_loads_as_the_defaults(self):
        defaults = conf.Settings(host="h")
        loaded = conf.load_settings(SAMPLE, host="h")
        self.assertEqual(defaults, loaded)

    def test_uncommented_literal_defaults_load_as_the_defaults(self):
        literal = {d.name for d in conf_reference.option_docs() if d.literal_default}
        lines = []
        for line in conf_reference.sample_config().splitlines():
            match = re.match(r"#(\w+) = ", line)
            lines.append(line[1:] if match and match.group(1) in literal else line)
        loaded = conf.load_settings(_write(self, "\n".join(lines)), host="h")
        self.assertEqual(conf.Settings(host="h"), loaded)
        self.assertGreater(len(literal), 20)

    def test_the_sample_holds_the_core_and_fake_options_only(self):
        before = conf_reference.sample_config()
        dists = self.useFixture(ThrowawayDistributions())
        dists.add("nltest-acme", entry_points={"nova_lite.virt.drivers": {
            "nltest.acme": "nltest_acme_driver:AcmeDriver"}},
            modules={"nltest_acme_driver": ACME_DRIVER})
        self.assertEqual(before, conf_reference.sample_config())
        sections = set(re.findall(r"(?m)^\[(\w+)\]$", before))
        self.assertEqual(set(conf.CORE_SECTIONS) | {"fake"}, sections)
        self.assertIn("#traits = <none>", before)
        self.assertNotIn("connection_uri", before)

    def test_a_changed_help_makes_the_sample_differ(self):
        docs = conf_reference.option_docs()
        changed = [attrs.evolve(docs[0], help="Something else entirely.")] + docs[1:]
        self.assertNotEqual(conf_reference.sample_config(docs),
                            conf_reference.sample_config(changed))


class TestReference(testtools.TestCase):

    def test_every_option_under_its_section(self):
        text = conf_reference.reference_rst()
        for section, items in conf_reference._sections(conf_reference.option_docs()):
            body = text.split(f".. rubric:: [{section}]\n", 1)[1].split(".. rubric::", 1)[0]
            for doc in items:
                self.assertIn(f"\n``{doc.name}``\n", body, doc.field)
                self.assertIn(doc.help.split(".")[0].split()[-1], body, doc.field)

    def test_bounds_shown(self):
        text = conf_reference.reference_rst()
        block = text.split("``claim_retries``", 1)[1].split("\n\n.. _", 1)[0]
        self.assertIn("Bounds: at least 1, at most 1000.", block)
        self.assertIn("Default: ``10``.", block)

    def test_a_driver_options_class_has_its_own_reference(self):
        dists = self.useFixture(ThrowawayDistributions())
        dists.add("nltest-acme", entry_points={}, modules={"nltest_acme_driver": ACME_DRIVER})
        import nltest_acme_driver
        text = conf_reference.reference_rst(
            conf_reference.option_docs(nltest_acme_driver.AcmeOptions))
        self.assertIn(".. rubric:: [acme]", text)
        self.assertIn(".. rubric:: [acme_extra]", text)
        block = text.split("``retries``", 1)[1].split("\n\n.. _", 1)[0]
        self.assertIn("Bounds: at least 0, at most 10.", block)
        self.assertIn("Default: ``3``.", block)
        self.assertNotIn("[DEFAULT]", text)

    def test_main_writes_the_sample(self):
        path = _write(self, "")
        self.assertEqual(0, conf_reference.main(["--output", path]))
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(conf_reference.sample_config(), handle.read())
