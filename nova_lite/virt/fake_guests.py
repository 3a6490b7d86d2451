"""Where the fake hypervisor keeps its guests: in memory, or in one file per host.

A fake host's guests must outlive the process that spawned them once the
compute service runs on a persistent database: a service killed and
restarted sees the guests it spawned before, and two processes serving one
host see the same guests.  :func:`guests_directory` says where a store's
guests live:

- a SQLite file ``sqlite:///PATH``: ``PATH.fake-guests/<host>.json``, beside
  the database (a test's temporary database has its own);
- any other database (PostgreSQL): ``<state_path>/fake-guests/<digest>/<host>.json``,
  where ``<digest>`` is a short SHA-256 of the URL without its password;
- in-memory SQLite (``sqlite://``) or no store: nowhere on disk
  (:class:`Guests`).

:class:`FileGuests` makes every operation one step between processes: it
takes an exclusive :func:`fcntl.flock` on ``<host>.json.lock``, reads the
file, changes it, writes it whole under a temporary name and renames it into
place (:func:`os.replace`), then lets go.  A parsed file is cached by
(inode, mtime in ns, size); every write gives the file an mtime above the
previous one, so a file another process changed is always read again, and an
unchanged one is never parsed twice.  The file survives a killed process
(SIGKILL), not a lost machine: it is not fsync'ed.
"""

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs
import sqlalchemy as sa

from nova_lite import conf
from nova_lite.db.engine import is_memory_sqlite, normalize_url, sqlite_file_path
from nova_lite.exception import InvalidInput, NovaLiteError
from nova_lite.objects import Flavor

LOG = logging.getLogger(__name__)

#: The ``format`` of the guests files this module reads and writes.
FORMAT = 1
#: The suffix of a SQLite database's path that names its guests directory.
SQLITE_SUFFIX = ".fake-guests"
#: The directory under ``state_path`` of the guests of non-SQLite databases.
STATE_SUBDIR = "fake-guests"
#: How many hex digits of the URL's SHA-256 name a database's directory.
DIGEST_LENGTH = 16

_T = TypeVar("_T")


class FakeGuestsError(NovaLiteError):
    """A fake host's guests file cannot be read or written; the message names it."""


@attrs.frozen
class Guest:
    """One fake guest: the node it runs on and what it uses.

    ``memory_mb`` in MiB; ``disk_gb`` in GiB (the flavor's root plus
    ephemeral disk); ``vcpus`` a count.
    """

    node: str
    vcpus: int
    memory_mb: int
    disk_gb: int

    @classmethod
    def of(cls, node: str, flavor: Flavor) -> "Guest":
        """The guest of ``flavor`` on ``node``."""
        return cls(node=node, vcpus=flavor.vcpus, memory_mb=flavor.memory_mb,
                   disk_gb=flavor.root_gb + flavor.ephemeral_gb)


@attrs.frozen
class NodeUsage:
    """What the guests of one node use: vCPUs, MiB of memory, GiB of disk."""

    vcpus: int = 0
    memory_mb: int = 0
    disk_gb: int = 0


_NO_USAGE = NodeUsage()
_GUEST_FIELDS = ("vcpus", "memory_mb", "disk_gb")


