"""The history checker, and 4 chaos processes on one store proved by it.

The checker is tested on small hand-made histories, each with the one
fault it must name (of a node, of one of its GPUs, or of one of its PCI
device providers); then 4 processes act at random on shared nodes with two
small GPUs and a few PCI devices each and on instances (claims, some asking
vGPUs, some PCI devices, deletes, shelve and unshelve, resizes, confirms
and reverts, audits that grow, shrink or move a node to the other host and
shrink or grow a GPU) on a SQLite file and on PostgreSQL, and every
admission and every refusal they logged is replayed against the node, its
GPUs and its device providers as they were at that generation.  The
heal processes beside a churn are in :mod:`tests.reliability.test_heal_history`.
"""

import json
import os
import subprocess
import sys

from nova_lite.db import Store
from tests.reliability import base, chaos, history

HOST_A, HOST_B = chaos.HOSTS
CAP = {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 40}
ONE = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


def _event(op, generation, seq, **fields):
    event = dict(op=op, generation=generation, pid=1, seq=seq, node="n0", node_uuid="u0",
                 host=HOST_A)
    event.update(fields)
    return event


GPUS = {"g0": {"VGPU": 2}, "g1": {"VGPU": 1}}


def _audit(generation, seq, capacity=CAP, host=HOST_A, children=None):
    event = _event("audit", generation, seq, capacity=dict(capacity), result="ok", host=host)
    if children is not None:
        event["children"] = {name: dict(caps) for name, caps in children.items()}
    return event


def _claim(generation, seq, consumer, amounts=ONE, result="admitted", host=HOST_A,
           vgpus=0, landed=None, reasons=()):
    event = _event("claim", generation, seq, consumer=consumer, instance=consumer,
                   amounts=dict(amounts), result=result, host=host)
    if vgpus:
        event["child_amounts"] = {"VGPU": vgpus}
        if result == "admitted":
            event["providers"] = {landed: {"VGPU": vgpus}}
    if reasons:
        event["reasons"] = list(reasons)
    return event


def _no_room(n=1):
    return f"VGPU: no child provider has room for {n} (g0: full; g1: full)"


def _free(generation, seq, instance):
    return dict(op="free", instance=instance, result="ok", generations={"u0": generation},
                pid=1, seq=seq, migration=None)


def _resize(generation, seq, migration, instance, amounts=ONE):
    return _event("resize", generation, seq, consumer=migration, instance=instance,
                  amounts=dict(amounts), result="admitted")


def _leak(seq, instance, started, ended):
    return dict(op="leak", instance=instance, result="ok", started=started, ended=ended,
                pid=1, seq=seq)


def _heal(generation, seq, subject, instance=None, kind="remove_allocation", removed=None,
          read=(100.0, 101.0), up=(HOST_A, HOST_B), record=None):
    """A heal step applied at ``generation`` of node u0, by pid 2."""
    return dict(op="heal", kind=kind, subject=subject, instance=instance or subject,
                result="ok", generations={"u0": generation},
                removed=[[subject, "u0"]] if removed is None else removed,
                read_at=read[0], read_done=read[1], services_up=list(up), nodes={"u0": "n0"},
                record=record, detail=f"remove the allocation of {subject}", pid=2, seq=seq)


NO_PROBLEMS = {"deleted_holding": [], "double_moves": []}


