"""Resource classes, inventories and exact capacity arithmetic.

An :class:`Inventory` describes how much of one resource class one compute
node offers.  Capacity is ``floor((total - reserved) * allocation_ratio)``,
computed with :class:`fractions.Fraction` so that ``10 x 0.7`` is exactly 7.
"""

import enum
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import attrs

from nova_lite.exception import CapacityExceeded, InvalidInput

__all__ = [
    "ResourceClass", "STANDARD_CLASSES", "normalize_resource_class",
    "validate_resource_class", "Inventory", "to_ratio", "CapacityExceeded",
]


class ResourceClass(str, enum.Enum):
    """The standard resource classes (Placement's names)."""

    VCPU = "VCPU"
    PCPU = "PCPU"
    MEMORY_MB = "MEMORY_MB"
    DISK_GB = "DISK_GB"
    PCI_DEVICE = "PCI_DEVICE"
    SRIOV_NET_VF = "SRIOV_NET_VF"
    NUMA_SOCKET = "NUMA_SOCKET"
    NUMA_CORE = "NUMA_CORE"
    NUMA_THREAD = "NUMA_THREAD"
    NUMA_MEMORY_MB = "NUMA_MEMORY_MB"
    IPV4_ADDRESS = "IPV4_ADDRESS"
    VGPU = "VGPU"
    VGPU_DISPLAY_HEAD = "VGPU_DISPLAY_HEAD"
    NET_BW_EGR_KILOBIT_PER_SEC = "NET_BW_EGR_KILOBIT_PER_SEC"
    NET_BW_IGR_KILOBIT_PER_SEC = "NET_BW_IGR_KILOBIT_PER_SEC"
    NET_PACKET_RATE_KILOPACKET_PER_SEC = "NET_PACKET_RATE_KILOPACKET_PER_SEC"
    PGPU = "PGPU"
    MEM_ENCRYPTION_CONTEXT = "MEM_ENCRYPTION_CONTEXT"
    FPGA = "FPGA"

    def __str__(self):
        return self.value


STANDARD_CLASSES = frozenset(rc.value for rc in ResourceClass)
CUSTOM_PREFIX = "CUSTOM_"
_CUSTOM_RE = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def normalize_resource_class(name):
    """Turn a free-form name into a resource class string.

    Standard names are returned as they are; anything else becomes
    ``CUSTOM_<NAME>`` upper-cased with every other character than A-Z, 0-9
    replaced by ``_`` (``"iron-nfv"`` -> ``"CUSTOM_IRON_NFV"``).
    """
    if isinstance(name, ResourceClass):
        return name.value
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"Resource class name must be a non-empty string, got {name!r}")
    if name in STANDARD_CLASSES:
        return name
    norm = re.sub(r"[^A-Z0-9_]", "_", name.strip().upper())
    if norm in STANDARD_CLASSES:
        return norm
    if not norm.startswith(CUSTOM_PREFIX):
        norm = CUSTOM_PREFIX + norm
    return norm


def validate_resource_class(name):
    """Return ``name`` as a string if it is a standard or ``CUSTOM_*`` class.

    Raises :class:`InvalidInput` naming the bad class otherwise.
    """
    if isinstance(name, ResourceClass):
        return name.value
    if isinstance(name, str) and (name in STANDARD_CLASSES or _CUSTOM_RE.match(name)):
        return name
    raise InvalidInput(
        f"Unknown resource class {name!r}: use a standard class or CUSTOM_[A-Z0-9_]+")


def to_ratio(value, option="allocation_ratio"):
    """Convert an allocation ratio to an exact positive :class:`Fraction`.

    Floats go through their shortest decimal text (``0.7`` -> ``7/10``), so
    binary rounding never leaks into capacity.
    """
    if isinstance(value, bool):
        raise InvalidInput(f"{option} must be a number, got {value!r}")
    try:
        if isinstance(value, Fraction):
            ratio = value
        elif isinstance(value, (int, Decimal)):
            ratio = Fraction(value)
        elif isinstance(value, (float, str)):
            ratio = Fraction(Decimal(str(value).strip()))
        else:
            raise TypeError
    except (TypeError, ValueError, InvalidOperation, OverflowError):
        raise InvalidInput(f"{option} must be a finite number, got {value!r}") from None
    if ratio <= 0:
        raise InvalidInput(f"{option} must be greater than 0, got {value!r}")
    return ratio


