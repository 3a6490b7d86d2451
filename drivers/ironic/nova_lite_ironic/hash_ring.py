"""A consistent hash ring: which compute service owns which node.

Each host is placed on a 64-bit ring at ``points_per_host`` positions; a
key (a node uuid) belongs to the first host point at or after its own
hash.  When a host joins or leaves, only the keys next to its points move,
about ``1 / len(hosts)`` of them.  Every service that sees the same host set
computes the same owner for every node, with no coordination.

Host names are compared without case, as Nova does: ``Host1`` and
``host1`` are one ring member (the ring holds them lower-cased).
"""

import bisect
import hashlib

#: Default points per host; more points give a more even split.
DEFAULT_POINTS_PER_HOST = 128


def _hash(text):
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def normalize_host(host):
    """The ring's name of ``host``: lower case, as Nova's ironic driver keys its ring."""
    return host.lower()


class HashRing:
    """A ring over ``hosts`` (any iterable of str; duplicates, also in case, ignored).

    Raises ValueError for an empty host set or a non-positive
    ``points_per_host``.
    """

    def __init__(self, hosts, points_per_host=DEFAULT_POINTS_PER_HOST):
        self.hosts = frozenset(normalize_host(h) for h in hosts)
        if not self.hosts:
            raise ValueError("a hash ring needs at least one host")
        if points_per_host < 1:
            raise ValueError(f"points_per_host must be >= 1, got {points_per_host}")
        self.points_per_host = points_per_host
        points = sorted((_hash(f"{host}#{i}"), host)
                        for host in self.hosts for i in range(points_per_host))
        self._keys = [p for p, _ in points]
        self._owners = [h for _, h in points]

    def owner(self, key):
        """The host (lower-cased) that owns ``key`` (a str)."""
        index = bisect.bisect_left(self._keys, _hash(key))
        if index == len(self._keys):
            index = 0
        return self._owners[index]

    def owns(self, host, key):
        """True if ``host`` (any case) owns ``key``."""
        return self.owner(key) == normalize_host(host)

    def __repr__(self):
        return f"HashRing({sorted(self.hosts)!r}, points_per_host={self.points_per_host})"
