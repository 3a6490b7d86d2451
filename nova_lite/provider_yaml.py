"""Reading one provider.yaml document: YAML with positions, version, schema.

The first half of :mod:`nova_lite.provider_config`: a file becomes a
:class:`Document` (the data, and where each part of it is in the file) or
a :class:`~nova_lite.exception.ProviderConfigError` naming the file, the
place in the document (``providers[1].inventories.additional[0].CUSTOM_FOO.total``),
its line and what is wrong.  The checks Nova makes before its schema
(a readable file, well-formed YAML, a schema version whose major version
is known) come first, then the JSON Schema :data:`SCHEMA`.
"""

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import jsonschema
import yaml

from nova_lite.conf import MAX_ALLOCATION_RATIO
from nova_lite.exception import ProviderConfigError

LOG = logging.getLogger(__name__)

#: The uuid that identifies every compute node of the service.
COMPUTE_NODE = "$COMPUTE_NODE"
#: Schema major version -> the highest minor version this nova-lite knows.
SCHEMA_VERSIONS: Mapping[int, int] = {1: 0}
#: Largest amount of an inventory field (Placement's bound).
MAX_AMOUNT = 2 ** 31 - 1
#: Most schema problems of one file named in its error.
MAX_PROBLEMS = 20

_UUID = "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
_CLASS_OR_TRAIT = "^[A-Z0-9_]{1,255}$"
_VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
# A schema keyword of nova-lite's (ignored by validators): the problem to
# report when a value fails this subschema, instead of the validator's text
# (or {validator keyword: problem} for some of its keywords only).
_PROBLEM = "x-problem"
# Marks a propertyNames subschema: the key failed, so the path names it.
_KEY = "x-key"


def _amount(minimum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": MAX_AMOUNT}


#: The JSON Schema of a provider.yaml file, schema version 1.x.  Unknown
#: keys are accepted beside ``meta``, in a provider, in ``inventories`` and
#: in ``traits`` (later minor versions may add some); an identification
#: and an inventory record take only the keys below.
SCHEMA: Mapping[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "nova-lite provider.yaml, schema version 1",
    "type": "object",
    "required": ["meta"],
    "properties": {
        "meta": {
            "type": "object",
            "required": ["schema_version"],
            "properties": {
                "schema_version": {"type": "string", "pattern": r"^1\.(0|[1-9][0-9]*)$"},
            },
        },
        "providers": {"type": "array", "items": {"$ref": "#/$defs/provider"}},
    },
    "$defs": {
        "provider": {
            "type": "object",
            "required": ["identification"],
            "properties": {
                "identification": {"$ref": "#/$defs/identification"},
                "inventories": {"$ref": "#/$defs/inventories"},
                "traits": {"$ref": "#/$defs/traits"},
            },
        },
        "identification": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 255},
                "uuid": {
                    "type": "string",
                    "anyOf": [{"pattern": _UUID}, {"const": COMPUTE_NODE}],
                    _PROBLEM: f"must be a uuid or {COMPUTE_NODE}",
                },
            },
            _PROBLEM: {"minProperties": "must hold one of name and uuid",
                       "maxProperties": "must hold only one of name and uuid"},
        },
        "inventories": {
            "type": "object",
            "properties": {
                "additional": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "propertyNames": {
                            "pattern": _CLASS_OR_TRAIT,
                            _PROBLEM: "is not a resource class name (CUSTOM_ followed by "
                                      "upper-case letters, digits and underscores)",
                            _KEY: True,
                        },
                        "additionalProperties": {"$ref": "#/$defs/inventory"},
                    },
                },
            },
        },
        "inventory": {
            "type": "object",
            "required": ["total"],
            "additionalProperties": False,
            "properties": {
                "total": _amount(1),
                "reserved": _amount(0),
                "min_unit": _amount(1),
                "max_unit": _amount(1),
                "step_size": _amount(1),
                "allocation_ratio": {"type": "number", "exclusiveMinimum": 0,
                                     "maximum": MAX_ALLOCATION_RATIO},
            },
        },
        "traits": {
            "type": "object",
            "properties": {
                "additional": {
                    "type": "array",
                    "items": {
                        "type": "string",
                        "pattern": _CLASS_OR_TRAIT,
                        _PROBLEM: "is not a trait name (CUSTOM_ followed by upper-case "
                                  "letters, digits and underscores)",
                    },
                },
            },
        },
    },
}

_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


@attrs.frozen
class Document:
    """One provider.yaml file, read and checked against :data:`SCHEMA`.

    ``path``: the file; ``data``: the document (a mapping); ``root``: its
    YAML node tree, which knows the line of every part.
    """

    path: str
    data: Mapping[str, Any]
    root: yaml.Node | None = attrs.field(default=None, repr=False, eq=False)

    def line(self, path: Iterable[str | int]) -> int | None:
        """The 1-based line of ``path`` in the file (of its deepest part found)."""
        return _line(self.root, path)

    def place(self, path: Sequence[str | int]) -> str:
        """``providers[0].traits.additional[1] (line 7)``: a place in a message."""
        return f"{format_path(path)}{_at(self.line(path))}"