def _check_int(name, minimum):
    def check(instance, attribute, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(f"Inventory {name} must be an integer, got {value!r}")
        if value < minimum:
            raise InvalidInput(f"Inventory {name} must be >= {minimum}, got {value}")
    return check


def _ratio_converter(value):
    return to_ratio(value)


@attrs.frozen
class Inventory:
    """One resource class offered by one node.

    ``total``/``reserved`` are in the class's unit (MB for MEMORY_MB, GB for
    DISK_GB, CPUs for VCPU/PCPU).  ``used`` is what instances and migrations
    consume; reserved amounts are never part of it.  ``max_unit`` None means
    one request may take up to the whole capacity.
    """

    total: int = attrs.field(validator=_check_int("total", 0))
    reserved: int = attrs.field(default=0, validator=_check_int("reserved", 0))
    min_unit: int = attrs.field(default=1, validator=_check_int("min_unit", 1))
    max_unit: int = attrs.field(default=None)
    step_size: int = attrs.field(default=1, validator=_check_int("step_size", 1))
    allocation_ratio: Fraction = attrs.field(default=Fraction(1), converter=_ratio_converter)
    used: int = attrs.field(default=0, validator=_check_int("used", 0))

    @max_unit.validator
    def _check_max_unit(self, attribute, value):
        if value is None:
            return   # no cap beyond capacity
        _check_int("max_unit", 1)(self, attribute, value)
        if value < self.min_unit:
            raise InvalidInput(
                f"Inventory max_unit {value} is smaller than min_unit {self.min_unit}")

    def __attrs_post_init__(self):
        if self.reserved > self.total and self.total > 0:
            raise InvalidInput(
                f"Inventory reserved {self.reserved} is greater than total {self.total}")

    @property
    def capacity(self):
        """Usable amount: ``floor((total - reserved) * allocation_ratio)``, exact."""
        if self.total == 0:
            return 0
        # Integer floor division of the Fraction's terms: exact, and read on
        # every claim, much cheaper than Fraction arithmetic.
        ratio = self.allocation_ratio
        return (self.total - self.reserved) * ratio.numerator // ratio.denominator

    @property
    def free(self):
        """``capacity - used``; negative when usage exceeds a shrunken inventory."""
        return self.capacity - self.used

    def unit_problem(self, amount):
        """Return why ``amount`` breaks min_unit/max_unit/step_size, or None."""
        if amount < self.min_unit:
            return f"requested {amount} is below min_unit {self.min_unit}"
        if self.max_unit is not None and amount > self.max_unit:
            return f"requested {amount} is above max_unit {self.max_unit}"
        if amount % self.step_size:
            return f"requested {amount} is not a multiple of step_size {self.step_size}"
        return None

    def can_provide(self, amount):
        """Return True if ``amount`` more units fit this inventory.

        Raises :class:`TypeError` if ``amount`` is not an int and
        :class:`CapacityExceeded` (with the reason) if it does not fit.
        """
        amount = _check_amount(amount)
        if amount <= 0:
            return True
        problem = self.unit_problem(amount)
        if problem:
            raise CapacityExceeded(problem)
        if self.used + amount > self.capacity:
            raise CapacityExceeded(
                f"requested {amount} exceeds free {self.free} "
                f"(capacity {self.capacity}, used {self.used})")
        return True

    def consume(self, amount):
        """Return a copy with ``amount`` more used; negative ``amount`` releases.

        Raises like :meth:`can_provide`; releasing more than is used raises
        :class:`CapacityExceeded` too.
        """
        amount = _check_amount(amount)
        if amount < 0 and self.used + amount < 0:
            raise CapacityExceeded(
                f"cannot release {-amount}: only {self.used} is used")
        if amount > 0:
            self.can_provide(amount)
        return attrs.evolve(self, used=self.used + amount)


def _check_amount(amount):
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"amount must be an int, got {type(amount).__name__} {amount!r}")
    return amount
