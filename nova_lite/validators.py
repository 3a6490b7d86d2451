"""attrs validators and converters shared by nova-lite's records.

Each validator raises :class:`~nova_lite.exception.InvalidInput` whose
message names the record, the field and the value it got.
"""

import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs

from nova_lite.exception import InvalidInput

T = TypeVar("T")

#: An attrs validator: called with the instance, the attribute and the value.
Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]

# Anything above this is not a plausible size in MB, GB or CPUs; it is a typo.
MAX_AMOUNT = 2 ** 53


def _where(instance: Any, attribute: "attrs.Attribute[Any]") -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def non_negative_int(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    """Accept an int (not bool) in ``0..MAX_AMOUNT``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(
            f"{_where(instance, attribute)} must be an integer, got {value!r}")
    if value < 0:
        raise InvalidInput(
            f"{_where(instance, attribute)} must be >= 0, got {value}")
    if value > MAX_AMOUNT:
        raise InvalidInput(
            f"{_where(instance, attribute)} is absurdly large: {value}")


def positive_int(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    """Accept an int (not bool) in ``1..MAX_AMOUNT``."""
    non_negative_int(instance, attribute, value)
    if value == 0:
        raise InvalidInput(f"{_where(instance, attribute)} must be >= 1, got 0")


def any_int(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    """Accept any int (not bool) whose magnitude is at most ``MAX_AMOUNT``."""
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_AMOUNT:
        raise InvalidInput(
            f"{_where(instance, attribute)} must be an integer, got {value!r}")


def optional(validator: Validator) -> Validator:
    """Like ``validator`` but also accepts None."""
    def check(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
        if value is not None:
            validator(instance, attribute, value)
    return check


def non_empty_str(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    """Accept a string with at least one non-blank character."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(
            f"{_where(instance, attribute)} must be a non-empty string, got {value!r}")


def string(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    """Accept any string."""
    if not isinstance(value, str):
        raise InvalidInput(f"{_where(instance, attribute)} must be a string, got {value!r}")


def one_of(choices: Iterable[Any]) -> Validator:
    """Accept only a value from ``choices``."""
    def check(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
        if value not in choices:
            raise InvalidInput(
                f"{_where(instance, attribute)} must be one of "
                f"{sorted(choices)}, got {value!r}")
    return check


def frozen_int_set(value: Iterable[int]) -> frozenset[int]:
    """Convert an iterable of ints to a frozenset, rejecting anything else."""
    if isinstance(value, (str, bytes)):
        raise InvalidInput(f"expected a set of CPU ids, got {value!r}")
    result = frozenset(value)
    for item in result:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise InvalidInput(f"CPU ids must be non-negative integers, got {item!r}")
    return result


def frozen_mapping(value: Mapping[Any, Any] | None) -> "types.MappingProxyType[Any, Any]":
    """Convert a mapping to a read-only mapping proxy over a copy."""
    if value is None:
        value = {}
    if not hasattr(value, "items"):
        raise InvalidInput(f"expected a mapping, got {value!r}")
    return types.MappingProxyType(dict(value))


def str_mapping(value: Mapping[str, Any] | None) -> "types.MappingProxyType[str, str]":
    """A read-only mapping of str to str (values are converted with str)."""
    proxy = frozen_mapping(value)
    for key in proxy:
        if not isinstance(key, str):
            raise InvalidInput(f"mapping keys must be strings, got {key!r}")
    return types.MappingProxyType({k: str(v) for k, v in proxy.items()})


def records(kind: type[T], value: Iterable[T] | None) -> tuple[T, ...]:
    """An iterable of ``kind`` records as a tuple, checking each (None is empty).

    attrs converters call it from small named functions, one per record
    type, so that type checkers see what the field holds.
    """
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidInput(f"expected a sequence of {kind.__name__}, got {value!r}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, kind):
            raise InvalidInput(
                f"expected {kind.__name__} records, got {type(item).__name__} {item!r}")
    return items
