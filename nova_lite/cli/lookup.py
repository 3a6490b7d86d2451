"""Finding what a command names: nodes, hosts and servers.

One rule for every command: a name that matches nothing is an error (exit
status 1) that names it and what is known; a name that matches several
records (a node name on several hosts) is a bad argument (exit status 2)
that says how to narrow it.  Nothing is changed either way.
"""

import argparse
from collections.abc import Iterable

from nova_lite.db.store import Store
from nova_lite.exception import BadArguments, CommandError, InstanceNotFound
from nova_lite.objects import ComputeNode, Instance


def node_arguments(parser: argparse.ArgumentParser) -> None:
    """``NODE`` (name or uuid) and ``--host``."""
    parser.add_argument("node", metavar="NODE", help="Node name or uuid.")
    parser.add_argument("--host", metavar="HOST",
                        help="Service host of the node (needed if the name is on several "
                             "hosts).")


def child_generations(store: Store, node: ComputeNode) -> dict[str, int] | None:
    """Each child provider's recorded generation by name (None: the node
    reports no child, so nothing is read)."""
    if node.resources is None or not node.resources.providers:
        return None
    return {c.provider.name: c.generation
            for c in store.child_providers([node.uuid]).get(node.uuid, ())}


def find_node(store: Store, ident: str, host: str | None = None) -> ComputeNode:
    """The compute node record named ``ident`` (node name or uuid), on ``host`` if given.

    Raises :class:`CommandError` naming it and the known nodes when none
    matches, :class:`BadArguments` when the name is on several hosts.
    """
    if not ident.strip():
        raise BadArguments("NODE must not be empty; nothing was changed")
    nodes = store.get_compute_nodes(host)
    found = [n for n in nodes if ident in (n.nodename, n.uuid)]
    where = f" on host {host!r}" if host else ""
    if not found:
        known = ", ".join(f"{n.host}/{n.nodename}" for n in nodes) or "none"
        raise CommandError(f"Compute node {ident!r} not found{where}. Known nodes: {known}")
    if len(found) > 1:
        hosts = ", ".join(sorted(n.host for n in found))
        raise BadArguments(f"Compute node {ident!r} exists on several hosts ({hosts}); "
                           "pass --host. Nothing was changed")
    return found[0]


def check_host(nodes: Iterable[ComputeNode], host: str) -> None:
    """Raise :class:`CommandError` naming the known hosts unless a node of ``nodes``
    is on ``host``."""
    if not any(n.host == host for n in nodes):
        known = ", ".join(sorted({n.host for n in nodes})) or "none"
        raise CommandError(f"No compute nodes on host {host!r}; known hosts: {known}")


def find_instance(store: Store, ident: str, live: bool = False) -> Instance:
    """The server (instance) with uuid ``ident``.

    Raises :class:`CommandError` naming it when there is none, or (with
    ``live``) when it is deleted or offloaded and holds nothing.
    """
    try:
        inst = store.get_instance(ident)
    except InstanceNotFound:
        raise CommandError(f"No server {ident!r}; nothing was changed") from None
    if live and not inst.holds_resources:
        raise CommandError(f"Server {inst.uuid} is already {inst.vm_state}; "
                           "nothing was changed")
    return inst
