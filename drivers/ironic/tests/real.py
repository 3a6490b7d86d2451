"""One real Ironic per test process, shared by the functional tests.

Starting Ironic takes ~3 s and stopping it ~3 s, so each test process (an
stestr worker) starts one on first use and stops it, by its PID, at exit.
Tests keep to their own nodes with a shard of their own.

A missing Ironic (no virtualenv and no way to create one, or a server that
will not start) skips the tests, or fails them when the environment
requires Ironic (``NOVA_LITE_REQUIRE=ironic`` or ``NOVA_LITE_REQUIRE_ALL=1``).
"""

import atexit
import re
import threading
import uuid

import fixtures

from nova_lite.testing import components

from nova_lite_ironic.testing.fleet import Fleet
from nova_lite_ironic.testing.ironic_server import IronicServer, IronicUnavailable

COMPONENT = "ironic"

_lock = threading.Lock()
_server = None
_problem = None


def server(test):
    """The shared :class:`IronicServer` (started on first use), or skip/fail ``test``."""
    global _server, _problem
    with _lock:
        if _server is None and _problem is None:
            candidate = IronicServer()
            try:
                candidate.setUp()
            except (IronicUnavailable, OSError) as exc:
                _problem = str(exc)
            except fixtures.MultipleExceptions as exc:   # setUp failed, cleanUp ran
                _problem = str(exc.args[0][1])
            else:
                _server = candidate
                atexit.register(candidate.cleanUp)
    components.require(test, COMPONENT, _problem)
    if _server.process is None or _server.process.poll() is not None:
        test.fail(f"the shared Ironic died: {_server.log_tail()}")
    return _server


def fleet(test):
    """A :class:`Fleet` on the shared server with a shard of this test's own."""
    srv = server(test)
    shard = "t-" + re.sub(r"[^a-z0-9]+", "-", test.id().rsplit(".", 1)[-1].lower())[:40] \
        + "-" + uuid.uuid4().hex[:8]
    helper = Fleet(srv.endpoint, shard=shard)
    test.addCleanup(helper.close)
    return helper


def count_node_lists(srv):
    """How many ``GET /v1/nodes?`` listings the server has logged so far."""
    with open(srv.log_path, encoding="utf-8", errors="replace") as handle:
        return sum(1 for line in handle if "GET /v1/nodes?" in line)


def count_node_gets(srv):
    """How many single-node ``GET /v1/nodes/<id>`` the server has logged so far."""
    pattern = re.compile(r"GET /v1/nodes/[0-9a-zA-Z_.-]+(\?\S*)? ")
    with open(srv.log_path, encoding="utf-8", errors="replace") as handle:
        return sum(1 for line in handle if pattern.search(line))
