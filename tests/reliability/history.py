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
- a confirm or revert is replayed as what its migration became (a confirm
  by the old flavor of a same-node move whose instance holds another one now
  reverts it: see the ``status`` it logs);
- an audit sets the node's capacity and owner (it is idempotent, so one
  that changed nothing may share its generation with the write before it);
- a heal step applied at ``g`` (it logs the generations it committed at and
  the allocations it removed) must remove only what the node held at
  ``g - 1``, and none of it may belong to a live consumer: a migration in
  progress whose services were both up, or an instance that no logged
  operation had freed on this node (a ``leak`` marks an instance deleted
  without freeing it: heal may remove it only if its read began after the
  leak committed; where the two overlap the log cannot tell);
- a heal step that finished a migration in progress while both its services
  were up is named even when it removed nothing.

A node's child providers (its GPUs) are replayed with it, under the node's
generation (a claim on a child commits with the node's next generation;
an audit records the children's inventories with the node's report):

- an audit sets each child's capacity (one that changed a child moved the
  node's generation too);
- a claim admitted at ``g`` must have landed what it asked of the classes
  only children offer (``child_amounts``) where its allocation says
  (``providers``), each amount whole on one child that offers the class,
  with ``used + amount <= capacity`` on that child at ``g - 1``, and on a
  child with the most room (none had more).  A child that shrank under its
  usage is over, as a shrunken node is: nothing more lands on it until
  frees bring it back under;
- a claim refused at ``g`` must not fit the node, nor its children: a
  refusal naming ``no child provider has room`` for a class must have had
  no child with room for that amount;
- every free, confirm, revert and heal step frees on each child what the
  consumer held there.

A node's PCI device providers (``[pci] report_in_placement``) are children
too, replayed by the same rules save "most room": a claim picks devices, and
the units follow them.  The audit says where each device is counted
(``pci_holders``: ``{address: [provider, class]}``), and a claim admitted at
``g`` must have picked (``pci_devices``) as many devices of each class as it
asked (``pci_amounts``), none held by another consumer of the node at
``g - 1``, and landed exactly one unit on the provider of each, in its
class, within the provider's capacity; a refusal that a node and its GPUs
would fit must have had fewer free units of an asked class than asked.  A
free, confirm (which hands the devices of a migration to its instance),
revert or heal step frees the consumer's devices with its units.

At the end each child's recorded usage must equal the replayed one, and
each child's recorded generation must equal the number of changes the
history made to it: one per claim that landed on it, per allocation
removed from it (a free, the old side of a confirm or the new of a revert,
a heal step) and per audit that changed its inventory (a new child starts
at 0; a confirm that hands a migration's allocation to its instance does
not move it).