def read_document(path: str) -> Document:
    """Read ``path`` and check it against the schema.

    :raises nova_lite.exception.ProviderConfigError: naming the file and,
        for each problem (at most :data:`MAX_PROBLEMS`), its place, line and
        what is wrong: the file cannot be read or is not UTF-8; malformed
        YAML or a key given twice (line and column); no
        ``meta.schema_version``; a major version not in
        :data:`SCHEMA_VERSIONS`; a schema violation.  A newer minor version
        is read with a WARNING.
    """
    data, root = _read_yaml(path)
    _check_version(path, data, root)
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: [
        (0, step) if isinstance(step, int) else (1, step) for step in e.absolute_path])
    problems = [_schema_problem(error, root) for error in errors[:MAX_PROBLEMS]]
    if len(errors) > MAX_PROBLEMS:
        problems.append(f"and {len(errors) - MAX_PROBLEMS} more problem(s)")
    if problems:
        raise ProviderConfigError(path, problems)
    return Document(path=path, data=data, root=root)


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue   # an unhashable key: the base class says so
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first at line "
                    f"{first.line + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: str) -> tuple[Any, yaml.Node | None]:
    """``(document, its node tree)``; ProviderConfigError for an unreadable file or
    malformed YAML, naming the position."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ProviderConfigError(path, [f"the file cannot be read: {exc.strerror or exc}"]
                                  ) from None
    except UnicodeDecodeError as exc:
        raise ProviderConfigError(path, [f"the file is not UTF-8 text (byte {exc.start})"]
                                  ) from None
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = ", ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise ProviderConfigError(path, [f"not valid YAML: {where}{problem}"]) from None
    except yaml.YAMLError as exc:
        raise ProviderConfigError(path, [f"not valid YAML: {exc}"]) from None
    finally:
        loader.dispose()
    return data, root


def _check_version(path: str, data: Any, root: yaml.Node | None) -> None:
    """Refuse a file without a schema version, or of a major version not known;
    warn about a newer minor version (its new fields may be ignored)."""
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ProviderConfigError(path, [
            f"the document is {kind}: it must be a mapping with meta.schema_version"])
    meta = data.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise ProviderConfigError(path, [
            f"meta{_at(_line(root, ['meta']))}: {_shown(meta)} must be a mapping holding "
            "schema_version"])
    version = meta.get("schema_version") if meta is not None else None
    where = f"meta.schema_version{_at(_line(root, ['meta', 'schema_version']))}"
    if version is None:
        raise ProviderConfigError(path, [f"{where}: missing (the file's schema version, "
                                         "such as '1.0', is required)"])
    if not isinstance(version, str):
        raise ProviderConfigError(path, [
            f"{where}: {version!r} must be a string such as '1.0' (quote it: YAML reads "
            "1.0 as a number)"])
    match = _VERSION.match(version)
    if match is None:
        raise ProviderConfigError(path, [f"{where}: {version!r} is not a version such as "
                                         "'1.0'"])
    major, minor = int(match[1]), int(match[2])
    if major not in SCHEMA_VERSIONS:
        known = ", ".join(f"{m}.x" for m in sorted(SCHEMA_VERSIONS))
        raise ProviderConfigError(path, [
            f"{where}: schema major version {major} is not supported (this nova-lite "
            f"reads {known})"])
    if minor > SCHEMA_VERSIONS[major]:
        LOG.warning("Provider config file %s is at schema version %s; this nova-lite knows "
                    "%d.%d: it reads the file, but may ignore fields it does not know",
                    path, version, major, SCHEMA_VERSIONS[major])


def _schema_problem(error: jsonschema.ValidationError, root: yaml.Node | None) -> str:
    path = list(error.absolute_path)
    if isinstance(error.schema, dict) and error.schema.get(_KEY):
        path.append(str(error.instance))
    problem = error.message
    custom = error.schema.get(_PROBLEM) if isinstance(error.schema, dict) else None
    if isinstance(custom, dict):
        custom = custom.get(error.validator)
    if custom is not None:
        problem = f"{_shown(error.instance)} {custom}"
    return f"{format_path(path)}{_at(_line(root, path))}: {problem}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def format_path(path: Sequence[str | int]) -> str:
    """``providers[1].inventories.additional[0].CUSTOM_FOO.total``."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else ("." if text else "") + str(step)
    return text or "the document"


def _at(line: int | None) -> str:
    return f" (line {line})" if line is not None else ""


def _line(root: yaml.Node | None, path: Iterable[str | int]) -> int | None:
    """The 1-based line of ``path`` in the document (of its deepest part found)."""
    node = root
    if node is None:
        return None
    for step in path:
        if isinstance(node, yaml.MappingNode):
            found = [v for k, v in node.value if isinstance(k, yaml.ScalarNode)
                     and k.value == str(step)]
            if not found:
                break
            node = found[0]
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) \
                and 0 <= step < len(node.value):
            node = node.value[step]
        else:
            break
    return node.start_mark.line + 1


__all__ = ["COMPUTE_NODE", "SCHEMA", "SCHEMA_VERSIONS", "MAX_AMOUNT", "MAX_PROBLEMS",
           "Document", "read_document", "format_path"]
