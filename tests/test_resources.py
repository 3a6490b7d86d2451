"""Resource classes, Inventory validation and exact capacity arithmetic."""

import math
import pickle
from decimal import Decimal
from fractions import Fraction

import attrs
import testtools

from nova_lite import resources
from nova_lite.exception import CapacityExceeded, InvalidInput
from nova_lite.resources import Inventory, ResourceClass


class TestResourceClasses(testtools.TestCase):

    def test_standard_classes(self):
        for name in ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB", "PCI_DEVICE", "SRIOV_NET_VF",
                     "VGPU"):
            self.assertIn(name, resources.STANDARD_CLASSES)
            self.assertEqual(name, ResourceClass(name))
        # A str Enum: compares and formats as its name.
        self.assertEqual("VCPU", ResourceClass.VCPU)
        self.assertEqual("VCPU", str(ResourceClass.VCPU))
        self.assertEqual("VCPU", f"{ResourceClass.VCPU}")
        self.assertEqual("<ResourceClass.VCPU: 'VCPU'>", repr(ResourceClass.VCPU))
        self.assertIsInstance(ResourceClass.VCPU, ResourceClass)
        self.assertIs(ResourceClass.VCPU, pickle.loads(pickle.dumps(ResourceClass.VCPU)))

    def test_string_constants_are_the_standard_classes(self):
        for name in ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB"):
            constant = getattr(resources, name)
            self.assertIs(type(constant), str)
            self.assertEqual(name, constant)
            self.assertEqual(ResourceClass[name], constant)

    def test_normalize_keeps_standard_names(self):
        self.assertEqual("VCPU", resources.normalize_resource_class("VCPU"))
        self.assertEqual("MEMORY_MB", resources.normalize_resource_class(ResourceClass.MEMORY_MB))

    def test_normalize_makes_custom_names(self):
        norm = resources.normalize_resource_class
        self.assertEqual("CUSTOM_IRON_NFV", norm("iron-nfv"))
        self.assertEqual("CUSTOM_BAREMETAL_GOLD", norm("baremetal.gold"))
        self.assertEqual("CUSTOM_GOLD", norm("CUSTOM_GOLD"))
        # Nova's rule (os-resource-classes): a run of other characters is one
        # "_", upper-casing comes after, and only a valid class is kept.
        self.assertEqual("CUSTOM_GPU_A100_8X_", norm("gpu_a100 (8x)"))
        self.assertEqual("CUSTOM_CUSTOM_GOLD", norm("custom_gold"))
        self.assertEqual("CUSTOM_VCPU", norm("vcpu"))
        self.assertEqual("CUSTOM_BAREMETAL", norm("baremetal"))

    def test_standard_classes_are_os_resource_classes(self):
        import os_resource_classes as orc
        self.assertEqual(frozenset(orc.STANDARDS), resources.STANDARD_CLASSES)
        for rc in ("NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC",
                   "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC"):
            self.assertEqual(rc, resources.validate_resource_class(rc))
            self.assertEqual(rc, ResourceClass[rc].value)
            self.assertEqual(rc, str(ResourceClass[rc]))

    def test_normalize_rejects_empty(self):
        for bad in ("", "   ", None, 3):
            self.assertRaises(InvalidInput, resources.normalize_resource_class, bad)

    def test_validate(self):
        self.assertEqual("CUSTOM_X1", resources.validate_resource_class("CUSTOM_X1"))
        self.assertEqual("DISK_GB", resources.validate_resource_class(ResourceClass.DISK_GB))
        for bad in ("FOO", "custom_x", "CUSTOM_", "CUSTOM_a-b", "vcpu", None):
            exc = self.assertRaises(InvalidInput, resources.validate_resource_class, bad)
            self.assertIn(repr(bad), str(exc))