class GuestTable:
    """The guests of one host: ``{instance uuid: Guest}``, indexed by node.

    Each node's usage is summed once and kept until one of its guests
    changes; each guest's JSON text is kept until it changes, so writing
    the table again costs a join, not an encoding of every guest.
    """

    def __init__(self, guests: Iterable[tuple[str, Guest]] = ()) -> None:
        self._guests: dict[str, Guest] = {}
        self._on: dict[str, dict[str, Guest]] = {}
        self._usage: dict[str, NodeUsage] = {}
        # {instance uuid: its JSON text}, kept once the table was encoded
        self._text: dict[str, str] | None = None
        for instance_uuid, guest in guests:
            self.put(instance_uuid, guest)

    def __len__(self) -> int:
        return len(self._guests)

    def items(self) -> list[tuple[str, Guest]]:
        """Every ``(instance uuid, Guest)``."""
        return list(self._guests.items())

    def uuids(self) -> list[str]:
        """The guests' instance uuids, sorted."""
        return sorted(self._guests)

    def put(self, instance_uuid: str, guest: Guest) -> None:
        """Add (or move) the guest of ``instance_uuid``."""
        self.remove(instance_uuid)
        self._guests[instance_uuid] = guest
        self._on.setdefault(guest.node, {})[instance_uuid] = guest
        self._usage.pop(guest.node, None)
        if self._text is not None:
            self._text[instance_uuid] = _guest_text(instance_uuid, guest)

    def remove(self, instance_uuid: str) -> bool:
        """Forget the guest of ``instance_uuid``; False if there was none."""
        guest = self._guests.pop(instance_uuid, None)
        if guest is None:
            return False
        if self._text is not None:
            del self._text[instance_uuid]
        on_node = self._on[guest.node]
        del on_node[instance_uuid]
        if not on_node:
            del self._on[guest.node]
        self._usage.pop(guest.node, None)
        return True

    def usage(self, node: str) -> NodeUsage:
        """The sum of what the guests on ``node`` use."""
        usage = self._usage.get(node)
        if usage is None:
            guests = self._on.get(node)
            if not guests:
                return _NO_USAGE
            usage = self._usage[node] = NodeUsage(
                vcpus=sum(g.vcpus for g in guests.values()),
                memory_mb=sum(g.memory_mb for g in guests.values()),
                disk_gb=sum(g.disk_gb for g in guests.values()))
        return usage

    def encode(self, host: str) -> bytes:
        """The guests file's content for ``host`` (UTF-8 JSON)."""
        if self._text is None:
            self._text = {u: _guest_text(u, g) for u, g in self._guests.items()}
        head = json.dumps({"format": FORMAT, "host": host}, separators=(",", ":"))[:-1]
        return (head + ',"guests":{' + ",\n".join(self._text.values()) + "}}\n").encode()

    @classmethod
    def decode(cls, data: bytes, path: str, host: str) -> "GuestTable":
        """The table a guests file holds.

        :raises FakeGuestsError: naming ``path`` and what is wrong, for
            anything but a well-formed file of ``host``.
        """
        def corrupt(why: str) -> FakeGuestsError:
            return FakeGuestsError(f"fake guests file {path} is corrupt: {why}; move it "
                                   "away (the host then has no guests) or restore it")

        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise corrupt(f"not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT \
                or not isinstance(doc.get("guests"), dict):
            raise corrupt(f"expected an object with \"format\": {FORMAT} and \"guests\"")
        if doc.get("host") != host:
            raise corrupt(f"it holds the guests of host {doc.get('host')!r}, not {host!r}")
        table = cls()
        for instance_uuid, entry in doc["guests"].items():
            try:
                table.put(instance_uuid, _guest_of(entry))
            except ValueError as exc:
                raise corrupt(f"guest {instance_uuid!r}: {exc}") from None
        return table


def _guest_text(instance_uuid: str, guest: Guest) -> str:
    """``"<uuid>":{...}``: one guest as the file holds it."""
    return json.dumps(instance_uuid) + ":" + json.dumps(
        {"node": guest.node, "vcpus": guest.vcpus, "memory_mb": guest.memory_mb,
         "disk_gb": guest.disk_gb}, separators=(",", ":"))


def _guest_of(entry: Any) -> Guest:
    """The Guest a file's entry describes; ValueError says what is wrong with it."""
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, not {entry!r}")
    node = entry.get("node")
    if not isinstance(node, str):
        raise ValueError(f"\"node\" must be a string, not {node!r}")
    sizes = {}
    for name in _GUEST_FIELDS:
        value = entry.get(name)
        if type(value) is not int or value < 0:
            raise ValueError(f"{name!r} must be an integer >= 0, not {value!r}")
        sizes[name] = value
    return Guest(node=node, **sizes)


class Guests:
    """The guests of one fake host; this class keeps them in memory only.

    Every operation is one step under a lock; :class:`FileGuests` makes the
    same steps on a file shared by processes.
    """

    #: The JSON file of the guests; None: in memory.
    path: str | None = None

    def __init__(self, guests: Iterable[tuple[str, Guest]] = ()) -> None:
        self._thread_lock = threading.Lock()
        self._table = GuestTable(guests)

    def spawn(self, instance_uuid: str, guest: Guest) -> None:
        """Add (or move) the guest of ``instance_uuid``."""
        def put(table: GuestTable) -> bool:
            table.put(instance_uuid, guest)
            return True
        self._change(put, create=True)

    def destroy(self, instance_uuid: str) -> None:
        """Remove the guest of ``instance_uuid``, if there is one."""
        self._change(lambda table: table.remove(instance_uuid), create=False)

    def clear(self) -> None:
        """Remove every guest."""
        def empty(table: GuestTable) -> bool:
            had = table.items()
            for instance_uuid, _ in had:
                table.remove(instance_uuid)
            return bool(had)
        self._change(empty, create=False)

    def merge(self, guests: Iterable[tuple[str, Guest]]) -> None:
        """Add ``guests`` (replacing those of the same uuids)."""
        guests = list(guests)

        def put_all(table: GuestTable) -> bool:
            for instance_uuid, guest in guests:
                table.put(instance_uuid, guest)
            return bool(guests)
        self._change(put_all, create=bool(guests))

    def uuids(self) -> list[str]:
        """The guests' instance uuids, sorted."""
        return self._read(GuestTable.uuids, [])

    def usage(self, node: str) -> NodeUsage:
        """What the guests on ``node`` use."""
        return self._read(lambda table: table.usage(node), _NO_USAGE)

    def items(self) -> list[tuple[str, Guest]]:
        """Every ``(instance uuid, Guest)``."""
        return self._read(GuestTable.items, [])

    def _read(self, fn: Callable[[GuestTable], _T], missing: _T) -> _T:
        """``fn(table)``; ``missing`` if there is no table (no file yet)."""
        with self._thread_lock:
            return fn(self._table)

    def _change(self, fn: Callable[[GuestTable], bool], create: bool) -> None:
        """``fn(table)``, which says whether it changed the table; ``create``: a
        file's directory may be made for it."""
        with self._thread_lock:
            fn(self._table)


class FileGuests(Guests):
    """The guests of ``host`` in ``<directory>/<host>.json``, shared by processes.

    :param directory: the directory of the guests files (made, 0700, by the
        first spawn; reads and destroys where there is no file find no
        guests and make nothing).
    :param host: the host name; one with ``/`` or NUL, or ``.``/``..``/empty,
        is refused, as it would not name a file in ``directory``.
    :raises nova_lite.exception.InvalidInput: for such a host name.
    :raises FakeGuestsError: from any operation, naming the file, when it
        cannot be read or written, or is corrupt (then it is left as it is).
    """

    def __init__(self, directory: str, host: str) -> None:
        if not host or host in (".", "..") or "/" in host or "\0" in host:
            raise InvalidInput(
                f"fake driver: host name {host!r} cannot name a guests file in {directory}: "
                "it must be non-empty, not '.' or '..', and hold no '/' or NUL")
        super().__init__()
        self.directory = directory
        self.host = host
        self.path = self._file = os.path.join(directory, host + ".json")
        self._lock_path = self._file + ".lock"
        # ((st_ino, st_mtime_ns, st_size), table) of the file as last read or written
        self._cache: tuple[tuple[int, int, int], GuestTable] | None = None

    # -- the steps --------------------------------------------------------
    def _read(self, fn: Callable[[GuestTable], _T], missing: _T) -> _T:
        with self._thread_lock:
            fd = self._open_lock(create=False)
            if fd is None:
                return missing   # no file: nothing was ever spawned here
            try:
                self._flock(fd)
                table, _ = self._load()
                return fn(table)
            finally:
                os.close(fd)   # closing lets go of the flock

    def _change(self, fn: Callable[[GuestTable], bool], create: bool) -> None:
        with self._thread_lock:
            fd = self._open_lock(create=create)
            if fd is None:
                return   # no file: nothing to remove
            try:
                self._flock(fd)
                table, mtime_ns = self._load()
                try:
                    if fn(table):
                        self._write(table, mtime_ns)
                except BaseException:
                    self._cache = None   # the table may be changed: read the file again
                    raise
            finally:
                os.close(fd)

    def _open_lock(self, create: bool) -> int | None:
        """The lock file, open; None when there is nothing to lock.

        ``create`` (a spawn): the directory and the lock file are made if
        missing.  Otherwise a host without a guests file has no guests, and
        nothing is made for it (a read changes nothing on disk).
        """
        flags = os.O_RDWR | os.O_CLOEXEC
        try:
            if create:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
                return os.open(self._lock_path, flags | os.O_CREAT, 0o600)
            try:
                return os.open(self._lock_path, flags)
            except FileNotFoundError:
                if not os.path.exists(self._file):
                    return None
                return os.open(self._lock_path, flags | os.O_CREAT, 0o600)
        except OSError as exc:
            raise FakeGuestsError(
                f"cannot open the fake guests lock file {self._lock_path}: {exc}") from exc

    def _flock(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise FakeGuestsError(
                f"cannot lock the fake guests lock file {self._lock_path}: {exc}") from exc

    def _load(self) -> tuple[GuestTable, int]:
        """The file's table (from the cache if the file is unchanged) and its mtime (ns)."""
        try:
            with open(self._file, "rb") as f:
                st = os.fstat(f.fileno())
                key = (st.st_ino, st.st_mtime_ns, st.st_size)
                if self._cache is not None and self._cache[0] == key:
                    return self._cache[1], st.st_mtime_ns
                data = f.read()
        except FileNotFoundError:
            self._cache = None
            return GuestTable(), 0
        except OSError as exc:
            raise FakeGuestsError(f"cannot read the fake guests file {self._file}: {exc}") \
                from exc
        LOG.debug("Reading fake guests file %s (%d bytes)", self._file, len(data))
        self._cache = None
        table = GuestTable.decode(data, self._file, self.host)
        self._cache = (key, table)
        return table, st.st_mtime_ns

    def _write(self, table: GuestTable, previous_mtime_ns: int) -> None:
        """Replace the file with ``table``, its mtime above ``previous_mtime_ns``."""
        data = table.encode(self.host)
        temporary = f"{self._file}.{os.getpid()}.{uuidlib.uuid4().hex}.tmp"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    # Strictly later than the file it replaces, even within
                    # one tick of a coarse clock: the cache key always moves.
                    mtime_ns = max(time.time_ns(), previous_mtime_ns + 1)
                    os.utime(f.fileno(), ns=(mtime_ns, mtime_ns))
                    st = os.fstat(f.fileno())
                os.replace(temporary, self._file)
            except BaseException:
                if os.path.exists(temporary):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            raise FakeGuestsError(f"cannot write the fake guests file {self._file}: {exc}") \
                from exc
        self._cache = ((st.st_ino, st.st_mtime_ns, st.st_size), table)


def url_without_password(url: str) -> str:
    """``url`` with its password removed (from the user part and the query)."""
    try:
        parsed = sa.engine.make_url(normalize_url(url))
    except sa.exc.ArgumentError:
        return conf.redact_url(url)
    return sa.engine.URL.create(
        parsed.drivername, username=parsed.username, host=parsed.host, port=parsed.port,
        database=parsed.database,
        query={k: val for k, val in parsed.query.items() if k.lower() != "password"},
    ).render_as_string(hide_password=False)


def guests_directory(store: object, settings: conf.Settings) -> str | None:
    """The directory of the guests files of ``store``'s hosts, or None for memory.

    :param store: a :class:`~nova_lite.db.Store` (its ``url`` is read), or
        anything else (memory).
    :param settings: the driver's settings (``state_path``, for databases
        that are not SQLite files).
    :returns: ``<PATH>.fake-guests`` for ``sqlite:///PATH``;
        ``<state_path>/fake-guests/<digest>`` for any other persistent
        database; None for ``sqlite://`` or a store without a URL.
    """
    url = getattr(store, "url", None)
    if not isinstance(url, str) or is_memory_sqlite(url):
        return None
    if normalize_url(url).startswith("sqlite"):
        path, _ = sqlite_file_path(url)
        return os.path.abspath(path) + SQLITE_SUFFIX if path else None
    digest = hashlib.sha256(url_without_password(url).encode()).hexdigest()[:DIGEST_LENGTH]
    return os.path.join(os.path.abspath(settings.state_path), STATE_SUBDIR, digest)


__all__ = ["FakeGuestsError", "Guest", "NodeUsage", "GuestTable", "Guests", "FileGuests",
           "guests_directory", "url_without_password"]
