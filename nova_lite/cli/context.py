"""What every command needs: settings, the state path, the store, a driver.

The state path is chosen in this order, first match wins:

1. ``--state-path DIR``;
2. the environment variable ``NOVA_LITE_STATE_PATH``;
3. ``state_path`` in the ``[DEFAULT]`` section of ``--config-file``;
4. ``/var/lib/nova-lite`` if that directory exists and is writable;
5. ``./nova-lite-state`` (relative to the working directory, made absolute).

The system directory is never created by the command: packagers (or the
operator) create it, and until then a run on a fresh machine keeps its
state beside the user.
"""

import configparser
import logging
import os
from collections.abc import Mapping
from typing import Any

import attrs
import sqlalchemy as sa

from nova_lite import conf
from nova_lite.db import Store
from nova_lite.db.engine import normalize_url
from nova_lite.virt import loader
from nova_lite.virt.driver import ComputeDriver
from nova_lite.exception import CommandError, BadArguments  # noqa: F401 - public name here too

LOG = logging.getLogger(__name__)

#: Environment variable that sets the state path (below ``--state-path``).
STATE_PATH_ENV = "NOVA_LITE_STATE_PATH"
#: The system state path, used when it exists and is writable.
SYSTEM_STATE_PATH = conf.DEFAULT_STATE_PATH
#: The fallback state path, relative to the working directory.
LOCAL_STATE_PATH = "nova-lite-state"


@attrs.frozen
class StatePath:
    """The chosen state directory and where the choice came from."""

    path: str
    source: str


def _config_state_path(config_file: str) -> str | None:
    """``state_path`` as written in the config file's [DEFAULT], or None."""
    parser = configparser.ConfigParser(interpolation=None)
    with open(config_file, encoding="utf-8") as handle:
        parser.read_file(handle)
    value = parser.defaults().get("state_path", "").strip()
    return value or None


def choose_state_path(cli_value: str | None = None, config_file: str | None = None,
                      environ: Mapping[str, str] | None = None) -> StatePath:
    """Pick the state directory (see the module docstring); returns a StatePath."""
    environ = os.environ if environ is None else environ
    if cli_value is not None:
        if not cli_value.strip():
            raise BadArguments("--state-path must not be empty")
        return StatePath(os.path.abspath(cli_value), "--state-path")
    if environ.get(STATE_PATH_ENV, "").strip():
        return StatePath(os.path.abspath(environ[STATE_PATH_ENV]), f"${STATE_PATH_ENV}")
    if config_file is not None:
        from_file = _config_state_path(config_file)
        if from_file is not None:
            return StatePath(os.path.abspath(from_file), f"state_path in {config_file}")
    if os.path.isdir(SYSTEM_STATE_PATH) and os.access(SYSTEM_STATE_PATH, os.W_OK | os.X_OK):
        return StatePath(SYSTEM_STATE_PATH, "system default")
    return StatePath(os.path.abspath(LOCAL_STATE_PATH),
                     f"{SYSTEM_STATE_PATH} is missing or not writable")


def build_settings(config_file: str | None = None, database_url: str | None = None,
                   state_path: str | None = None,
                   environ: Mapping[str, str] | None = None) -> tuple[conf.Settings, StatePath]:
    """``(Settings, StatePath)`` from the global options.

    Raises :class:`~nova_lite.exception.InvalidConfig` naming the option and
    value for a bad config file or value.
    """
    if database_url is not None and not database_url.strip():
        raise BadArguments("--database-url must not be empty")
    overrides: dict[str, Any] = {}
    if config_file is not None:
        conf.load_settings(config_file)   # reports a bad file before anything else
    state = choose_state_path(state_path, config_file, environ)
    overrides["state_path"] = state.path
    if database_url is not None:
        overrides["database_url"] = database_url
    if config_file is not None:
        settings = conf.load_settings(config_file, **overrides)
    else:
        settings = conf.Settings(**overrides)
    LOG.debug("State path %s (%s); database %s", state.path, state.source,
              settings.redacted_database_url())
    return settings, state


def _sqlite_file(url: str) -> str | None:
    if not url.startswith("sqlite"):
        return None
    try:
        path = sa.engine.make_url(url).database
    except sa.exc.ArgumentError:
        return None
    return path if path and path != ":memory:" else None


class CliContext:
    """Settings and resources shared by the commands of one invocation."""

    def __init__(self, settings: conf.Settings, state: StatePath) -> None:
        self.settings = settings
        self.state = state
        self._stores: list[Store] = []

    @property
    def database(self) -> str:
        """The database URL with any password hidden."""
        return self.settings.redacted_database_url()

    def require_database_file(self) -> None:
        """Fail clearly when the configured database is a SQLite file that does not exist."""
        path = _sqlite_file(self.settings.database_url)
        if path is not None and not os.path.exists(path):
            raise CommandError(
                f"No nova-lite database at {path} (state path {self.state.path}, "
                f"{self.state.source}). Run 'nova-lite compute --once' or 'nova-lite db "
                "sync' first, or pass --state-path, --database-url or --config-file.")

    def open_store(self, must_exist: bool = False, readonly: bool = False,
                   initialise: bool = False) -> Store:
        """Open the record store.

        With ``must_exist`` an SQLite file that does not exist is an error
        (nothing is created).  ``readonly``: the command only reads; the
        store is opened read-only, never takes the write lock and never
        migrates the schema.  ``initialise``: create or upgrade the schema
        now (``db sync``), an empty SQLite file included.
        """
        url = self.settings.database_url
        if must_exist:
            self.require_database_file()
        path = _sqlite_file(url)
        if path is not None and os.path.isdir(path):
            raise CommandError(f"Cannot open database {self.database}: {path} is a "
                               "directory, not a SQLite file")
        try:
            store = Store(url, claim_retries=self.settings.claim_retries,
                          busy_timeout=self.settings.database_busy_timeout,
                          readonly=readonly, initialise=initialise,
                          pooler=self.settings.database_pooler)
        except Exception as exc:   # noqa: BLE001 - shown to the operator, redacted
            raise CommandError(self._open_error(exc)) from exc
        self._stores.append(store)
        return store

    def _open_error(self, exc: BaseException) -> str:
        """One line saying the database cannot be opened and why, naming it once."""
        text = str(exc).strip()
        text = conf.redact_url(text.splitlines()[0]) if text else type(exc).__name__
        names = {self.database, conf.redact_url(normalize_url(self.settings.database_url))}
        for name in names:
            prefix = f"Cannot open database {name}: "
            if text.startswith(prefix):
                text = text[len(prefix):]
        if any(name in text for name in names):
            return text   # the store's own message already names the database
        return f"Cannot open database {self.database}: {text}"

    def load_driver(self, name: str, host: str) -> ComputeDriver:
        """Load driver ``name`` with these settings and ``init_host(host)`` it."""
        driver = loader.load_driver(name, settings=self.settings)
        driver.init_host(host)
        return driver

    def close(self) -> None:
        """Close every store opened here."""
        while self._stores:
            self._stores.pop().close()
