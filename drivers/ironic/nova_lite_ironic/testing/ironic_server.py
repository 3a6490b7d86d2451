"""A real OpenStack Ironic, run standalone for tests: :class:`IronicServer`.

Ironic lives in its own virtualenv (see ``tools/ironic-venv.sh``), never in
the project's.  The fixture writes a configuration that needs no other
service (``auth_strategy = noauth``, ``rpc_transport = none``, a SQLite
database, the ``fake-hardware`` type with fake interfaces, network
``noop``, ``dhcp_provider = none``), creates the schema with
``ironic-dbsync create_schema``, starts the single-process ``ironic``
command with the API on a free port of 127.0.0.1, waits until
``GET /v1/conductors`` answers, and on cleanup stops the process by its PID.

Typical start-up is about 3 s and shutdown about 3 s on a 2-core machine.
"""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import fixtures

LOG = logging.getLogger(__name__)

#: Microversion sent with the readiness probe (``/v1/conductors`` needs 1.49).
PROBE_API_VERSION = "1.49"
#: Seconds allowed for the server to answer its first probe.
DEFAULT_START_TIMEOUT = 90.0
#: Seconds allowed for a SIGTERM-ed server to exit before it is killed.
DEFAULT_STOP_TIMEOUT = 20.0
#: Name of the environment variable naming the Ironic virtualenv.
VENV_ENV = "NOVA_LITE_IRONIC_VENV"
#: Set to 0 to forbid creating the virtualenv (the tests then skip or fail).
INSTALL_ENV = "NOVA_LITE_IRONIC_INSTALL"
#: Name of the venv directory looked for above this package and the cwd.
VENV_DIRNAME = ".venv-ironic"
#: Conductor host name the test Ironic registers.
CONDUCTOR_HOST = "nova-lite-test-conductor"

_CONFIG_TEMPLATE = """\
[DEFAULT]
host = {host}
auth_strategy = noauth
rpc_transport = none
debug = {debug}
use_stderr = true
graceful_shutdown_timeout = 5
enabled_hardware_types = fake-hardware
enabled_bios_interfaces = fake,no-bios
enabled_boot_interfaces = fake
enabled_console_interfaces = fake,no-console
enabled_deploy_interfaces = fake
default_deploy_interface = fake
enabled_firmware_interfaces = fake,no-firmware
enabled_inspect_interfaces = fake,no-inspect
enabled_management_interfaces = fake
enabled_network_interfaces = noop
default_network_interface = noop
enabled_power_interfaces = fake
enabled_raid_interfaces = fake,no-raid
enabled_rescue_interfaces = fake,no-rescue
enabled_storage_interfaces = noop
enabled_vendor_interfaces = fake,no-vendor

[api]
host_ip = 127.0.0.1
port = {port}
api_workers = 1

[database]
connection = sqlite:///{db_path}

[dhcp]
dhcp_provider = none

[conductor]
automated_clean = false
"""


class IronicUnavailable(RuntimeError):
    """The Ironic virtualenv is missing or the server would not start."""


def repo_root_candidates():
    """Directories that may hold ``.venv-ironic``: parents of this file and the cwd."""
    seen = []
    for start in (os.path.dirname(os.path.abspath(__file__)), os.getcwd()):
        path = start
        while True:
            if path not in seen:
                seen.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
    return seen


def find_venv():
    """Path of the Ironic virtualenv, or None if none is found.

    ``$NOVA_LITE_IRONIC_VENV`` wins; otherwise the nearest ``.venv-ironic``
    above this package or the current directory.
    """
    explicit = os.environ.get(VENV_ENV)
    if explicit:
        return explicit if os.path.isdir(explicit) else None
    for path in repo_root_candidates():
        candidate = os.path.join(path, VENV_DIRNAME)
        if os.path.isfile(os.path.join(candidate, "bin", "ironic")):
            return candidate
    return None


