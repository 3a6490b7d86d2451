"""The claim decision: a request of amounts alone is admitted on the bounds its
plan carries exactly when the full decision would admit it."""

import random
from fractions import Fraction

import attrs
import fixtures
import testtools

from nova_lite.exception import ComputeResourcesUnavailable, InvalidInput
from nova_lite.model import decide as decision
from nova_lite.model.plans import ClaimAsk
from nova_lite.model.usage import with_allocation
from nova_lite.objects import Allocation, ComputeNode, Flavor, Instance, Migration, Overhead
from nova_lite.resources import DISK_GB, MEMORY_MB, VCPU, Inventory

HOST = "host-a"


def _node(inventories, usage):
    return ComputeNode(uuid="a" * 36, host=HOST, nodename=HOST, generation=3,
                       inventories=inventories, usage=usage)


def _ask(vcpus, memory_mb, disk_gb, n):
    flavor = Flavor(name=f"f{n}", vcpus=vcpus, memory_mb=memory_mb, root_gb=disk_gb)
    instance = Instance(uuid=f"{n:036d}", flavor=flavor)
    return ClaimAsk.build(instance, flavor, Overhead())


def _full(node, ask, limits):
    """What decide() alone says of ``ask`` on ``node``: its reasons, and the plan's bounds."""
    found = decision.decide(node, ask.requested, limits, ask.numa_request,
                            ask.instance.pci_requests, ask.flavor.extra_specs)
    return list(found.reasons), (None if found.reasons else
                                 decision.plan_bounds(node, ask, limits))


