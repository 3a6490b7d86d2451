"""``nova-lite``: the command-line entry point (cliff application).

Global options (before the command): ``--config-file PATH``,
``--database-url URL``, ``--state-path DIR``, plus cliff's ``-v``/``-q``,
``--log-file`` and ``--debug``.  Exit status: 0 success, 1 error, 2 bad
arguments, 3 differences found by ``audit``.
"""

import argparse
import importlib.metadata
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from cliff import app, commandmanager
from cliff.command import Command

from nova_lite import conf
from nova_lite.cli import context

LOG = logging.getLogger(__name__)

DESCRIPTION = ("nova-lite: virt drivers, resource tracking and claims for compute hosts. "
               "Database passwords are never printed.")

SERVICE_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

def redact_text(text: str) -> str:
    """Hide the password of every database URL in ``text`` (:func:`conf.redact_url`)."""
    return conf.redact_url(text)


class RedactingFormatter(logging.Formatter):
    """A log formatter that hides passwords in URLs."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def _version() -> str:
    try:
        return importlib.metadata.version("nova-lite")
    except importlib.metadata.PackageNotFoundError:   # pragma: no cover - not installed
        return "unknown"


class NovaLiteApp(app.App):
    """The ``nova-lite`` application; commands come from ``nova_lite.cli``."""

    NAME = "nova-lite"
    #: Console log level per ``-q``/default/``-v``/``-vv``.
    LOG_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO}

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 stderr: TextIO | None = None) -> None:
        super().__init__(
            description=DESCRIPTION, version=_version(),
            command_manager=commandmanager.CommandManager("nova_lite.cli"),
            stdin=stdin, stdout=stdout, stderr=stderr, deferred_help=True)
        self._context: context.CliContext | None = None
        self._handlers: list[logging.Handler] = []
        self._root_level: int | None = None
        self.missing_command = False
        self._last_error: BaseException | None = None

    def build_option_parser(
            self, description: str | None, version: str | None,
            argparse_kwargs: dict[str, Any] | None = None,
    ) -> argparse.ArgumentParser:
        """cliff's options plus --config-file, --database-url and --state-path."""
        argparse_kwargs = dict(argparse_kwargs or {}, prog=self.NAME)
        parser = super().build_option_parser(description, version, argparse_kwargs)
        for action in parser._actions:
            if isinstance(action, argparse._VersionAction):
                action.version = f"{self.NAME} {version}"
        parser.add_argument(
            "--config-file", metavar="PATH",
            help="INI file with Nova's option names ([DEFAULT], [compute], [database], "
                 "[libvirt], ...). Default: none (built-in defaults).")
        parser.add_argument(
            "--database-url", metavar="URL",
            help="Record store URL (sqlite:////PATH/nova-lite.db, or postgresql://HOST/DB "
                 "for many hosts); overrides [database] connection. Default: "
                 "sqlite:///<state path>/nova-lite.db. Passwords in it are never printed.")
        parser.add_argument(
            "--state-path", metavar="DIR",
            help=f"State directory. Default: ${context.STATE_PATH_ENV}, else state_path "
                 f"from --config-file, else {context.SYSTEM_STATE_PATH} if it exists and is "
                 f"writable, else ./{context.LOCAL_STATE_PATH}.")
        return parser

    def configure_logging(self) -> None:
        """Log to stderr (WARNING by default, -v INFO, -vv DEBUG), redacting URLs."""
        root = logging.getLogger()
        before = list(root.handlers)
        self._root_level = root.level
        super().configure_logging()
        level = self.LOG_LEVELS.get(self.options.verbose_level, logging.DEBUG)
        for handler in root.handlers:
            if handler in before:
                continue
            self._handlers.append(handler)
            if type(handler) is logging.StreamHandler:
                handler.setFormatter(RedactingFormatter(self.CONSOLE_MESSAGE_FORMAT))
                handler.setLevel(level)
            else:
                handler.setFormatter(RedactingFormatter(self.LOG_FILE_MESSAGE_FORMAT))

    def service_logging(self) -> None:
        """Log like a service: INFO by default (unless -q), with time, level and logger."""
        for handler in self._handlers:
            if type(handler) is logging.StreamHandler:
                if self.options.verbose_level >= 1:
                    handler.setLevel(min(handler.level, logging.INFO))
                handler.setFormatter(RedactingFormatter(SERVICE_LOG_FORMAT))

    def context(self) -> context.CliContext:
        """The :class:`~nova_lite.cli.context.CliContext`, built on first use."""
        if self._context is None:
            settings, state = context.build_settings(
                config_file=self.options.config_file, database_url=self.options.database_url,
                state_path=self.options.state_path)
            self._context = context.CliContext(settings, state)
        return self._context

    def initialize_app(self, argv: list[str]) -> None:
        """Refuse a --config-file that cannot be read, before any command runs."""
        path = self.options.config_file
        if path is not None and not os.path.isfile(path):
            raise context.CommandError(f"--config-file {path} cannot be read: no such file")
        if path is not None and not os.access(path, os.R_OK):
            raise context.CommandError(f"--config-file {path} cannot be read: permission "
                                       "denied")

    def clean_up(self, cmd: Command, result: int, err: BaseException | None) -> None:
        """Remember the command's error: bad arguments exit with status 2."""
        self._last_error = err

    def run_subcommand(self, argv: list[str]) -> int:
        """Run one command; an unknown command or option is reported on stderr.

        Exit status 2 for an unknown option before the command and for
        :class:`~nova_lite.cli.context.BadArguments` (nothing was changed).
        """
        if argv and argv[0].startswith("-"):
            self.stderr.write(f"{self.NAME}: unknown option {argv[0]!r} (global options "
                              f"go before the command; see '{self.NAME} --help')\n")
            return 2
        self._last_error = None
        code = self._run_subcommand(argv)
        if isinstance(self._last_error, context.BadArguments):
            return 2
        return code

    def _run_subcommand(self, argv: list[str]) -> int:
        try:
            self.command_manager.find_command(argv)
        except ValueError:
            stdout, self.stdout = self.stdout, self.stderr
            try:
                return super().run_subcommand(argv)
            finally:
                self.stdout = stdout
        return super().run_subcommand(argv)

    def interact(self) -> None:
        """No interactive shell: without a command, print the help."""
        self.missing_command = True
        self.run_subcommand(["help"])

    def close(self) -> None:
        """Close stores and remove the log handlers this run added."""
        if self._context is not None:
            self._context.close()
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
        self._handlers = []
        if self._root_level is not None:
            root.setLevel(self._root_level)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``nova-lite`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    application = NovaLiteApp()
    try:
        code = application.run(argv)
    except SystemExit as exc:   # --help, --version and argparse errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        application.close()
    if application.missing_command:
        application.stderr.write("nova-lite: a command is required (see the list above)\n")
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