def venv_script():
    """Path of ``tools/ironic-venv.sh`` in a source checkout, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, os.pardir, os.pardir, "tools", "ironic-venv.sh")
    script = os.path.normpath(script)
    return script if os.path.isfile(script) else None


def ensure_venv(create=True, timeout=900):
    """Return the Ironic venv path, creating it with the script if allowed.

    Raises :class:`IronicUnavailable` with the reason when there is none.
    ``timeout`` bounds the creation, in seconds.  ``$NOVA_LITE_IRONIC_INSTALL=0``
    forbids creating it.
    """
    venv = find_venv()
    if venv and os.path.isfile(os.path.join(venv, "bin", "ironic")):
        return venv
    script = venv_script()
    if os.environ.get(INSTALL_ENV, "1").strip().lower() in ("0", "false", "no"):
        create = False
    if not create or script is None:
        raise IronicUnavailable(
            f"no Ironic virtualenv (set ${VENV_ENV} or run tools/ironic-venv.sh)")
    LOG.info("Creating the Ironic virtualenv with %s", script)
    done = subprocess.run(["bash", script], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise IronicUnavailable(
            f"{script} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    path = subprocess.run(["bash", script, "--print-path"], capture_output=True,
                          text=True, check=True).stdout.strip()
    if not os.path.isfile(os.path.join(path, "bin", "ironic")):
        raise IronicUnavailable(f"{script} ran but {path} holds no ironic command")
    return path


def free_port(host="127.0.0.1"):
    """A TCP port on ``host`` that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class IronicServer(fixtures.Fixture):
    """One standalone Ironic process with a fresh database.

    After setUp: ``endpoint`` (``http://127.0.0.1:<port>``), ``pid``,
    ``config_path``, ``log_path``, ``db_path`` and ``startup_seconds``.
    ``venv`` defaults to :func:`ensure_venv` (which may create it).
    """

    def __init__(self, venv=None, start_timeout=DEFAULT_START_TIMEOUT,
                 stop_timeout=DEFAULT_STOP_TIMEOUT, debug=False):
        super().__init__()
        self.venv = venv
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.debug = debug
        self.process = None
        self.endpoint = None
        self.startup_seconds = None

    @property
    def pid(self):
        """PID of the ``ironic`` process (None when not running)."""
        return self.process.pid if self.process is not None else None

    def _setUp(self):
        venv = self.venv or ensure_venv()
        self.venv = venv
        workdir = self.useFixture(fixtures.TempDir()).path
        self.db_path = os.path.join(workdir, "ironic.sqlite")
        self.config_path = os.path.join(workdir, "ironic.conf")
        self.log_path = os.path.join(workdir, "ironic.log")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        with open(self.config_path, "w", encoding="utf-8") as handle:
            handle.write(_CONFIG_TEMPLATE.format(
                host=CONDUCTOR_HOST, debug=str(self.debug).lower(), port=self.port,
                db_path=self.db_path))
        self._run_dbsync()
        started = time.monotonic()
        log = open(self.log_path, "ab")
        self.addCleanup(log.close)
        self.process = subprocess.Popen(
            [os.path.join(venv, "bin", "ironic"), "--config-file", self.config_path],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=workdir)
        self.addCleanup(self.stop)
        self._wait_ready()
        self.startup_seconds = time.monotonic() - started
        LOG.info("Ironic %s ready (pid %s) in %.1f s", self.endpoint, self.pid,
                 self.startup_seconds)

    def _run_dbsync(self):
        done = subprocess.run(
            [os.path.join(self.venv, "bin", "ironic-dbsync"), "--config-file",
             self.config_path, "create_schema"],
            capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise IronicUnavailable(
                f"ironic-dbsync create_schema failed ({done.returncode}): "
                f"{done.stderr.strip()[-2000:]}")

    def probe(self, timeout=2.0):
        """GET /v1/conductors; True when a live conductor is listed."""
        request = urllib.request.Request(
            f"{self.endpoint}/v1/conductors",
            headers={"X-OpenStack-Ironic-API-Version": PROBE_API_VERSION,
                     "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                if response.status != 200:
                    return False
                body = json.loads(response.read().decode("utf-8"))
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return any(c.get("alive") for c in body.get("conductors", []))

    def _wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise IronicUnavailable(
                    f"ironic exited with {self.process.returncode} before it was ready: "
                    f"{self.log_tail()}")
            if self.probe():
                return
            time.sleep(0.2)
        raise IronicUnavailable(
            f"ironic did not answer GET /v1/conductors within {self.start_timeout} s: "
            f"{self.log_tail()}")

    def log_tail(self, chars=3000):
        """The last ``chars`` characters of the server's log."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - chars))
                return handle.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def stop(self):
        """SIGTERM the server's PID; SIGKILL its process group if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        pid = process.pid
        os.kill(pid, signal.SIGTERM)
        try:
            process.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            LOG.warning("ironic pid %s ignored SIGTERM for %s s; killing it", pid,
                        self.stop_timeout)
            try:
                os.killpg(pid, signal.SIGKILL)  # the group this fixture created
            except ProcessLookupError:
                pass
            process.wait(timeout=self.stop_timeout)
        else:
            try:  # workers the master left behind, if any
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main(argv=None):
    """Run a test Ironic in the foreground until interrupted (manual checks)."""
    logging.basicConfig(level=logging.INFO)
    server = IronicServer()
    with server:
        print(f"Ironic at {server.endpoint} (pid {server.pid}); config "
              f"{server.config_path}; Ctrl-C to stop", flush=True)
        try:
            while server.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