class TestAmountsOnly(testtools.TestCase):

    def _claim(self, node, ask, limits):
        claims = decision.NodeClaims(host=HOST, nodename=HOST, asks=[ask], limits=limits)
        try:
            (plan,) = claims.decide(node)
        except ComputeResourcesUnavailable as exc:
            return list(exc.reasons), None
        return [], plan.bounds

    def test_admitted_and_refused_as_the_full_decision(self):
        # Nodes near full, odd steps and units, fractional ratios and float
        # limits: the edges where a bound and a free amount could disagree.
        rng = random.Random(20261206)
        admitted = refused = 0
        for n in range(3000):
            inventories = {}
            for rc in (VCPU, MEMORY_MB, DISK_GB):
                if rng.random() < 0.1:
                    continue   # a class the node does not offer
                total = rng.randint(0, 128)
                step = rng.choice((1, 1, 1, 2, 4))
                min_unit = rng.choice((1, 1, 2))
                max_unit = rng.choice((None, None, max(min_unit, rng.randint(1, 16))))
                inventories[rc] = Inventory(
                    total=total, reserved=rng.randint(0, total // 4), min_unit=min_unit,
                    max_unit=max_unit, step_size=step,
                    allocation_ratio=rng.choice((Fraction(1), Fraction(3, 2), Fraction(7, 10),
                                                 Fraction(16))))
            usage = {rc: rng.randint(0, 60) for rc in inventories if rng.random() < 0.8}
            node = _node(inventories, {rc: n for rc, n in usage.items() if n})
            limits = rng.choice((None, {"vcpu": rng.uniform(0, 90), "memory_mb": None},
                                 {"memory_mb": rng.randint(0, 90), "disk_gb": 40.5}))
            ask = _ask(rng.randint(1, 6), rng.randint(1, 6), rng.randint(0, 6), n)
            expected = _full(node, ask, limits)
            self.assertEqual(expected, self._claim(node, ask, limits),
                             f"case {n}: {node.inventories} used {node.usage} limits {limits} "
                             f"asked {ask.requested}")
            admitted += not expected[0]
            refused += bool(expected[0])
        # Both outcomes were put to the test, many times.
        self.assertGreater(admitted, 200)
        self.assertGreater(refused, 200)

    def test_a_unit_problem_refuses_with_its_reason(self):
        node = _node({VCPU: Inventory(total=16, step_size=4), MEMORY_MB: Inventory(total=4096),
                      DISK_GB: Inventory(total=100)}, {})
        reasons, _ = self._claim(node, _ask(2, 512, 1, 1), None)
        self.assertEqual(["VCPU: requested 2 is not a multiple of step_size 4"], reasons)

    def test_the_last_unit_fits_and_the_next_does_not(self):
        node = _node({VCPU: Inventory(total=4), MEMORY_MB: Inventory(total=4096),
                      DISK_GB: Inventory(total=100)}, {VCPU: 3})
        self.assertEqual(([], {VCPU: 4, MEMORY_MB: 4096, DISK_GB: 100}),
                         self._claim(node, _ask(1, 512, 1, 1), None))
        reasons, _ = self._claim(node, _ask(2, 512, 1, 2), None)
        self.assertEqual(["Free vcpu 1.00 VCPU < requested 2 VCPU"], reasons)

    def test_a_request_that_fits_exactly_is_admitted_without_the_full_decision(self):
        def full_decision(*args, **kwargs):
            raise AssertionError("decided again in full")
        self.useFixture(fixtures.MonkeyPatch("nova_lite.model.decide.decide", full_decision))
        node = _node({VCPU: Inventory(total=4), MEMORY_MB: Inventory(total=1024),
                      DISK_GB: Inventory(total=10)}, {VCPU: 3, MEMORY_MB: 512, DISK_GB: 9})
        self.assertEqual(([], {VCPU: 4, MEMORY_MB: 1024, DISK_GB: 10}),
                         self._claim(node, _ask(1, 512, 1, 1), None))

    def test_usage_past_what_the_records_hold_is_refused_class_by_class_in_order(self):
        most = 2 ** 53 - 1
        node = _node({VCPU: Inventory(total=4), MEMORY_MB: Inventory(total=4096),
                      DISK_GB: Inventory(total=100)}, {VCPU: most, MEMORY_MB: most - 100})
        reasons, _ = self._claim(node, _ask(1, 512, 1, 1), None)
        self.assertEqual([f"MEMORY_MB: requested 512 is more than nova-lite records ({most})",
                          f"VCPU: requested 1 is more than nova-lite records ({most})"], reasons)

    def test_the_allocation_of_amounts_alone_is_the_one_its_class_makes(self):
        # Built without its converters (each part a checked record's): the
        # same record, fields of the same types, as Allocation(...) gives.
        node = _node({VCPU: Inventory(total=8), MEMORY_MB: Inventory(total=4096),
                      DISK_GB: Inventory(total=100)}, {})
        flavor = Flavor(name="small", vcpus=1, memory_mb=512, root_gb=1)
        instance = Instance(uuid=f"{1:036d}", flavor=flavor)
        move = Migration(uuid=f"{2:036d}", instance_uuid=instance.uuid, source_compute="b",
                         source_node="b", dest_compute=HOST, dest_node=HOST,
                         old_flavor=flavor, new_flavor=flavor)
        for migration, consumer in ((None, instance.uuid), (move, move.uuid)):
            with self.subTest(migration=migration is not None):
                ask = ClaimAsk.build(instance, flavor, Overhead(), migration)
                (plan,) = decision.NodeClaims(host=HOST, nodename=HOST, asks=[ask]).decide(node)
                expected = Allocation(
                    consumer_uuid=consumer,
                    consumer_type="instance" if migration is None else "migration",
                    instance_uuid=instance.uuid, node_uuid=node.uuid,
                    resources={VCPU: 1, MEMORY_MB: 512, DISK_GB: 1}, flavor=flavor)
                self.assertEqual(expected, plan.allocation)
                for field in attrs.fields(Allocation):
                    self.assertIs(type(getattr(expected, field.name)),
                                  type(getattr(plan.allocation, field.name)), field.name)
                with testtools.ExpectedException(TypeError):
                    plan.allocation.resources[VCPU] = 2   # read-only, as converted

    def test_claims_on_one_record_share_its_bounds_until_its_inventories_change(self):
        flavor = Flavor(name="small", vcpus=1, memory_mb=512, root_gb=1)
        node = _node({VCPU: Inventory(total=8), MEMORY_MB: Inventory(total=4096),
                      DISK_GB: Inventory(total=100)}, {})
        plans = []
        for n in range(3):   # each claim on the record the one before left
            ask = ClaimAsk.build(Instance(uuid=f"{n:036d}", flavor=flavor), flavor, Overhead())
            (plan,) = decision.NodeClaims(host=HOST, nodename=HOST, asks=[ask]).decide(node)
            plans.append(plan)
            node = with_allocation(node, plan.allocation)
        self.assertEqual(3, node.usage[VCPU])
        self.assertIs(plans[0].bounds, plans[2].bounds)   # one mapping served them all
        self.assertEqual({VCPU: 8, MEMORY_MB: 4096, DISK_GB: 100}, dict(plans[0].bounds))
        with testtools.ExpectedException(TypeError):
            plans[0].bounds[VCPU] = 99   # shared, so read-only
        # An audit records a smaller node: a new inventories mapping, and the
        # claim the old bounds would admit is refused.
        ask = ClaimAsk.build(Instance(uuid=f"{9:036d}", flavor=flavor), flavor, Overhead())
        smaller = attrs.evolve(node, inventories=dict(node.inventories, **{
            VCPU: Inventory(total=3)}))
        reasons, _ = self._claim(smaller, ask, None)
        self.assertEqual(["Free vcpu 0.00 VCPU < requested 1 VCPU"], reasons)
        # And one that sets a step the request does not keep refuses it too.
        stepped = attrs.evolve(node, inventories=dict(node.inventories, **{
            VCPU: Inventory(total=8, step_size=2)}))
        reasons, _ = self._claim(stepped, ask, None)
        self.assertEqual(["VCPU: requested 1 is not a multiple of step_size 2"], reasons)
        self.assertEqual(([], {VCPU: 8, MEMORY_MB: 4096, DISK_GB: 100}),
                         self._claim(node, ask, None))


class TestPlacedAndAfter(testtools.TestCase):
    """A plain claim's placed instance and the node after it are built without
    running their checks again: the same records the checked copies give."""

    def test_the_placed_instance_is_the_checked_copy(self):
        flavor = Flavor(name="small", vcpus=1, memory_mb=512, root_gb=1)
        instance = Instance(uuid=f"{7:036d}", flavor=flavor, project_id="p",
                            display_name="seven")
        for _ in range(2):   # the names checked, then known
            placed = decision._placed(instance, HOST, "node-1")
            self.assertEqual(attrs.evolve(instance, host=HOST, node="node-1"), placed)
        self.assertIn((HOST, "node-1"), decision._CHECKED_PLACES)

    def test_a_name_that_fails_its_check_fails_every_time(self):
        instance = Instance(uuid=f"{8:036d}", flavor=Flavor(name="s", vcpus=1, memory_mb=1,
                                                            root_gb=0))
        for _ in range(2):
            exc = self.assertRaises(InvalidInput, decision._placed, instance, HOST, "bad\nname")
            self.assertIn("Instance.node", str(exc))
        self.assertNotIn((HOST, "bad\nname"), decision._CHECKED_PLACES)

    def test_the_names_checked_are_bounded(self):
        self.useFixture(fixtures.MonkeyPatch("nova_lite.model.decide._CHECKED_PLACES_MOST", 3))
        self.useFixture(fixtures.MonkeyPatch("nova_lite.model.decide._CHECKED_PLACES", set()))
        instance = Instance(uuid=f"{9:036d}", flavor=Flavor(name="s", vcpus=1, memory_mb=1,
                                                            root_gb=0))
        for n in range(10):
            decision._placed(instance, HOST, f"node-{n}")
            self.assertLessEqual(len(decision._CHECKED_PLACES), 3)

    def test_the_node_after_amounts_is_the_one_the_checked_copy_gives(self):
        from nova_lite.model import usage
        from nova_lite.validators import replaced
        node = _node({VCPU: Inventory(total=8), MEMORY_MB: Inventory(total=4096),
                      DISK_GB: Inventory(total=100)}, {VCPU: 2, MEMORY_MB: 512})
        flavor = Flavor(name="small", vcpus=1, memory_mb=512, root_gb=1)
        allocations = [Allocation(consumer_uuid=f"{n:036d}", consumer_type="instance",
                                  instance_uuid=f"{n:036d}", node_uuid=node.uuid, flavor=flavor,
                                  resources=resources)
                       for n, resources in enumerate(({VCPU: 1, MEMORY_MB: 512, DISK_GB: 1},
                                                      {VCPU: 3, DISK_GB: 0}))]
        after = usage.with_allocations(node, allocations, 9)
        expected = replaced(node, generation=9, **usage._changed(node, allocations))
        self.assertEqual(expected, after)
        self.assertEqual({VCPU: 6, MEMORY_MB: 1024, DISK_GB: 1}, dict(after.usage))
        self.assertEqual(9, after.generation)
        for field in attrs.fields(ComputeNode):
            self.assertIs(type(getattr(expected, field.name)), type(getattr(after, field.name)),
                          field.name)
        with testtools.ExpectedException(TypeError):
            after.usage[VCPU] = 0   # read-only, as converted
        self.assertEqual({VCPU: 2, MEMORY_MB: 512}, dict(node.usage))   # not changed
