"""attrs validators and converters shared by nova-lite's records.

Each validator raises :class:`~nova_lite.exception.InvalidInput` whose
message names the record, the field and the value it got.
"""

import types

from nova_lite.exception import InvalidInput

# Anything above this is not a plausible size in MB, GB or CPUs; it is a typo.
MAX_AMOUNT = 2 ** 53


def _where(instance, attribute):
    return f"{type(instance).__name__}.{attribute.name}"


def non_negative_int(instance, attribute, value):
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


def positive_int(instance, attribute, value):
    """Accept an int (not bool) in ``1..MAX_AMOUNT``."""
    non_negative_int(instance, attribute, value)
    if value == 0:
        raise InvalidInput(f"{_where(instance, attribute)} must be >= 1, got 0")


def any_int(instance, attribute, value):
    """Accept any int (not bool) whose magnitude is at most ``MAX_AMOUNT``."""
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_AMOUNT:
        raise InvalidInput(
            f"{_where(instance, attribute)} must be an integer, got {value!r}")


def optional(validator):
    """Like ``validator`` but also accepts None."""
    def check(instance, attribute, value):
        if value is not None:
            validator(instance, attribute, value)
    return check


def non_empty_str(instance, attribute, value):
    """Accept a string with at least one non-blank character."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(
            f"{_where(instance, attribute)} must be a non-empty string, got {value!r}")


def string(instance, attribute, value):
    """Accept any string."""
    if not isinstance(value, str):
        raise InvalidInput(f"{_where(instance, attribute)} must be a string, got {value!r}")


def one_of(choices):
    """Accept only a value from ``choices``."""
    def check(instance, attribute, value):
        if value not in choices:
            raise InvalidInput(
                f"{_where(instance, attribute)} must be one of "
                f"{sorted(choices)}, got {value!r}")
    return check


def frozen_int_set(value):
    """Convert an iterable of ints to a frozenset, rejecting anything else."""
    if isinstance(value, (str, bytes)):
        raise InvalidInput(f"expected a set of CPU ids, got {value!r}")
    result = frozenset(value)
    for item in result:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise InvalidInput(f"CPU ids must be non-negative integers, got {item!r}")
    return result


def frozen_mapping(value):
    """Convert a mapping to a read-only mapping proxy over a copy."""
    if value is None:
        value = {}
    if not hasattr(value, "items"):
        raise InvalidInput(f"expected a mapping, got {value!r}")
    return types.MappingProxyType(dict(value))


def str_mapping(value):
    """A read-only mapping of str to str (values are converted with str)."""
    proxy = frozen_mapping(value)
    for key in proxy:
        if not isinstance(key, str):
            raise InvalidInput(f"mapping keys must be strings, got {key!r}")
    return types.MappingProxyType({k: str(v) for k, v in proxy.items()})


def tuple_of(kind):
    """Converter: an iterable of ``kind`` records to a tuple, checking each."""
    def convert(value):
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
    return convert
