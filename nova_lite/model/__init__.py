"""The claim model: what a claim asks for, whether it fits, and what it writes.

Records and pure functions, below both the resource tracker
(``nova_lite.compute``), which builds the requests, and the store
(:mod:`nova_lite.db`), which decides again under the node's lock and writes
the plans; as Nomad keeps its plan and its fit test below both its
scheduler and its plan applier.  Nothing here does I/O, and nothing here
imports from ``db``, ``compute``, ``scheduler``, ``cli`` or ``api``
(``tests/test_layers.py`` holds it to that).

- :mod:`nova_lite.model.requested`: the amounts and NUMA topology a flavor asks for;
- :mod:`nova_lite.model.fit`: whether amounts fit a node's inventories,
  usage and limits, and the same test as bounds on the usage;
- :mod:`nova_lite.model.usage`: a node record with allocations added or removed;
- :mod:`nova_lite.model.plans`: a claim's ask, request and plan;
- :mod:`nova_lite.model.decide`: the decision on one node record.
"""
