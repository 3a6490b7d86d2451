"""Which nodes a store alone writes of late, by its claims' compare-and-swaps.

A claim's compare-and-swap holds when the node moved on from exactly the
record the claim was decided on: nobody else wrote the node between the
read and the claim.  A store whose claims on a node keep holding is taken
for the node's only writer, and its claims there leave out the node's
``node_usage`` row (see :meth:`nova_lite.db.store.Store.claim`): the row
serves only a claim decided on a record another writer has moved on, and
the races are mutual (another writer's claims would move the generation
under this store's).
"""


class SwapStreaks:
    """Per node, how many of this store's claims in a row were compare-and-swaps.

    From ``after`` of them on, :meth:`alone` says the store alone writes
    the node; a claim that is not one starts the streak again from 0.  A
    node with no streak counted yet is taken as ``presumed_alone``: SQLite
    presumes it (a file seldom has two writers, and the row costs every
    claim a statement), PostgreSQL does not (its one-statement claim admits
    a stale claim on the row, which schedulers' builds depend on).

    Streaks are kept for at most ``most_nodes`` nodes: all are forgotten
    when one more would pass that (a store that claims on that many nodes
    is seldom any one's only writer).

    No lock guards the counts: threads that claim through one store at
    once may miscount a streak, which costs at most a usage row recorded
    or left out once too often.  No claim's outcome depends on it: a claim
    that leaves the row out is still a compare-and-swap, and the row
    vouches only for the generation it was recorded at.
    """

    def __init__(self, after: int, presumed_alone: bool, most_nodes: int = 4096) -> None:
        """:param after: the compare-and-swaps in a row (at least 1) after
            which the store alone writes a node.
        :param presumed_alone: whether a node with no streak yet counts as
            written by this store alone.
        :param most_nodes: the most nodes whose streaks are kept at once."""
        if after < 1 or most_nodes < 1:
            raise ValueError(f"SwapStreaks needs after >= 1 and most_nodes >= 1, got "
                             f"after={after}, most_nodes={most_nodes}")
        self.after = after
        self.presumed_alone = presumed_alone
        self.most_nodes = most_nodes
        # A node's streak when none is kept: the presumed state.
        self._unkept = after if presumed_alone else 0
        self._streaks: dict[str, int] = {}

    def alone(self, node_uuid: str) -> bool:
        """Whether this store has alone written ``node_uuid`` of late."""
        return self._streaks.get(node_uuid, self._unkept) >= self.after

    def count(self, node_uuid: str, swapped: bool) -> None:
        """Count one claim of this store on ``node_uuid``: ``swapped`` if its
        compare-and-swap held, else (it lost a race, or was decided on the
        records under the node's lock) the streak starts again."""
        streaks = self._streaks
        streak = min(streaks.get(node_uuid, self._unkept) + 1, self.after) if swapped else 0
        if streak == self._unkept:
            streaks.pop(node_uuid, None)
            return
        if node_uuid not in streaks and len(streaks) >= self.most_nodes:
            streaks.clear()
        streaks[node_uuid] = streak

    def __len__(self) -> int:
        """The nodes whose streaks are kept."""
        return len(self._streaks)


__all__ = ["SwapStreaks"]