At the end the replayed usage must equal the records', nothing may be held
by a deleted instance, no instance may have two moves in progress, and every
live consumer of the records holds its allocation: an instance that is not
deleted (a shelved-offloaded one only while an unshelve claim has placed it
on a node, whatever its task state) on its node, a migration in progress on
its destination.  A consumer that a heal step freed is named with that step.
"""

import collections
import json

import attrs

WRITES = ("claim", "resize", "unshelve", "free", "confirm", "revert")
#: Writes that log ``{node_uuid: generation}`` for every node they changed.
MULTI_NODE = ("free", "confirm", "revert", "heal")


def holds_resources(vm_state, node):
    """Whether an instance record in ``vm_state``, placed on ``node``, holds resources there.

    Never without a node, nor deleted; shelved-offloaded only while an
    unshelve claim has placed it on a node (shelve-offload clears the node),
    whatever its task state; placed in any other state, it does.
    """
    return node is not None and vm_state != "deleted"


@attrs.define
class NodeState:
    """One node as the replay has it."""

    generation: int = 0
    owner: str | None = None
    capacity: dict = attrs.Factory(dict)
    #: consumer uuid -> (instance uuid, {rc: amount})
    held: dict = attrs.Factory(dict)
    #: consumer uuid -> the operation that made it hold (for messages)
    origin: dict = attrs.Factory(dict)
    #: child name -> {rc: capacity}, as the last audit recorded
    children: dict = attrs.Factory(dict)
    #: consumer uuid -> {child name: {rc: amount}} it holds on the children
    on_children: dict = attrs.Factory(dict)
    #: child name -> how many changes the history made to it (its generation)
    child_changes: collections.Counter = attrs.Factory(collections.Counter)
    #: PCI address -> (provider name, rc) of the node's devices, as the last audit said
    pci_holders: dict = attrs.Factory(dict)
    #: consumer uuid -> the PCI addresses it holds on the node
    devices: dict = attrs.Factory(dict)

    def pci_children(self):
        """The names of the node's PCI device providers."""
        return {name for name, _ in self.pci_holders.values()}

    def pci_room(self, rc):
        """Free units of ``rc`` over the PCI device providers offering it."""
        used = self.child_used()
        return sum(caps[rc] - used.get(name, {}).get(rc, 0)
                   for name, caps in self.children.items()
                   if name in self.pci_children() and rc in caps)

    def pci_problems(self, consumer, asked, landed, devices):
        """Why units ``landed`` (``{child: {rc: n}}``) on the PCI providers are not
        one per device of ``devices`` (the addresses the claim picked), each on
        the provider of its device, for a claim asking ``asked`` (``{rc: n}``)."""
        problems = []
        used = self.child_used()
        units = collections.Counter()
        for name, amounts in sorted(landed.items()):
            for rc, n in sorted(amounts.items()):
                units[name, rc] += n
                cap = self.children.get(name, {}).get(rc)
                had = used.get(name, {}).get(rc, 0)
                if cap is None:
                    problems.append(f"PCI provider {name} does not offer {rc}")
                elif had + n > cap:
                    problems.append(f"PCI provider {name} {rc}: used {had} + {n} > capacity "
                                    f"{cap}")
        holders = collections.Counter()
        for address in devices:
            if address not in self.pci_holders:
                problems.append(f"device {address} is not one of the node's")
                continue
            holders[tuple(self.pci_holders[address])] += 1
            other = next((c for c, held in self.devices.items()
                          if address in held and c != consumer), None)
            if other is not None:
                problems.append(f"device {address} is held by {other} already")
        if units != holders:
            problems.append(f"the PCI units landed on {dict(units)} but the devices picked "
                            f"({', '.join(devices) or 'none'}) are on {dict(holders)}")
        picked = collections.Counter()
        for _, rc in holders.elements():
            picked[rc] += 1
        if {rc: n for rc, n in picked.items() if n} != {rc: n for rc, n in asked.items() if n}:
            problems.append(f"asked {asked} of the PCI devices but picked {list(devices)}")
        return problems

    def child_used(self):
        """``{child name: {rc: amount}}`` held on the children (zeros left out)."""
        total = collections.defaultdict(collections.Counter)
        for per_child in self.on_children.values():
            for name, amounts in per_child.items():
                total[name].update(amounts)
        return {name: {rc: n for rc, n in c.items() if n} for name, c in total.items()
                if any(c.values())}

    def child_room(self, rc, amount):
        """``(child name, free)`` of each child offering ``rc`` with room for ``amount``."""
        used = self.child_used()
        return [(name, caps[rc] - used.get(name, {}).get(rc, 0))
                for name, caps in sorted(self.children.items())
                if rc in caps and used.get(name, {}).get(rc, 0) + amount <= caps[rc]]

    def child_problems(self, asked, landed):
        """Why ``landed`` (``{child: {rc: n}}``) is not where a claim asking ``asked``
        (``{rc: n}``) of the children may land (empty if it is)."""
        problems = []
        used = self.child_used()
        sums = collections.Counter()
        for name, amounts in sorted(landed.items()):
            for rc, n in sorted(amounts.items()):
                sums[rc] += n
                caps = self.children.get(name)
                if caps is None or rc not in caps:
                    problems.append(f"child {name} does not offer {rc}")
                    continue
                had = used.get(name, {}).get(rc, 0)
                if had + n > caps[rc]:
                    problems.append(f"child {name} {rc}: used {had} + {n} > capacity "
                                    f"{caps[rc]}" + (" (the child is over: it shrank under "
                                                     "its usage)" if had > caps[rc] else ""))
                    continue
                free = caps[rc] - had
                roomier = [f"{other} had {room} free" for other, room in self.child_room(rc, n)
                           if room > free]
                if roomier:
                    problems.append(f"{rc} landed on child {name} with {free} free while "
                                    + ", ".join(roomier))
        if {rc: n for rc, n in sums.items() if n} != {rc: n for rc, n in asked.items() if n}:
            problems.append(f"asked {asked} of the children but landed {landed}")
        return problems

    def refusal_problems(self, event):
        """Why refusing ``event``'s claim is wrong (empty if some rule refuses it)."""
        asked = event.get("child_amounts") or {}
        wrong = []
        for reason in event.get("reasons") or ():
            rc, sep, rest = reason.partition(": no child provider has room for ")
            if not sep or rc not in asked:
                continue
            room = self.child_room(rc, asked[rc])
            if room:
                used = self.child_used()
                wrong.append(f"refused: {reason.split(' (')[0]}, but child {room[0][0]} had "
                             f"room (used {used.get(room[0][0], {})}, capacity "
                             f"{self.children[room[0][0]]})")
        if wrong:
            return wrong
        if self.problems(event["host"], event["amounts"]) or any(
                not self.child_room(rc, n) for rc, n in asked.items() if n > 0) or any(
                self.pci_room(rc) < n for rc, n in (event.get("pci_amounts") or {}).items()):
            return []
        return [f"refused {event['amounts']} (of the children {asked}, of the PCI devices "
                f"{event.get('pci_amounts') or {}}) but it fits (used "
                f"{self.used()}, capacity {self.capacity}; children used {self.child_used()}, "
                f"capacity {self.children})"]

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
        if event["op"] not in (*WRITES, "audit", "heal"):
            continue   # spawn, leak: they move no generation
        if event.get("result") == "refused" and event.get("generation") is not None:
            nodes[event["node_uuid"]].append(event)
        elif event.get("result") in ("admitted", "ok"):
            if event["op"] in MULTI_NODE:
                for node_uuid, generation in (event.get("generations") or {}).items():
                    name = (event.get("nodes") or {}).get(node_uuid, event.get("node"))
                    nodes[node_uuid].append(dict(event, node_uuid=node_uuid, node=name,
                                                 generation=generation))
            else:
                nodes[event["node_uuid"]].append(event)
    return nodes


