"""Which of the hosts that are down one live compute service takes on in a pass.

Every live compute service records, in its pass, the findings of hosts
whose service is down (their leaks, the work waiting for them) when no
live service did within the last pass interval.  In a large outage that
is thousands of hosts: one pass taking them all on would take minutes, the
service would miss its own heartbeats, look down itself, and the outage
would grow.  So a pass takes at most ``[compute] down_hosts_per_pass`` of
them, and each live service takes them in an order of its own (a hash of
its host name with each down host's), so that the live services between
them cover different hosts in the same interval instead of all taking the
same first few.
"""

import hashlib
from collections.abc import Iterable


def _rank(peer: str, host: str) -> bytes:
    return hashlib.blake2b(f"{peer}\0{host}".encode(), digest_size=8).digest()


def down_hosts_share(down: Iterable[str], peer: str, limit: int) -> list[str]:
    """The hosts of ``down`` that live service ``peer`` takes on this pass: at
    most ``limit`` (>= 1), the first in ``peer``'s own order, then sorted by
    name.  The same arguments always give the same hosts."""
    ranked = sorted(set(down), key=lambda host: _rank(peer, host))
    return sorted(ranked[:limit])


__all__ = ["down_hosts_share"]
