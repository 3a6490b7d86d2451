"""The arguments of :class:`~nova_lite.db.Store` methods, checked before any statement.

The same answer on every backend: PostgreSQL refuses a NUL byte in any
statement and a value longer than its column in a write, where SQLite
would find nothing or store it.  Names that a write creates are checked
as the records check them (:func:`nova_lite.validators.check_text`);
names that are only looked up need be strings without a NUL byte.
"""

from typing import Any

from nova_lite import validators as v
from nova_lite.conf import DATABASE_POOLERS
from nova_lite.exception import InvalidInput, InvalidType


def check_store(url: Any, claim_retries: Any, busy_timeout: Any, pooler: Any = "none") -> None:
    """Raise InvalidInput naming the first wrong argument of ``Store(...)``."""
    v.check_type(url, str, "Store url (a database URL: 'sqlite:///PATH', 'sqlite://' or "
                 "'postgresql://...')")
    if not url.strip():
        raise InvalidInput("Store url must not be empty: give 'sqlite:///PATH', 'sqlite://' "
                           "or 'postgresql://...'")
    if isinstance(claim_retries, bool):
        raise InvalidType(f"Store claim_retries must be an integer, got {claim_retries!r}")
    v.check_type(claim_retries, int, "Store claim_retries")
    if claim_retries < 0:
        raise InvalidInput(f"Store claim_retries must be >= 0, got {claim_retries}")
    v.check_seconds(busy_timeout, "Store busy_timeout")
    v.check_type(pooler, str, "Store pooler")
    if pooler not in DATABASE_POOLERS:
        raise InvalidInput(f"Store pooler must be one of {', '.join(DATABASE_POOLERS)}, got "
                           f"{pooler!r}")


#: The bounded columns a Store method's name arguments are compared with.
UUID_ARGUMENTS = frozenset({"node_uuid", "instance_uuid"})


def check_names(**names: Any) -> None:
    """Raise InvalidInput unless each name given (None: not given) can be recorded.

    For the writes that create names (service rows, node rows): the same
    check on every backend (:func:`nova_lite.validators.check_text`),
    before any statement, where SQLite would store what PostgreSQL refuses.
    """
    for argument, value in names.items():
        if value is not None:
            limit = v.UUID_LENGTH if argument in UUID_ARGUMENTS else v.NAME_LENGTH
            v.check_text(value, argument, limit)


def check_lookup(optional: bool = False, **names: Any) -> None:
    """Raise InvalidInput unless each name can be looked up (with ``optional``,
    None means not given).

    A string without a NUL byte, which PostgreSQL refuses in a query and no
    record holds on any backend.  Anything else is looked up as it is (a
    record written before names were checked may hold it), and a name no
    record holds is simply not found, on every backend.
    """
    for argument, value in names.items():
        if value is None and optional:
            continue
        v.check_type(value, str, argument)
        if "\x00" in value:
            raise InvalidInput(v.text_problem(value, argument))