def _step(event):
    """How a message names the operation of ``event``."""
    if event["op"] == "heal":
        return f"heal {event.get('kind')} {event.get('subject')}"
    return event["op"]


def _order(event):
    # At one generation: the write that made it, then audits (idempotent),
    # then refusals (they saw the node as of that generation).
    kind = 2 if event.get("result") == "refused" else (1 if event["op"] == "audit" else 0)
    return event["generation"], kind


def replay(events):
    """Replay ``events``; returns ``(violations, {node_uuid: NodeState}, renames)``."""
    violations = []
    renames = {}   # migration uuid -> instance uuid, once a resize is confirmed
    leaked = {}    # instance uuid -> its leak event
    for event in events:
        if _done(event) == "confirm" and event.get("result") == "ok":
            renames[event["migration"]] = event["instance"]
        elif event["op"] == "leak" and event.get("result") == "ok":
            leaked[event["instance"]] = event
    states = {}
    for node_uuid, node_events in sorted(_by_node(events).items()):
        state = states[node_uuid] = NodeState()
        for event in sorted(node_events, key=_order):
            where = (f"node {event.get('node')} ({node_uuid}) generation "
                     f"{event['generation']}: {_step(event)} by pid {event['pid']} "
                     f"seq {event['seq']}")
            generation = event["generation"]
            refused = event.get("result") == "refused"
            if refused:
                if generation != state.generation:
                    violations.append(f"{where}: refused at a generation the history never "
                                      f"reached after {state.generation}")
                else:
                    violations.extend(f"{where}: {problem}"
                                      for problem in state.refusal_problems(event))
                continue
            if event["op"] == "audit":
                if generation not in (state.generation, state.generation + 1):
                    violations.append(f"{where}: audit committed at {generation} after "
                                      f"{state.generation}: a write nobody logged")
                elif generation == state.generation and (
                        state.capacity != event["capacity"] or state.owner != event["host"]
                        or state.children != event.get("children", state.children)):
                    violations.append(f"{where}: the audit changed the node (capacity "
                                      f"{event['capacity']}, children "
                                      f"{event.get('children', state.children)}, owner "
                                      f"{event['host']}) without moving its generation")
                state.generation = generation
                state.capacity = dict(event["capacity"])
                state.owner = event["host"]
                _audit_children(state, event.get("children", state.children))
                state.pci_holders = {address: tuple(holder) for address, holder in
                                     (event.get("pci_holders") or {}).items()}
                continue
            if generation != state.generation + 1:
                violations.append(f"{where}: committed at {generation} after "
                                  f"{state.generation}: "
                                  + ("two writes at one generation" if generation
                                     <= state.generation else "a write nobody logged"))
            state.generation = max(state.generation, generation)
            if event["op"] == "heal":
                _heal(state, event, node_uuid, renames, leaked, where, violations)
            else:
                _apply(state, event, renames, where, violations)
    return violations, states, renames


def _audit_children(state, children):
    """Record ``children`` (``{name: {rc: capacity}}``) as the audit reported them."""
    for name, caps in children.items():
        if name in state.children and state.children[name] != caps:
            state.child_changes[name] += 1
        elif name not in state.children:
            state.child_changes[name] = 0   # a new record starts at generation 0
    for name in set(state.children) - set(children):
        state.child_changes.pop(name, None)   # the record is removed
    state.children = {name: dict(caps) for name, caps in children.items()}


