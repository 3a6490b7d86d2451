"""Copies of validated records: ``replaced`` is attrs.evolve that checks only what changes."""

import types

import attrs
import fixtures
import testtools

from nova_lite import validators as v
from nova_lite.exception import InvalidInput
from nova_lite.objects import ComputeNode, Flavor, Instance
from nova_lite.resources import VCPU, Inventory


def _instance():
    return Instance(uuid="1" * 36, flavor=Flavor(name="small", vcpus=1, memory_mb=512),
                    project_id="p")


class TestReplaced(testtools.TestCase):

    def test_the_same_record_as_evolve(self):
        instance = _instance()
        changes = {"host": "h", "node": "n", "pci_devices": ["0000:81:00.1", "0000:81:00.0"]}
        copy = v.replaced(instance, **changes)
        self.assertEqual(attrs.evolve(instance, **changes), copy)
        self.assertEqual(("0000:81:00.1", "0000:81:00.0"), copy.pci_devices)   # converted
        self.assertEqual("p", copy.project_id)
        self.assertIsNone(instance.host)   # the record itself stays as it was

    def test_a_changed_field_is_converted_and_checked(self):
        node = ComputeNode(uuid="2" * 36, host="h", nodename="h",
                           inventories={VCPU: Inventory(total=4)})
        copy = v.replaced(node, usage={VCPU: 3}, generation=7)
        self.assertEqual(attrs.evolve(node, usage={VCPU: 3}, generation=7), copy)
        self.assertIsInstance(copy.usage, types.MappingProxyType)   # frozen by its converter
        for field, value in (("host", ""), ("node", "bad\nname")):
            with self.subTest(field=field):
                expected = self.assertRaises(InvalidInput, attrs.evolve, _instance(),
                                             **{field: value})
                got = self.assertRaises(InvalidInput, v.replaced, _instance(), **{field: value})
                self.assertEqual(str(expected), str(got))

    def test_the_post_init_check_runs(self):
        got = self.assertRaises(InvalidInput, v.replaced, Inventory(total=10), reserved=11)
        self.assertIn("reserved 11 is greater than total 10", str(got))

    def test_a_cached_hash_is_of_the_copy(self):
        flavor = Flavor(name="small", vcpus=1, memory_mb=512)
        hash(flavor)
        copy = v.replaced(flavor, vcpus=2)
        self.assertEqual(hash(Flavor(name="small", vcpus=2, memory_mb=512)), hash(copy))
        self.assertNotEqual(hash(flavor), hash(copy))

    def test_an_unknown_field_is_refused_as_evolve_refuses_it(self):
        self.assertRaises(TypeError, v.replaced, _instance(), colour="red")

    def test_each_kind_of_change_is_written_out_once_and_their_number_is_bounded(self):
        self.useFixture(fixtures.MonkeyPatch("nova_lite.validators._MOST_REPLACERS", 2))
        self.useFixture(fixtures.MonkeyPatch("nova_lite.validators._REPLACERS", {}))
        instance = _instance()
        first = v.replaced(instance, host="a")
        self.assertEqual(1, len(v._REPLACERS))
        self.assertEqual("b", v.replaced(first, host="b").host)   # the same function again
        self.assertEqual(1, len(v._REPLACERS))
        for changes in ({"node": "n"}, {"host": "h", "node": "n"}, {"vm_state": "active"}):
            copy = v.replaced(instance, **changes)
            self.assertEqual(attrs.evolve(instance, **changes), copy)
            self.assertLessEqual(len(v._REPLACERS), 2)
