"""Resource classes, inventories and exact capacity arithmetic.

An :class:`Inventory` describes how much of one resource class one compute
node offers.  Capacity is ``floor((total - reserved) * allocation_ratio)``,
computed with :class:`fractions.Fraction` so that ``10 x 0.7`` is exactly 7.
"""

import enum
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, cast

import attrs
import os_resource_classes as orc

from nova_lite import validators as v
from nova_lite.exception import CapacityExceeded, InvalidInput

__all__ = [
    "ResourceClass", "StandardResourceClass", "STANDARD_CLASSES",
    "VCPU", "PCPU", "MEMORY_MB", "DISK_GB",
    "normalize_resource_class", "validate_resource_class", "Inventory", "to_ratio",
    "CapacityExceeded",
]


class StandardResourceClass(str, enum.Enum):
    """Base of :data:`ResourceClass`: a str Enum whose ``str()`` is its value."""

    def __str__(self) -> str:
        return str(self.value)


def _standard_classes() -> type[StandardResourceClass]:
    # Built from os-resource-classes' list at import time, so type checkers
    # see the base class only: code that needs one class's name uses the
    # string constants below.
    return cast(type[StandardResourceClass], enum.Enum(
        "ResourceClass", [(name, name) for name in orc.STANDARDS],
        type=StandardResourceClass, module=__name__, qualname="ResourceClass"))


# The standard classes are os-resource-classes' list, the one Nova and
# Placement use; the Enum gives them Python names.
ResourceClass = _standard_classes()
ResourceClass.__doc__ = ("The standard resource classes (Placement's names, from "
                         "os-resource-classes).")

#: The standard classes nova-lite's accounting names itself (CPUs for shared
#: and dedicated vCPUs, MiB of memory, GiB of local disk).
VCPU = "VCPU"
PCPU = "PCPU"
MEMORY_MB = "MEMORY_MB"
DISK_GB = "DISK_GB"


STANDARD_CLASSES = frozenset(orc.STANDARDS)
_CUSTOM_RE = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def normalize_resource_class(name: object) -> str:
    """Turn a free-form name into a resource class string, as Nova does.

    A standard class name is returned as it is, and so is a valid
    ``CUSTOM_*`` name; anything else goes through os-resource-classes'
    ``normalize_name``: every run of characters other than A-Z, a-z, 0-9
    becomes one ``_``, then the result is upper-cased and prefixed with
    ``CUSTOM_`` (``"gpu_a100 (8x)"`` -> ``"CUSTOM_GPU_A100_8X_"``).
    """
    if isinstance(name, ResourceClass):
        return name.value
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"Resource class name must be a non-empty string, got {name!r}")
    if name in STANDARD_CLASSES or _CUSTOM_RE.match(name):
        return validate_resource_class(name)
    return validate_resource_class(orc.normalize_name(name))


def validate_resource_class(name: object) -> str:
    """Return ``name`` as a string if it is a standard or ``CUSTOM_*`` class
    of at most :data:`nova_lite.validators.NAME_LENGTH` characters (the
    records' limit, and Placement's).

    Raises :class:`InvalidInput` naming the bad class otherwise.
    """
    if isinstance(name, ResourceClass):
        return name.value
    if isinstance(name, str) and name in STANDARD_CLASSES:
        return name
    if isinstance(name, str) and _CUSTOM_RE.match(name):
        return v.check_text(name, "Resource class")
    raise InvalidInput(
        f"Unknown resource class {name!r:.80}: use a standard class or CUSTOM_[A-Z0-9_]+")


def to_ratio(value: object, option: str = "allocation_ratio") -> Fraction:
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


def _check_int(name: str, minimum: int) -> v.Validator:
    def check(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(f"Inventory {name} must be an integer, got {value!r}")
        if value < minimum:
            raise InvalidInput(f"Inventory {name} must be >= {minimum}, got {value}")
    return check


def _ratio_converter(value: Fraction | Decimal | float | str) -> Fraction:
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
    max_unit: int | None = attrs.field(default=None)
    step_size: int = attrs.field(default=1, validator=_check_int("step_size", 1))
    allocation_ratio: Fraction = attrs.field(default=Fraction(1), converter=_ratio_converter)
    used: int = attrs.field(default=0, validator=_check_int("used", 0))

    @max_unit.validator
    def _check_max_unit(self, attribute: "attrs.Attribute[Any]", value: int | None) -> None:
        if value is None:
            return   # no cap beyond capacity
        _check_int("max_unit", 1)(self, attribute, value)
        if value < self.min_unit:
            raise InvalidInput(
                f"Inventory max_unit {value} is smaller than min_unit {self.min_unit}")

    def __attrs_post_init__(self) -> None:
        if self.reserved > self.total and self.total > 0:
            raise InvalidInput(
                f"Inventory reserved {self.reserved} is greater than total {self.total}")

    @property
    def capacity(self) -> int:
        """Usable amount: ``floor((total - reserved) * allocation_ratio)``, exact."""
        if self.total == 0:
            return 0
        # Integer floor division of the Fraction's terms: exact, and read on
        # every claim, much cheaper than Fraction arithmetic.
        ratio = self.allocation_ratio
        return (self.total - self.reserved) * ratio.numerator // ratio.denominator

    @property
    def free(self) -> int:
        """``max(0, capacity - used)``: never negative."""
        return max(0, self.capacity - self.used)

    @property
    def over(self) -> int:
        """``max(0, used - capacity)``: what is held beyond capacity."""
        return max(0, self.used - self.capacity)

    def capacity_in_use(self, used: int, covering: int = 0) -> int:
        """Capacity once ``used`` units are known, counting reserved units in use once.

        ``covering`` is how many of the ``reserved`` units may be the very
        units in use (the driver reserves a bare-metal node *because* it is
        deployed).  While ``used`` fits :attr:`capacity` that is the answer;
        beyond it, up to ``covering`` reserved units are counted as used
        rather than reserved, so the result is ``min(used, capacity
        without them)`` and never below :attr:`capacity`.  A new claim is
        still admitted only within :attr:`capacity` - ``used``.
        """
        base = self.capacity
        covering = min(max(0, covering), self.reserved)
        if used <= base or not covering or self.total == 0:
            return base
        ratio = self.allocation_ratio
        top = (self.total - self.reserved + covering) * ratio.numerator // ratio.denominator
        return min(used, top)

    def unit_problem(self, amount: int) -> str | None:
        """Return why ``amount`` breaks min_unit/max_unit/step_size, or None."""
        if amount < self.min_unit:
            return f"requested {amount} is below min_unit {self.min_unit}"
        if self.max_unit is not None and amount > self.max_unit:
            return f"requested {amount} is above max_unit {self.max_unit}"
        if amount % self.step_size:
            return f"requested {amount} is not a multiple of step_size {self.step_size}"
        return None

    def can_provide(self, amount: int) -> bool:
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

    def consume(self, amount: int) -> "Inventory":
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


def _check_amount(amount: object) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"amount must be an int, got {type(amount).__name__} {amount!r}")
    return amount