class TestChecker(base.TestCase):
    """Each hand-made history has one fault, and the checker names it."""

    def check(self, events, usage):
        return history.check(events, dict(NO_PROBLEMS, usage={"u0": usage}))

    def test_a_consistent_history_passes(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _claim(3, 3, "i2"), _free(4, 4, "i1"),
                  _claim(4, 5, "i3", amounts={"VCPU": 4}, result="refused"),
                  _audit(5, 6, capacity={"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}),
                  _claim(5, 7, "i4", result="refused")]
        self.assertEqual([], self.check(events, ONE))

    def test_admission_beyond_capacity_is_named(self):
        events = [_audit(1, 1), *[_claim(g, g, f"i{g}") for g in range(2, 7)]]
        problems = self.check(events, {"VCPU": 5, "MEMORY_MB": 5120, "DISK_GB": 50})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 6: claim", problems[0])
        self.assertIn("VCPU: used 4 + 1 > capacity 4", problems[0])

    def test_admission_against_a_stale_inventory_is_named(self):
        small = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
        events = [_audit(1, 1), _audit(2, 2, capacity=small), _claim(3, 3, "i1"),
                  _claim(4, 4, "i2")]
        problems = self.check(events, {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 4", problems[0])

    def test_admission_on_a_node_of_another_host_is_named(self):
        events = [_audit(1, 1), _audit(2, 2, host=HOST_B), _claim(3, 3, "i1")]
        problems = self.check(events, ONE)
        self.assertEqual(1, len(problems), problems)
        self.assertIn(f"owner is {HOST_B}, not {HOST_A}", problems[0])

    def test_refusal_of_what_fits_is_named(self):
        events = [_audit(1, 1), _claim(1, 2, "i1", result="refused")]
        problems = self.check(events, {})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("refused", problems[0])
        self.assertIn("but it fits", problems[0])

    def test_two_writes_at_one_generation_are_named(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _claim(2, 3, "i2")]
        problems = self.check(events, {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20})
        self.assertIn("two writes at one generation", "\n".join(problems))

    def test_a_write_nobody_logged_is_named(self):
        events = [_audit(1, 1), _claim(3, 2, "i1")]
        problems = self.check(events, ONE)
        self.assertIn("a write nobody logged", "\n".join(problems))

    def test_an_audit_that_changed_without_a_generation_is_named(self):
        small = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
        events = [_audit(1, 1), _claim(2, 2, "i1"), _audit(2, 3, capacity=small)]
        problems = self.check(events, ONE)
        self.assertIn("without moving its generation", "\n".join(problems))

    def test_records_that_differ_from_the_history_are_named(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _free(3, 3, "i1")]
        problems = self.check(events, ONE)   # the free did not free, say
        self.assertEqual(1, len(problems), problems)
        self.assertIn("the records hold", problems[0])

    def test_confirm_and_revert_move_what_is_held(self):
        migration = dict(op="resize", generation=3, pid=1, seq=3, node="n0", node_uuid="u0",
                         host=HOST_A, consumer="m1", instance="i1",
                         amounts={"VCPU": 2}, result="admitted")
        confirm = dict(op="confirm", instance="i1", migration="m1", result="ok",
                       generations={"u0": 4}, pid=1, seq=4)
        events = [_audit(1, 1), _claim(2, 2, "i1"), migration, confirm,
                  _claim(5, 5, "i2", amounts={"VCPU": 2}), _free(6, 6, "i1")]
        self.assertEqual([], self.check(events, {"VCPU": 2}))

    def test_a_heal_of_a_live_instance_is_named_with_its_state_and_the_step(self):
        record = dict(instance="i1", vm_state="shelved_offloaded", task_state=None,
                      on=f"{HOST_A}/n0")
        events = [_audit(1, 1), _event("unshelve", 2, 2, consumer="i1", instance="i1",
                                       amounts=dict(ONE), result="admitted"),
                  _heal(3, 1, "i1", record=record)]
        problems = self.check(events, {})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 3: heal remove_allocation i1 by pid 2 seq 1", problems[0])
        self.assertIn("removed the allocation of live instance i1", problems[0])
        self.assertIn("since unshelve admitted at generation 2 (pid 1 seq 2)", problems[0])
        self.assertIn(f"instance i1 shelved_offloaded, task None, on {HOST_A}/n0",
                      problems[0])

    def test_a_heal_of_a_deleted_instance_is_fine_and_moves_the_generation(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _leak(3, "i1", 50.0, 51.0),
                  _heal(3, 1, "i1"), _claim(4, 4, "i2")]
        self.assertEqual([], self.check(events, ONE))

    def test_a_heal_that_read_before_the_delete_is_named(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _leak(3, "i1", 150.0, 151.0),
                  _heal(3, 1, "i1")]
        problems = self.check(events, {})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("live instance i1 (heal read it from", problems[0])

    def test_a_heal_that_overlaps_the_delete_is_not_told_apart(self):
        events = [_audit(1, 1), _claim(2, 2, "i1"), _leak(3, "i1", 100.5, 102.0),
                  _heal(3, 1, "i1")]
        self.assertEqual([], self.check(events, {}))

    def test_a_heal_of_a_migration_in_progress_is_named_unless_a_service_is_down(self):
        record = dict(migration="m1", status="error", hosts=[HOST_A, HOST_B],
                      **{"from": f"{HOST_A}/n1", "to": f"{HOST_B}/n0"})
        events = [_audit(1, 1), _resize(2, 2, "m1", "i1"),
                  _heal(3, 1, "m1", instance="i1", kind="finish_migration", record=record)]
        problems = self.check(events, {})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("heal finish_migration m1", problems[0])
        self.assertIn(f"live migration m1 of instance i1 (in progress, services {HOST_A}, "
                      f"{HOST_B} up)", problems[0])
        self.assertIn(f"migration m1 error, from {HOST_A}/n1 to {HOST_B}/n0", problems[0])
        events[-1] = _heal(3, 1, "m1", instance="i1", kind="finish_migration",
                           record=record, up=[HOST_B])
        self.assertEqual([], self.check(events, {}))

    def test_a_finish_that_removed_nothing_is_named_if_services_were_up(self):
        record = dict(migration="m1", status="error", hosts=[HOST_A, HOST_B],
                      **{"from": f"{HOST_A}/n1", "to": f"{HOST_B}/n0"})
        events = [_audit(1, 1), _heal(2, 1, "m1", instance="i1", kind="finish_migration",
                                      removed=[], record=record)]
        problems = self.check(events, {})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("finished migration m1 of instance i1 while it was in progress",
                      problems[0])

    def test_a_heal_of_what_the_node_does_not_hold_is_named(self):
        events = [_audit(1, 1), _heal(2, 1, "i9")]
        problems = self.check(events, {})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("which the history does not hold", problems[0])

    def test_a_heal_without_generations_cannot_be_placed(self):
        step = dict(_heal(2, 1, "i1"), generations=None)
        problems = self.check([_audit(1, 1), _claim(2, 2, "i1"), step], ONE)
        self.assertIn("logged no generations", "\n".join(problems))

    def test_live_consumers_without_their_allocation_at_the_end_are_named(self):
        def inst(uuid, vm_state, node, task_state=None):
            return dict(uuid=uuid, vm_state=vm_state, task_state=task_state, host=HOST_A,
                        node=node)
        records = dict(NO_PROBLEMS, usage={"u0": {}}, allocations=[["i0", "n0"], ["m0", "n1"]],
                       instances=[inst("i0", "active", "n0"), inst("i1", "active", "n0"),
                                  inst("i2", "shelved_offloaded", "n1", "unshelving"),
                                  inst("i3", "shelved_offloaded", None, "spawning"),
                                  inst("i4", "deleted", "n0")],
                       migrations=[dict(uuid=u, instance="i0", status="pre-migrating",
                                        dest_compute=HOST_B, dest_node="n1")
                                   for u in ("m0", "m1")])
        events = [_audit(1, 1), _claim(2, 2, "i1"), _heal(3, 1, "i1")]
        problems = history.check(events, records)
        self.assertIn("removed the allocation of live instance i1", problems[0])
        self.assertEqual([
            f"live instance i1 (active, task None, on {HOST_A}/n0) holds no allocation on "
            "n0; removed by heal remove_allocation i1 by pid 2 seq 1 at generation 3 of "
            "node n0",
            f"live instance i2 (shelved_offloaded, task unshelving, on {HOST_A}/n1) holds no "
            "allocation on n1",
            f"migration m1 of instance i0 (pre-migrating) holds no allocation on its "
            f"destination {HOST_B}/n1"], problems[1:])

    def test_a_confirm_is_replayed_as_what_its_migration_became(self):
        migration = _resize(3, 3, "m1", "i1", amounts={"VCPU": 2})
        confirm = dict(op="confirm", instance="i1", migration="m1", result="ok",
                       generations={"u0": 4}, pid=1, seq=4, status="reverted")
        events = [_audit(1, 1), _claim(2, 2, "i1"), migration, confirm]
        self.assertEqual([], self.check(events, ONE))
        self.assertIn("the records hold", "\n".join(
            self.check(events, {"VCPU": 2})))

    def test_deleted_holders_and_double_moves_are_named(self):
        problems = history.check([], {"usage": {}, "deleted_holding": ["i9"],
                                      "double_moves": ["i8"]})
        self.assertEqual(["deleted instance i9 still holds an allocation",
                          "instance i8 has more than one move in progress"], problems)


class TestChildChecker(base.TestCase):
    """The same rules for a node's GPUs (child providers): each hand-made
    history has one fault on a child, and the checker names it."""

    def check(self, events, usage=None, child_usage=None, generations=None):
        records = dict(NO_PROBLEMS, usage={"u0": usage or {}},
                       provider_usage={"u0": child_usage or {}})
        if generations is not None:
            records["children"] = {"u0": generations}
        return history.check(events, records)

    def test_a_consistent_history_on_children_passes(self):
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  _claim(3, 3, "i2", vgpus=1, landed="g0"),
                  _claim(4, 4, "i3", vgpus=1, landed="g1"),
                  _claim(4, 5, "i4", vgpus=1, result="refused", reasons=[_no_room()]),
                  _free(5, 6, "i1"), _claim(6, 7, "i5", vgpus=1, landed="g0"),
                  _free(7, 8, "i3")]
        used = {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
        # g0: three claims and one free; g1: one claim and one free.
        self.assertEqual([], self.check(events, used, {"g0": {"VGPU": 2}},
                                        generations={"g0": 4, "g1": 2}))

    def test_a_claim_that_overfilled_a_child_is_named(self):
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  _claim(3, 3, "i2", vgpus=1, landed="g1"),
                  _claim(4, 4, "i3", vgpus=1, landed="g1")]
        problems = self.check(events, {"VCPU": 3, "MEMORY_MB": 3072, "DISK_GB": 30},
                              {"g0": {"VGPU": 1}, "g1": {"VGPU": 2}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 4: claim", problems[0])
        self.assertIn("child g1 VGPU: used 1 + 1 > capacity 1", problems[0])

    def test_a_claim_on_a_child_that_shrank_under_its_usage_is_named_as_over(self):
        shrunk = {"g0": {"VGPU": 1}, "g1": {"VGPU": 1}}
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  _claim(3, 3, "i2", vgpus=1, landed="g0"), _audit(4, 4, children=shrunk),
                  _free(5, 5, "i1"), _claim(6, 6, "i3", vgpus=1, landed="g0")]
        problems = self.check(events, {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20},
                              {"g0": {"VGPU": 2}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 6: claim", problems[0])
        self.assertIn("child g0 VGPU: used 1 + 1 > capacity 1", problems[0])
        # Over but admitting nothing is not a fault: the shrink itself is fine.
        self.assertEqual([], self.check(events[:5], ONE, {"g0": {"VGPU": 1}}))

    def test_a_claim_split_or_landed_elsewhere_than_asked_is_named(self):
        split = _claim(2, 2, "i1", vgpus=2, landed="g0")
        split["providers"] = {"g0": {"VGPU": 1}, "g1": {"VGPU": 1}}
        problems = self.check([_audit(1, 1, children=GPUS), split], ONE,
                              {"g0": {"VGPU": 1}, "g1": {"VGPU": 1}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("landed on child g1 with 1 free while g0 had 2 free", problems[0])
        nowhere = dict(_claim(2, 2, "i1", vgpus=1, landed="g0"), providers={})
        problems = self.check([_audit(1, 1, children=GPUS), nowhere], ONE)
        self.assertEqual(1, len(problems), problems)
        self.assertIn("asked {'VGPU': 1} of the children but landed {}", problems[0])

    def test_a_claim_on_a_child_with_less_room_is_named(self):
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g1")]
        problems = self.check(events, ONE, {"g1": {"VGPU": 1}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("landed on child g1 with 1 free while g0 had 2 free", problems[0])

    def test_a_refusal_while_a_child_had_room_is_named(self):
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  _claim(2, 3, "i2", vgpus=1, result="refused", reasons=[_no_room()])]
        problems = self.check(events, ONE, {"g0": {"VGPU": 1}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 2: claim", problems[0])
        self.assertIn("refused: VGPU: no child provider has room for 1, but child g0 had "
                      "room (used {'VGPU': 1}, capacity {'VGPU': 2})", problems[0])

    def test_a_refusal_for_children_that_had_room_is_named_even_with_no_reason(self):
        events = [_audit(1, 1, children=GPUS),
                  _claim(1, 2, "i1", vgpus=2, result="refused")]
        problems = self.check(events)
        self.assertEqual(1, len(problems), problems)
        self.assertIn("but it fits", problems[0])

    def test_child_usage_that_differs_from_the_history_is_named(self):
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  _free(3, 3, "i1")]
        problems = self.check(events, {}, {"g0": {"VGPU": 1}})   # the free left it, say
        self.assertEqual(1, len(problems), problems)
        self.assertIn("child g0 of node u0: the records hold {'VGPU': 1} but the history "
                      "adds up to {}", problems[0])

    def test_a_child_generation_that_did_not_move_is_named(self):
        grown = {"g0": {"VGPU": 2}, "g1": {"VGPU": 2}}
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  _audit(3, 3, children=grown), _free(4, 4, "i1")]
        self.assertEqual([], self.check(events, generations={"g0": 2, "g1": 1}))
        problems = self.check(events, generations={"g0": 1, "g1": 1})
        self.assertEqual(["child g0 of node u0: recorded at generation 1 but the history "
                          "changed it 2 times"], problems)

    def test_a_confirm_hands_the_child_amounts_over_without_a_change(self):
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  dict(_resize(3, 3, "m1", "i1"), child_amounts={"VGPU": 1},
                       providers={"g1": {"VGPU": 1}}),
                  dict(op="confirm", instance="i1", migration="m1", result="ok",
                       generations={"u0": 4}, pid=1, seq=4)]
        self.assertEqual([], self.check(events, ONE, {"g1": {"VGPU": 1}},
                                        generations={"g0": 2, "g1": 1}))

    def test_a_heal_frees_what_the_consumer_held_on_children(self):
        events = [_audit(1, 1, children=GPUS), _claim(2, 2, "i1", vgpus=1, landed="g0"),
                  _leak(3, "i1", 50.0, 51.0), _heal(3, 1, "i1")]
        self.assertEqual([], self.check(events, generations={"g0": 2, "g1": 0}))
        self.assertIn("child g0 of node u0: the records hold {'VGPU': 1}", "\n".join(
            self.check(events, child_usage={"g0": {"VGPU": 1}})))

    def test_an_audit_that_changed_a_child_without_a_generation_is_named(self):
        grown = {"g0": {"VGPU": 2}, "g1": {"VGPU": 2}}
        events = [_audit(1, 1, children=GPUS), _audit(1, 2, children=grown)]
        self.assertIn("without moving its generation", "\n".join(self.check(events)))


PCI = {"p1": {"PCI_A": 1}, "p2": {"PCI_A": 1}, "pf": {"VF": 2}}
HOLDERS = {"a1": ["p1", "PCI_A"], "a2": ["p2", "PCI_A"], "v0": ["pf", "VF"], "v1": ["pf", "VF"]}


def _pci_audit(generation, seq):
    return dict(_audit(generation, seq, children=PCI), pci_holders=HOLDERS)


def _pci_claim(generation, seq, consumer, devices=(), landed=None, asked=None, **kw):
    """A claim asking ``asked`` (default one unit per device of ``devices``'
    class) that picked ``devices`` and landed ``landed`` (default on their
    providers)."""
    event = _claim(generation, seq, consumer, **kw)
    if asked is None:
        asked = {}
        for address in devices:
            asked[HOLDERS[address][1]] = asked.get(HOLDERS[address][1], 0) + 1
    event["pci_amounts"] = asked
    if event["result"] == "admitted":
        if landed is None:
            landed = {}
            for address in devices:
                name, rc = HOLDERS[address]
                landed.setdefault(name, {})[rc] = landed.get(name, {}).get(rc, 0) + 1
        event["providers"] = landed
        event["pci_devices"] = list(devices)
    return event


class TestPciChecker(base.TestCase):
    """The rules for a node's PCI device providers: units land one per picked
    device on that device's provider (not "most room"), never beyond a
    provider's capacity nor on a device another consumer holds; each hand-made
    history has one fault, and the checker names it."""

    def check(self, events, usage=None, child_usage=None, generations=None):
        records = dict(NO_PROBLEMS, usage={"u0": usage or {}},
                       provider_usage={"u0": child_usage or {}})
        if generations is not None:
            records["children"] = {"u0": generations}
        return history.check(events, records)

    def test_a_consistent_pci_history_passes(self):
        refused = _pci_claim(4, 5, "i4", result="refused", asked={"PCI_A": 1},
                             reasons=["Claim pci failed: requested 1 x 10de:1eb8 but only 0 "
                                      "free device(s) match"])
        events = [_pci_audit(1, 1), _pci_claim(2, 2, "i1", ["a1"]),
                  _pci_claim(3, 3, "i2", ["a2"]), _pci_claim(4, 4, "i3", ["v0", "v1"]),
                  refused, _free(5, 6, "i1"), _pci_claim(6, 7, "i5", ["a1"]),
                  _free(7, 8, "i3")]
        used = {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
        # p1: two claims and a free; p2: one claim; pf: one claim and a free.
        self.assertEqual([], self.check(
            events, used, {"p1": {"PCI_A": 1}, "p2": {"PCI_A": 1}},
            generations={"p1": 3, "p2": 1, "pf": 2}))

    def test_a_unit_off_the_picked_device_is_named(self):
        events = [_pci_audit(1, 1), _pci_claim(2, 2, "i1", ["a2"],
                                               landed={"p1": {"PCI_A": 1}})]
        problems = self.check(events, ONE, {"p1": {"PCI_A": 1}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 2: claim", problems[0])
        self.assertIn("the PCI units landed on {('p1', 'PCI_A'): 1} but the devices picked "
                      "(a2) are on {('p2', 'PCI_A'): 1}", problems[0])

    def test_a_device_held_twice_is_named_and_beyond_capacity(self):
        events = [_pci_audit(1, 1), _pci_claim(2, 2, "i1", ["a1"]),
                  _pci_claim(3, 3, "i2", ["a1"])]
        problems = self.check(events, {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20},
                              {"p1": {"PCI_A": 2}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("generation 3: claim", problems[0])
        self.assertIn("PCI provider p1 PCI_A: used 1 + 1 > capacity 1", problems[0])
        self.assertIn("device a1 is held by i1 already", problems[0])

    def test_devices_other_than_asked_are_named(self):
        events = [_pci_audit(1, 1), _pci_claim(2, 2, "i1", ["v0"], asked={"PCI_A": 1})]
        problems = self.check(events, ONE, {"pf": {"VF": 1}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("asked {'PCI_A': 1} of the PCI devices but picked ['v0']", problems[0])

    def test_a_pci_refusal_while_a_device_was_free_is_named(self):
        events = [_pci_audit(1, 1), _pci_claim(2, 2, "i1", ["a1"]),
                  _pci_claim(2, 3, "i2", result="refused", asked={"PCI_A": 1},
                             reasons=["Claim pci failed"])]
        problems = self.check(events, ONE, {"p1": {"PCI_A": 1}})
        self.assertEqual(1, len(problems), problems)
        self.assertIn("of the PCI devices {'PCI_A': 1}) but it fits", problems[0])
        # With both taken, the refusal is right.
        events[2:] = [_pci_claim(3, 3, "i2", ["a2"]),
                      _pci_claim(3, 4, "i3", result="refused", asked={"PCI_A": 1})]
        self.assertEqual([], self.check(events, {"VCPU": 2, "MEMORY_MB": 2048,
                                                 "DISK_GB": 20},
                                        {"p1": {"PCI_A": 1}, "p2": {"PCI_A": 1}}))

    def test_a_confirm_hands_the_devices_over_and_a_heal_frees_them(self):
        events = [_pci_audit(1, 1), _pci_claim(2, 2, "i1", ["a1"]),
                  dict(_pci_claim(3, 3, "m1", ["a2"]), op="resize", instance="i1"),
                  dict(op="confirm", instance="i1", migration="m1", result="ok",
                       generations={"u0": 4}, pid=1, seq=4),
                  # a1 is free again: another claim may take it, a2 not.
                  _pci_claim(5, 5, "i2", ["a1"]), _leak(6, "i1", 50.0, 51.0),
                  _heal(6, 1, "i1"), _pci_claim(7, 7, "i3", ["a2"])]
        self.assertEqual([], self.check(events, {"VCPU": 2, "MEMORY_MB": 2048,
                                                 "DISK_GB": 20},
                                        {"p1": {"PCI_A": 1}, "p2": {"PCI_A": 1}},
                                        generations={"p1": 3, "p2": 3, "pf": 0}))
        events[4] = _pci_claim(5, 5, "i2", ["a2"])
        self.assertIn("device a2 is held by i1 already", "\n".join(self.check(events)))


class ChaosMixin:
    """4 chaos processes on one store; the checker replays what they logged."""

    processes = 4
    ops = 120

    def _run(self, *args):
        return subprocess.Popen([sys.executable, "-m", "tests.reliability.chaos", *args],
                                cwd=base.REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def test_chaos_history_has_no_violation(self):
        url = self.database_url()
        logs = self.useFixture(base.fixtures.TempDir()).path
        setup_log = os.path.join(logs, "setup.log")
        setup = self._run("setup", url, setup_log)
        out, err = setup.communicate(timeout=120)
        self.assertEqual(0, setup.returncode, err)
        paths = [setup_log]
        workers = []
        for n in range(self.processes):
            paths.append(os.path.join(logs, f"worker-{n}.log"))
            workers.append(self._run("work", url, paths[-1], str(1000 + n), str(self.ops)))
        for worker in workers:
            out, err = worker.communicate(timeout=600)
            self.assertEqual(0, worker.returncode, err[-4000:])
        events = history.read_logs(paths)
        store = Store(url)
        self.addCleanup(store.close)
        problems = history.check(events, chaos.records(store))
        self.assertEqual([], problems, "\n".join(problems[:20]))
        self.assertNoRecordProblems(store)
        # The run did what it is for: each kind of operation committed, and
        # refusals were decided on fresh records.
        done = {(e["op"], e.get("result")) for e in events}
        for op in ("claim", "resize", "free", "audit"):
            self.assertIn((op, "admitted" if op in ("claim", "resize") else "ok"), done)
        self.assertIn(("claim", "refused"), done)
        # ... and on the GPUs: vGPUs landed on each, refusals for want of a
        # GPU with room, and audits that resized a GPU under its claims.
        landed = {name for e in events if e.get("result") == "admitted"
                  for name in e.get("providers") or {}}
        gpus = {f"{n}_{g}" for n in chaos.NODES for g in chaos.GPUS}
        self.assertEqual(gpus, landed & gpus)
        self.assertTrue(any("no child provider has room" in reason for e in events
                            if e.get("result") == "refused" for reason in e["reasons"]))
        self.assertGreater(len({json.dumps(e["children"], sort_keys=True) for e in events
                                if e["op"] == "audit" and e.get("result") == "ok"}), 1)
        # ... and on the PCI devices' providers: devices landed on each node's,
        # a device other than the first of its kind was picked (so a unit
        # landing off the picked device shows), and claims were refused for
        # want of a free device.
        for node in chaos.NODES:
            self.assertTrue({f"{node}_{provider}" for provider, _ in
                             chaos.PCI_HOLDERS.values()} & landed, node)
        picked = {a for e in events if e.get("result") == "admitted"
                  for a in e.get("pci_devices") or ()}
        self.assertTrue(picked & {"0000:82:00.0", "0000:83:02.1"}, picked)
        self.assertTrue(any(reason.startswith("Claim pci failed") for e in events
                            if e.get("result") == "refused" for reason in e["reasons"]))
        self.addDetail("history", _text("\n".join(json.dumps(e) for e in events[-200:])))


def _text(value):
    from testtools.content import text_content
    return text_content(value)


class TestChaosSQLite(ChaosMixin, base.SQLiteBackend, base.TestCase):
    pass


class TestChaosPostgreSQL(ChaosMixin, base.PostgreSQLBackend, base.TestCase):
    pass