def _done(event):
    """What a confirm or revert did, by the status its migration ended in."""
    return {"confirmed": "confirm", "reverted": "revert"}.get(event.get("status"),
                                                              event["op"])


def _apply(state, event, renames, where, violations):
    op = _done(event)
    if op in ("claim", "resize", "unshelve"):
        landed = event.get("providers") or {}
        pci = state.pci_children()
        on_pci = {name: per for name, per in landed.items() if name in pci}
        devices = list(event.get("pci_devices") or ())
        problems = state.problems(event["host"], event["amounts"])
        problems += state.child_problems(
            event.get("child_amounts") or {},
            {name: per for name, per in landed.items() if name not in pci})
        problems += state.pci_problems(event["consumer"], event.get("pci_amounts") or {},
                                       on_pci, devices)
        if problems:
            violations.append(f"{where}: admitted {event['amounts']}"
                              + (f" and {event['child_amounts']}"
                                 if event.get("child_amounts") else "")
                              + (f" and PCI {event['pci_amounts']} (devices {devices})"
                                 if event.get("pci_amounts") else "")
                              + (f" on {landed}" if landed else "")
                              + " but " + "; ".join(problems))
        state.held[event["consumer"]] = (event["instance"], dict(event["amounts"]))
        if devices:
            state.devices[event["consumer"]] = tuple(devices)
        landed = {name: dict(per) for name, per in landed.items() if any(per.values())}
        if landed:
            state.on_children[event["consumer"]] = landed
            state.child_changes.update(landed.keys())
        state.origin[event["consumer"]] = (f"{op} admitted at generation {event['generation']}"
                                           f" (pid {event['pid']} seq {event['seq']})")
    elif op == "free":
        for consumer in [c for c, (i, _) in state.held.items() if i == event["instance"]]:
            _drop(state, consumer)
    elif op == "confirm":
        _drop(state, _key(state, event["instance"], renames))
        migration = event["migration"]
        if migration in state.held:
            state.held[event["instance"]] = state.held.pop(migration)
            state.origin[event["instance"]] = state.origin.pop(migration, None)
            if migration in state.on_children:   # handed over: no child changes
                state.on_children[event["instance"]] = state.on_children.pop(migration)
            if migration in state.devices:
                state.devices[event["instance"]] = state.devices.pop(migration)
    elif op == "revert":
        _drop(state, _key(state, event["migration"], renames))


def _key(state, consumer, renames):
    """The replay's key of what ``consumer`` holds on the node (None if nothing)."""
    if consumer in state.held:
        return consumer
    return next((held for held in state.held if renames.get(held) == consumer), None)


def _drop(state, key):
    """Free what ``key`` held on the node; each child it held amounts on changes."""
    state.held.pop(key, None)
    state.origin.pop(key, None)
    state.devices.pop(key, None)
    state.child_changes.update(state.on_children.pop(key, {}).keys())


def _heal(state, event, node_uuid, renames, leaked, where, violations):
    """Remove what a heal step removed on this node; name each live consumer it freed."""
    for consumer, on in event.get("removed") or ():
        if on != node_uuid:
            continue
        key = _key(state, consumer, renames)
        if key is None:
            violations.append(f"{where}: removed the allocation of {consumer}, which the "
                              "history does not hold on this node")
            continue
        instance = state.held[key][0]
        origin = state.origin.get(key)
        _drop(state, key)
        live = _live_consumer(consumer, instance, event, leaked.get(instance))
        if live is not None:
            violations.append(
                f"{where}: removed the allocation of live {live}; it held it since "
                f"{origin or 'an operation the history has not'}, and nothing freed it "
                f"before this step; its record after the step: {_record(event)}; heal "
                f"said: {event.get('detail')}")


def _live_consumer(consumer, instance, event, leak):
    """How a message names ``consumer`` if it was live when ``event`` removed it, else None."""
    if consumer != instance:
        hosts = (event.get("record") or {}).get("hosts")
        up = event.get("services_up")
        if hosts is not None and up is not None and not set(hosts) <= set(up):
            return None   # a service of the move is down: heal may end it
        return f"migration {consumer} of instance {instance} (in progress" + (
            f", services {', '.join(hosts)} up)" if hosts else ")")
    if leak is None:
        return f"instance {instance} (no logged operation deleted or shelved it)"
    read_at, read_done = event.get("read_at"), event.get("read_done")
    if read_at is None or read_done is None or leak["ended"] <= read_at \
            or leak["started"] < read_done:
        return None   # deleted before heal read it, or the log cannot tell
    return (f"instance {instance} (heal read it from {read_at:.6f} to {read_done:.6f}, "
            f"before it was marked deleted at {leak['started']:.6f})")