class TestCapacity(testtools.TestCase):

    def test_ten_times_point_seven_is_seven(self):
        self.assertEqual(7, Inventory(total=10, allocation_ratio=0.7).capacity)
        self.assertEqual(7, Inventory(total=12, reserved=2, allocation_ratio=0.7).capacity)

    def test_exact_where_binary_floats_are_wrong(self):
        # In binary floats these products fall just short of the integer.
        self.assertEqual(28, math.floor(100 * 0.29))
        self.assertEqual(29, Inventory(total=100, allocation_ratio=0.29).capacity)
        self.assertEqual(56, math.floor(100 * 0.57))
        self.assertEqual(57, Inventory(total=100, allocation_ratio=0.57).capacity)
        self.assertEqual(57, Inventory(total=100, allocation_ratio="0.57").capacity)
        self.assertEqual(57, Inventory(total=100, allocation_ratio=Decimal("0.57")).capacity)

    def test_capacity_is_floor_of_total_minus_reserved_times_ratio(self):
        for total, reserved, ratio, expected in [
                (16, 0, 16.0, 256), (16, 4, 1.5, 18), (8192, 512, 1.0, 7680),
                (3, 0, 0.5, 1), (1, 0, 0.9, 0), (7, 1, Fraction(1, 3), 2),
                (0, 0, 4.0, 0), (5, 5, 4.0, 0)]:
            inv = Inventory(total=total, reserved=reserved, allocation_ratio=ratio)
            self.assertEqual(expected, inv.capacity, (total, reserved, ratio))
            self.assertIsInstance(inv.capacity, int)

    def test_ratio_is_exact_fraction(self):
        inv = Inventory(total=1, allocation_ratio=0.1)
        self.assertEqual(Fraction(1, 10), inv.allocation_ratio)

    def test_free_is_never_negative_and_over_says_by_how_much(self):
        inv = Inventory(total=4, used=6)
        self.assertEqual(4, inv.capacity)
        self.assertEqual(0, inv.free)
        self.assertEqual(2, inv.over)
        inv = Inventory(total=4, used=3)
        self.assertEqual((1, 0), (inv.free, inv.over))

    def test_capacity_in_use_counts_covered_reserved_units_once(self):
        # A bare-metal node reserved because it is deployed.
        node = Inventory(total=1, reserved=1)
        self.assertEqual(0, node.capacity)
        self.assertEqual(1, node.capacity_in_use(1, covering=1))
        self.assertEqual(0, node.capacity_in_use(0, covering=1))
        self.assertEqual(0, node.capacity_in_use(1, covering=0))
        # Never more than the reserved units it may cover, never below capacity.
        inv = Inventory(total=10, reserved=3, allocation_ratio=2)
        self.assertEqual(14, inv.capacity)
        self.assertEqual(14, inv.capacity_in_use(5, covering=2))
        self.assertEqual(16, inv.capacity_in_use(16, covering=1))
        self.assertEqual(18, inv.capacity_in_use(30, covering=2))
        self.assertEqual(20, inv.capacity_in_use(30, covering=99))

    def test_to_ratio(self):
        self.assertEqual(Fraction(7, 10), resources.to_ratio(0.7))
        self.assertEqual(Fraction(16), resources.to_ratio(16))
        for bad in (0, -1, 0.0, float("nan"), float("inf"), "x", True, None, [1]):
            exc = self.assertRaises(InvalidInput, resources.to_ratio, bad, "cpu_allocation_ratio")
            self.assertIn("cpu_allocation_ratio", str(exc))


class TestInventoryValidation(testtools.TestCase):

    def test_bad_fields(self):
        for kwargs, word in [
                (dict(total=-1), "total"), (dict(total=1.5), "total"),
                (dict(total=True), "total"), (dict(total="8"), "total"),
                (dict(total=8, reserved=-1), "reserved"),
                (dict(total=8, min_unit=0), "min_unit"),
                (dict(total=8, step_size=0), "step_size"),
                (dict(total=8, max_unit=0), "max_unit"),
                (dict(total=8, min_unit=4, max_unit=2), "max_unit"),
                (dict(total=8, allocation_ratio=0), "allocation_ratio"),
                (dict(total=8, allocation_ratio=-1.0), "allocation_ratio"),
                (dict(total=8, allocation_ratio=float("nan")), "allocation_ratio"),
                (dict(total=8, allocation_ratio=float("inf")), "allocation_ratio"),
                (dict(total=8, reserved=9), "reserved"),
                (dict(total=8, used=-1), "used")]:
            exc = self.assertRaises(InvalidInput, Inventory, **kwargs)
            self.assertIn(word, str(exc), kwargs)

    def test_frozen(self):
        inv = Inventory(total=8)
        self.assertRaises(attrs.exceptions.FrozenInstanceError, setattr, inv, "total", 9)


class TestAmounts(testtools.TestCase):
    """The "resource objects" blueprint's can_provide/consume."""

    def test_boundary(self):
        inv = Inventory(total=10, used=6)
        self.assertTrue(inv.can_provide(4))
        exc = self.assertRaises(CapacityExceeded, inv.can_provide, 5)
        self.assertIn("free 4", str(exc))

    def test_zero_and_negative_amounts_fit(self):
        inv = Inventory(total=10, used=10)
        self.assertTrue(inv.can_provide(0))
        self.assertTrue(inv.can_provide(-3))

    def test_wrong_type(self):
        inv = Inventory(total=10)
        for bad in (1.0, "1", True, None, Decimal(1)):
            self.assertRaises(TypeError, inv.can_provide, bad)
            self.assertRaises(TypeError, inv.consume, bad)

    def test_consume_and_release(self):
        inv = Inventory(total=10, allocation_ratio=2.0)
        more = inv.consume(15)
        self.assertEqual(0, inv.used)       # records are immutable
        self.assertEqual(15, more.used)
        self.assertEqual(5, more.free)
        less = more.consume(-10)
        self.assertEqual(5, less.used)
        self.assertRaises(CapacityExceeded, more.consume, 6)
        exc = self.assertRaises(CapacityExceeded, less.consume, -6)
        self.assertIn("only 5 is used", str(exc))

    def test_unit_rules(self):
        inv = Inventory(total=64, min_unit=2, max_unit=16, step_size=2)
        self.assertTrue(inv.can_provide(2))
        self.assertTrue(inv.can_provide(16))
        for amount, word in ((1, "min_unit"), (18, "max_unit"), (5, "step_size")):
            exc = self.assertRaises(CapacityExceeded, inv.can_provide, amount)
            self.assertIn(word, str(exc))

    def test_capacity_exceeded_is_exported(self):
        self.assertIs(CapacityExceeded, resources.CapacityExceeded)
        self.assertTrue(issubclass(CapacityExceeded, ValueError))
