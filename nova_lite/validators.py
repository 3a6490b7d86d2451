"""attrs validators and converters shared by nova-lite's records.

Each validator raises :class:`~nova_lite.exception.InvalidInput` whose
message names the record, the field and the value it got.

Names and uuids are checked here once, for every way they come in
(records, the tracker, the store, settings, a driver's node list), before
anything is written, so that SQLite and PostgreSQL refuse the same values:
a recorded name is a non-blank string of at most :data:`NAME_LENGTH`
characters (a uuid at most :data:`UUID_LENGTH`) with no control or format
character (see :func:`text_reason`).
"""

import types
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

import attrs

from nova_lite.exception import InvalidInput, InvalidType

T = TypeVar("T")

#: An attrs validator: called with the instance, the attribute and the value.
Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]

# Anything above this is not a plausible size in MB, GB or CPUs; it is a typo.
MAX_AMOUNT = 2 ** 53

#: Longest name the records hold (host, node, project, user, states, resource
#: class: the ``String(255)`` columns of ``nova_lite.db.models``).
NAME_LENGTH = 255
#: Longest uuid the records hold (``String(36)``: a canonical UUID's length).
UUID_LENGTH = 36

# Unicode categories refused in a recorded name: control characters (C0, DEL,
# C1: newlines, ANSI escapes, NUL), format characters (bidirectional
# overrides, zero-width spaces), surrogates (no UTF-8 form) and the line and
# paragraph separators.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


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


def printable(value: Any) -> str:
    """``value`` with control characters escaped, for logs and terminals."""
    text = value if isinstance(value, str) else repr(value)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _shown(value: Any) -> str:
    """``value`` quoted and escaped for a message, cut to its first 40 characters."""
    if not isinstance(value, str):
        return repr(value)[:60]
    cut = value if len(value) <= 40 else value[:40] + "..."
    return f"'{printable(cut)}'"


def text_reason(value: Any, limit: int = NAME_LENGTH, empty: bool = False) -> str | None:
    """Why ``value`` cannot be recorded as a name of at most ``limit``
    characters (None if it can), as a phrase: "is empty", "is 300 characters
    long; at most 255 are recorded", "contains control character U+000A at
    position 1", ...

    ``empty``: the empty string is accepted (a blank one never is).
    """
    if not isinstance(value, str):
        return f"is of type {type(value).__name__}, not a string"
    if not value.strip() and (value or not empty):
        return "is empty" if not value else "is blank"
    if len(value) > limit:
        return f"is {len(value)} characters long; at most {limit} are recorded"
    if not value.isprintable():
        for position, char in enumerate(value):
            if unicodedata.category(char) in _REFUSED_CATEGORIES:
                if char == "\x00":
                    return f"contains a NUL byte (U+0000) at position {position}"
                return f"contains control character U+{ord(char):04X} at position {position}"
    return None


def text_problem(value: Any, what: str, limit: int = NAME_LENGTH,
                 empty: bool = False) -> str | None:
    """Why ``value`` cannot be recorded as ``what`` (None if it can).

    A sentence naming ``what`` and the value (escaped, cut short): see
    :func:`text_reason` for the rules.
    """
    reason = text_reason(value, limit, empty)
    return None if reason is None else f"{what} {_shown(value)} {reason}"


def check_text(value: Any, what: str, limit: int = NAME_LENGTH, empty: bool = False) -> Any:
    """Return ``value`` if it can be recorded as ``what``, else raise
    :class:`~nova_lite.exception.InvalidInput` saying why (see :func:`text_problem`):
    :class:`~nova_lite.exception.InvalidType` if it is not a string at all."""
    problem = text_problem(value, what, limit, empty)
    if problem is not None:
        raise (InvalidInput if isinstance(value, str) else InvalidType)(problem)
    return value


def name(limit: int = NAME_LENGTH, empty: bool = False) -> Validator:
    """Accept a string that can be recorded in a column of ``limit`` characters.

    No control or format character, not blank (nor empty unless ``empty``),
    at most ``limit`` characters: see :func:`text_reason`.
    """
    def check(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
        # The common case first, without building a message: records are
        # made by the thousand when the records are read.
        if value.__class__ is str and len(value) <= limit and value.isprintable() \
                and (not value.isspace() if value else empty):
            return
        check_text(value, _where(instance, attribute), limit, empty)
    return check


_BUILTIN_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "a mapping",
                  bool: "a bool", list: "a list", tuple: "a tuple"}