def _record(event):
    record = event.get("record")
    if not record:
        return "unknown"
    if "migration" in record:
        return (f"migration {record['migration']} {record['status']}, from "
                f"{record['from']} to {record['to']}")
    return (f"instance {record['instance']} {record['vm_state']}, task "
            f"{record['task_state']}, on {record['on']}")


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
        violations.extend(_child_problems(node_uuid, state, records))
    violations.extend(f"deleted instance {u} still holds an allocation"
                      for u in records["deleted_holding"])
    violations.extend(f"instance {u} has more than one move in progress"
                      for u in records["double_moves"])
    violations.extend(_heal_problems(events))
    violations.extend(_lost(records, events))
    return violations


def _child_problems(node_uuid, state, records):
    """The children of ``node_uuid`` whose recorded usage or generation differs
    from the replay's (records without ``provider_usage``/``children`` are not checked)."""
    problems = []
    if "provider_usage" in records:
        recorded = {name: {rc: n for rc, n in per.items() if n}
                    for name, per in records["provider_usage"].get(node_uuid, {}).items()}
        recorded = {name: per for name, per in recorded.items() if per}
        replayed = state.child_used()
        for name in sorted(set(recorded) | set(replayed)):
            if recorded.get(name, {}) != replayed.get(name, {}):
                problems.append(f"child {name} of node {node_uuid}: the records hold "
                                f"{recorded.get(name, {})} but the history adds up to "
                                f"{replayed.get(name, {})}")
    if "children" in records:
        generations = records["children"].get(node_uuid, {})
        for name in sorted(set(generations) | set(state.child_changes)):
            recorded, changes = generations.get(name), state.child_changes.get(name)
            if recorded != changes:
                problems.append(f"child {name} of node {node_uuid}: recorded at generation "
                                f"{recorded} but the history changed it {changes} times")
    return problems


def _heal_steps(events):
    return [e for e in events if e["op"] == "heal" and e.get("result") == "ok"]


def _heal_problems(events):
    """Heal steps the replay cannot place, and moves finished while their services were up."""
    problems = []
    for event in _heal_steps(events):
        step = f"{_step(event)} by pid {event['pid']} seq {event['seq']}"
        if event.get("generations") is None or event.get("removed") is None:
            problems.append(f"{step} was applied but logged no generations or allocations: "
                            "the history cannot account for it")
        elif event.get("kind") == "finish_migration" and not event["removed"]:
            record = event.get("record") or {}
            hosts, up = record.get("hosts"), event.get("services_up")
            if hosts is None or up is None or set(hosts) <= set(up):
                problems.append(f"{step}: finished migration {event['subject']} of instance "
                                f"{event.get('instance')} while it was in progress and its "
                                f"services were up; its record after the step: "
                                f"{_record(event)}")
    return problems


def _lost(records, events):
    """Live consumers of the final ``records`` without their allocation, each
    named with the heal steps (if any) that removed one of its allocations."""
    held = {tuple(a) for a in records.get("allocations", ())}
    by = collections.defaultdict(list)
    for event in _heal_steps(events):
        for consumer, node_uuid in event.get("removed") or ():
            by[consumer].append(f"{_step(event)} by pid {event['pid']} seq {event['seq']} "
                                f"at generation {(event.get('generations') or {}).get(node_uuid)}"
                                f" of node {(event.get('nodes') or {}).get(node_uuid, node_uuid)}")

    def freed(consumer):
        return "; removed by " + ", ".join(by[consumer]) if by[consumer] else ""
    problems = []
    for inst in records.get("instances", ()):
        if holds_resources(inst["vm_state"], inst["node"]) and \
                (inst["uuid"], inst["node"]) not in held:
            problems.append(f"live instance {inst['uuid']} ({inst['vm_state']}, task "
                            f"{inst['task_state']}, on {inst['host']}/{inst['node']}) holds "
                            f"no allocation on {inst['node']}" + freed(inst["uuid"]))
    for mig in records.get("migrations", ()):
        if (mig["uuid"], mig["dest_node"]) not in held:
            problems.append(f"migration {mig['uuid']} of instance {mig['instance']} "
                            f"({mig['status']}) holds no allocation on its destination "
                            f"{mig['dest_compute']}/{mig['dest_node']}" + freed(mig["uuid"]))
    return problems
