"""A history checker: replays what several processes did to each node, in
generation order, and verifies every decision against the node as it was.

Each process logs (see :mod:`tests.reliability.chaos`) every operation it
attempts, one JSON object a line, with its outcome and the generation of
the node it committed at (or, for a refused claim, the generation its final
decision saw).  A node's generation moves by exactly one with every change
to what a claim decides on, so the committed operations of one node, sorted
by generation, are its whole history:

- a claim admitted at ``g`` must fit the node at ``g - 1``: owned by the
  claiming host, and ``used + requested <= capacity`` in every class it asks
  for;
- a claim refused at ``g`` must not fit the node at ``g``;
- two writes at one generation, or a generation no logged write explains,
  are violations (something committed that nobody decided);
- an audit sets the node's capacity and owner (it is idempotent, so one
  that changed nothing may share its generation with the write before it).

At the end the replayed usage must equal the records', nothing may be held
by a deleted instance, and no instance may have two moves in progress.
"""

import collections
import json

import attrs

WRITES = ("claim", "resize", "unshelve", "free", "confirm", "revert")


@attrs.define
class NodeState:
    """One node as the replay has it."""

    generation: int = 0
    owner: str | None = None
    capacity: dict = attrs.Factory(dict)
    #: consumer uuid -> (instance uuid, {rc: amount})
    held: dict = attrs.Factory(dict)

    def used(self):
        total = collections.Counter()
        for _, amounts in self.held.values():
            total.update(amounts)
        return dict(total)

    def problems(self, host, amounts):
        """Why a claim of ``amounts`` by ``host`` does not fit (empty if it does)."""
        problems = []
        if self.owner != host:
            problems.append(f"owner is {self.owner}, not {host}")
        used = self.used()
        for rc, n in sorted(amounts.items()):
            if n > 0 and used.get(rc, 0) + n > self.capacity.get(rc, 0):
                problems.append(f"{rc}: used {used.get(rc, 0)} + {n} > "
                                f"capacity {self.capacity.get(rc, 0)}")
        return problems


def read_logs(paths):
    """Every event of the JSON-lines logs at ``paths``."""
    events = []
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    events.append(json.loads(line))
    return events


def _by_node(events):
    """``{node_uuid: [event, ...]}`` of the committed and refused events, per node."""
    nodes = collections.defaultdict(list)
    for event in events:
        if event.get("result") == "refused" and event.get("generation") is not None:
            nodes[event["node_uuid"]].append(event)
        elif event.get("result") in ("admitted", "ok"):
            if event["op"] in ("free", "confirm", "revert"):
                for node_uuid, generation in event["generations"].items():
                    nodes[node_uuid].append(dict(event, node_uuid=node_uuid,
                                                 generation=generation))
            else:
                nodes[event["node_uuid"]].append(event)
    return nodes


def _order(event):
    # At one generation: the write that made it, then audits (idempotent),
    # then refusals (they saw the node as of that generation).
    kind = 2 if event.get("result") == "refused" else (1 if event["op"] == "audit" else 0)
    return event["generation"], kind


def replay(events):
    """Replay ``events``; returns ``(violations, {node_uuid: NodeState}, renames)``."""
    violations = []
    renames = {}   # migration uuid -> instance uuid, once a resize is confirmed
    for event in events:
        if event["op"] == "confirm" and event.get("result") == "ok":
            renames[event["migration"]] = event["instance"]
    states = {}
    for node_uuid, node_events in sorted(_by_node(events).items()):
        state = states[node_uuid] = NodeState()
        for event in sorted(node_events, key=_order):
            where = (f"node {event.get('node')} ({node_uuid}) generation "
                     f"{event['generation']}: {event['op']} by pid {event['pid']} "
                     f"seq {event['seq']}")
            generation = event["generation"]
            refused = event.get("result") == "refused"
            if refused:
                if generation != state.generation:
                    violations.append(f"{where}: refused at a generation the history never "
                                      f"reached after {state.generation}")
                elif not state.problems(event["host"], event["amounts"]):
                    violations.append(f"{where}: refused {event['amounts']} but it fits "
                                      f"(used {state.used()}, capacity {state.capacity})")
                continue
            if event["op"] == "audit":
                if generation not in (state.generation, state.generation + 1):
                    violations.append(f"{where}: audit committed at {generation} after "
                                      f"{state.generation}: a write nobody logged")
                elif generation == state.generation and (
                        state.capacity != event["capacity"] or state.owner != event["host"]):
                    violations.append(f"{where}: the audit changed the node (capacity "
                                      f"{event['capacity']}, owner {event['host']}) without "
                                      "moving its generation")
                state.generation = generation
                state.capacity = dict(event["capacity"])
                state.owner = event["host"]
                continue
            if generation != state.generation + 1:
                violations.append(f"{where}: committed at {generation} after "
                                  f"{state.generation}: "
                                  + ("two writes at one generation" if generation
                                     <= state.generation else "a write nobody logged"))
            state.generation = max(state.generation, generation)
            _apply(state, event, renames, where, violations)
    return violations, states, renames


def _apply(state, event, renames, where, violations):
    op = event["op"]
    if op in ("claim", "resize", "unshelve"):
        problems = state.problems(event["host"], event["amounts"])
        if problems:
            violations.append(f"{where}: admitted {event['amounts']} but "
                              + "; ".join(problems))
        state.held[event["consumer"]] = (event["instance"], dict(event["amounts"]))
    elif op == "free":
        for consumer in [c for c, (i, _) in state.held.items() if i == event["instance"]]:
            del state.held[consumer]
    elif op == "confirm":
        _remove(state, event["instance"], renames)
        migration = event["migration"]
        if migration in state.held:
            state.held[event["instance"]] = state.held.pop(migration)
    elif op == "revert":
        _remove(state, event["migration"], renames)


def _remove(state, consumer, renames):
    if consumer in state.held:
        del state.held[consumer]
        return
    for held in list(state.held):
        if renames.get(held) == consumer:
            del state.held[held]
            return


def check(events, records):
    """Every violation of ``events`` against themselves and the final ``records``.

    ``records``: ``{"usage": {node_uuid: {rc: n}}, "deleted_holding": [...],
    "double_moves": [...]}`` read from the store after every process
    stopped.
    """
    violations, states, _ = replay(events)
    for node_uuid, state in sorted(states.items()):
        recorded = {rc: n for rc, n in records["usage"].get(node_uuid, {}).items() if n}
        replayed = {rc: n for rc, n in state.used().items() if n}
        if recorded != replayed:
            violations.append(f"node {node_uuid}: the records hold {recorded} but the history "
                              f"adds up to {replayed}")
    violations.extend(f"deleted instance {u} still holds an allocation"
                      for u in records["deleted_holding"])
    violations.extend(f"instance {u} has more than one move in progress"
                      for u in records["double_moves"])
    return violations