def _type_name(kind: type) -> str:
    """``kind`` for a message: "a string", "an integer", "a Flavor", ..."""
    named = _BUILTIN_NAMES.get(kind)
    if named is not None:
        return named
    article = "an" if kind.__name__[:1].upper() in "AEIOU" else "a"
    return f"{article} {kind.__name__}"


def check_type(value: Any, kind: type | tuple[type, ...], what: str,
               optional: bool = False) -> Any:
    """Return ``value`` if it is a ``kind`` (or None, when ``optional``).

    Otherwise raise :class:`~nova_lite.exception.InvalidType` (an
    InvalidInput and a TypeError) naming ``what`` (an argument, or a
    ``Record.field``), the type expected and what was given.
    """
    if isinstance(value, kind) or (optional and value is None):
        return value
    kinds = kind if isinstance(kind, tuple) else (kind,)
    expected = " or ".join(_type_name(k) for k in kinds) + (" or None" if optional else "")
    raise InvalidType(f"{what} must be {expected}, got {type(value).__name__} "
                      f"{_shown(value)}")


def check_seconds(value: Any, what: str) -> Any:
    """Return ``value`` if it is a finite number of seconds >= 0 (not a bool).

    Otherwise raise :class:`~nova_lite.exception.InvalidType` (not a
    number) or :class:`~nova_lite.exception.InvalidInput` naming ``what``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(f"{what} must be a number of seconds, got {type(value).__name__} "
                          f"{_shown(value)}")
    if not 0 <= value < float("inf"):
        raise InvalidInput(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return value


def instance_of(kind: type) -> Validator:
    """Accept only an instance of ``kind`` (see :func:`check_type`)."""
    def check(instance: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
        check_type(value, kind, _where(instance, attribute))
    return check


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


def frozen_mapping(value: Mapping[Any, Any] | None,
                   what: str = "a mapping field") -> "types.MappingProxyType[Any, Any]":
    """Convert a mapping to a read-only mapping proxy over a copy (None is empty).

    Anything else raises :class:`~nova_lite.exception.InvalidType` naming
    ``what`` (the converter of a ``Record.field`` passes that name).
    """
    if value is None:
        value = {}
    if not hasattr(value, "items"):
        raise InvalidType(f"{what} must be a mapping, got {type(value).__name__} "
                          f"{_shown(value)}")
    return types.MappingProxyType(dict(value))


def str_mapping(value: Mapping[str, Any] | None,
                what: str = "a mapping field") -> "types.MappingProxyType[str, str]":
    """A read-only mapping of str to str (values are converted with str)."""
    proxy = frozen_mapping(value, what)
    for key in proxy:
        if not isinstance(key, str):
            raise InvalidType(f"{what} keys must be strings, got {type(key).__name__} "
                              f"{_shown(key)}")
    return types.MappingProxyType({k: str(v) for k, v in proxy.items()})


def records(kind: type[T], value: Iterable[T] | None,
            what: str = "a record field") -> tuple[T, ...]:
    """An iterable of ``kind`` records as a tuple, checking each (None is empty).

    attrs converters call it from small named functions, one per field,
    so that type checkers see what the field holds; they pass the field's
    name as ``what``, which a wrong value's
    :class:`~nova_lite.exception.InvalidType` names.
    """
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidType(f"{what} must be a sequence of {kind.__name__} records, got "
                          f"{type(value).__name__} {_shown(value)}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, kind):
            raise InvalidType(f"{what} must hold {kind.__name__} records, got "
                              f"{type(item).__name__} {_shown(item)}")
    return items


def slot_setter(kind: type, name: str) -> Callable[[Any, Any], None]:
    """The ``__set__`` of field ``name``'s slot in the slotted class ``kind``
    (setting through it skips a frozen class's ``__setattr__``)."""
    for klass in kind.__mro__:
        found = klass.__dict__.get(name)
        if isinstance(found, types.MemberDescriptorType):
            return found.__set__  # type: ignore[no-any-return]
    raise TypeError(f"{kind.__name__}.{name} is not a slot")


def unchecked_maker(kind: type[T], name: str, params: tuple[str, ...],
                    values: Mapping[str, str],
                    constants: Mapping[str, Any] | None = None) -> Callable[..., T]:
    """A function ``name(*params)`` that gives a new instance of the frozen,
    slotted attrs class ``kind`` with each field set to the expression
    ``values[field]`` (of ``params`` and the names of ``constants``), its
    validators and converters not run: every value must be what they would
    give.  For records built from parts that are records already (checked
    when they were made), on paths that build them by the thousand.

    The function is written out field by field, each field set through its
    slot (what a loop over the fields by name costs twice as much as).
    """
    namespace: dict[str, Any] = {**(constants or {}), "_new": object.__new__, "_kind": kind}
    lines = [f"def {name}({', '.join(params)}):", "    record = _new(_kind)"]
    for i, field in enumerate(attrs.fields(cast(Any, kind))):
        namespace[f"_set{i}"] = slot_setter(kind, field.name)
        lines.append(f"    _set{i}(record, {values[field.name]})")
    lines.append("    return record")
    exec("\n".join(lines), namespace)   # noqa: S102 - names of attrs fields only
    return namespace[name]  # type: ignore[no-any-return]


def _replacer(kind: type, names: tuple[str, ...]) -> Callable[[Any, dict[str, Any]], Any]:
    """``replace(record, changes)``: :func:`replaced` of a ``kind`` record
    with the fields ``names`` changed, written out once for that pair: each
    field set through its slot, in one statement (as attrs writes its own
    ``__init__``), the changed ones through their converters, then their
    validators, then ``__attrs_post_init__``.  Changes :func:`replaced`
    leaves to :func:`attrs.evolve` get a function that calls it."""
    fields = {a.name: a for a in attrs.fields(kind)}
    for name in names:
        field = fields.get(name)
        if field is None or isinstance(field.converter, attrs.Converter) or not field.init:
            return lambda record, changes: attrs.evolve(record, **changes)
    namespace: dict[str, Any] = {"_new": object.__new__, "_kind": kind,
                                 "_disabled": attrs.validators.get_disabled}
    lines = ["def replace(record, changes):", "    new = _new(_kind)"]
    for i, field in enumerate(fields.values()):
        namespace[f"_set{i}"] = slot_setter(kind, field.name)
        if field.name not in names:
            value = f"record.{field.name}"
        elif field.converter is None:
            value = f"changes[{field.name!r}]"
        else:
            namespace[f"_convert{i}"] = field.converter
            value = f"_convert{i}(changes[{field.name!r}])"
        lines.append(f"    _set{i}(new, {value})")
    if _HASH_CACHE in getattr(kind, "__slots__", ()):
        # A cache_hash class keeps its hash in a slot of its own, which a
        # copy starts empty (its fields may differ).
        namespace["_set_hash"] = slot_setter(kind, _HASH_CACHE)
        lines.append("    _set_hash(new, None)")
    checked = [(i, field) for i, field in enumerate(fields.values())
               if field.name in names and field.validator is not None]
    if checked:
        lines.append("    if not _disabled():")
        for i, field in checked:
            namespace[f"_validate{i}"], namespace[f"_field{i}"] = field.validator, field
            lines.append(f"        _validate{i}(new, _field{i}, new.{field.name})")
    post_init = getattr(kind, "__attrs_post_init__", None)
    if post_init is not None:
        namespace["_post_init"] = post_init
        lines.append("    _post_init(new)")
    lines.append("    return new")
    exec("\n".join(lines), namespace)   # noqa: S102 - field names of an attrs class
    return namespace["replace"]  # type: ignore[no-any-return]


#: ``{(class, changed field names): replace}`` (see :func:`_replacer`).
_REPLACERS: dict[tuple[type, tuple[str, ...]], Callable[[Any, dict[str, Any]], Any]] = {}
#: The most entries of :data:`_REPLACERS` (all are dropped when it is full).
_MOST_REPLACERS = 1024
#: The slot attrs keeps a ``cache_hash`` class's hash in.
_HASH_CACHE = "_attrs_cached_hash"


def replaced(record: T, **changes: Any) -> T:
    """``attrs.evolve(record, **changes)``, checking only what changes.

    The copy's other fields were converted and validated when ``record``
    was made, and are taken as they are; the changed ones go through their
    converters, then their validators (with every field of the copy set),
    then the class's ``__attrs_post_init__`` if it has one: the same
    record, or the same error, as :func:`attrs.evolve` gives for fields
    whose checks depend only on the record (every nova-lite record's).  A
    change of a field with no plain converter, or not set by ``__init__``,
    falls back to :func:`attrs.evolve`.

    :param record: an instance of a slotted attrs class.
    :param changes: ``{field name: new value}``.
    :returns: the copy.
    :raises TypeError: for a name that is not a field, as attrs.evolve does.
    """
    key = (type(record), tuple(changes))
    replace = _REPLACERS.get(key)
    if replace is None:
        replace = _replacer(*key)
        if len(_REPLACERS) >= _MOST_REPLACERS:
            _REPLACERS.clear()
        _REPLACERS[key] = replace
    return replace(record, changes)  # type: ignore[no-any-return]
