"""The HostIndex picks what filtering and weighing every host picks.

Random fleets (few distinct amounts, so ties are common), random
filters, weighers, multipliers and requests; the reference is the full
pass: each filter's ``filter_all`` over the hosts in (host, node) order,
``weighers.weights`` and the best ``count`` by weight (ties in that order).
The fleets then change (amounts moved, hosts gone, hosts new) through
``put`` and ``discard`` as a refresh does, and the two must still agree.
"""

import heapq
import random
import types

import attrs
import hypothesis
from hypothesis import strategies as st
import testtools

from nova_lite import conf
from nova_lite.compute import accounting
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.db import COMPUTE_BINARY, ServiceRecord
from nova_lite.scheduler import HostManager, NoValidHost
from nova_lite.scheduler import filters as flt
from nova_lite.scheduler import host_checks, host_index, sorted_rows
from nova_lite.scheduler import weighers as wgh
from nova_lite.scheduler.host_index import HostIndex
from tests import base

NOW = 1_000_000.0
DOWN_TIME = 60


class FakeState:
    """What filters and weighers read of a HostState."""

    def __init__(self, uuid, host, nodename, ram, disk, vcpus, pcpus, service, node):
        self.uuid, self.host, self.nodename = uuid, host, nodename
        self.free_ram_mb, self.free_disk_gb, self.free_vcpus, self.free_pcpus = \
            ram, disk, vcpus, pcpus
        self.service, self.node = service, node

    def __repr__(self):
        return (f"<{self.host}/{self.nodename} ram={self.free_ram_mb} disk={self.free_disk_gb}"
                f" vcpus={self.free_vcpus} pcpus={self.free_pcpus}>")


amounts = st.fixed_dictionaries({
    # 10**10 MB: a range so wide that a step of one is below float rounding
    "ram": st.sampled_from([0, 512, 1024, 2048, 4096, 8192, 10**10]),
    "disk": st.integers(0, 3), "vcpus": st.integers(0, 4), "pcpus": st.integers(0, 2)})
service = st.one_of(
    st.none(),
    st.builds(lambda disabled, age: ServiceRecord(
        "h", COMPUTE_BINARY, 0.0, NOW - age, 1, disabled, "why" if disabled else None),
        st.booleans() | st.just(False), st.sampled_from([0, 10, 59, 61, 1000])))
node = st.builds(lambda host, reported, error: types.SimpleNamespace(
    host=host, reported=reported, last_error=error),
    st.just("h") | st.just(""), st.booleans() | st.just(True), st.just(None) | st.just("boom"))


@st.composite
def fleets(draw, max_size=30):
    count = draw(st.integers(1, max_size))
    hosts = draw(st.lists(st.sampled_from("abcdefgh"), min_size=count, max_size=count))
    states = []
    for i, host in enumerate(hosts):
        a = draw(amounts)
        states.append(FakeState(f"u{i}", f"host-{host}", f"node-{i:03d}", a["ram"], a["disk"],
                                a["vcpus"], a["pcpus"], draw(service), draw(node)))
    return states


WEIGHERS = {"ram": wgh.RAMWeigher, "cpu": wgh.CPUWeigher, "disk": wgh.DiskWeigher}
FILTERS = [flt.ComputeFilter, flt.RamFilter, flt.CoreFilter, flt.DiskFilter]


class NotOnHostB(flt.BaseHostFilter):
    """A third-party filter that only overrides host_reason."""

    def host_reason(self, state, spec, now):
        return "host b" if state.host == "host-b" else None


@st.composite
def configs(draw):
    names = draw(st.lists(st.sampled_from(sorted(WEIGHERS)), max_size=4))
    multipliers = {n: draw(st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0]))
                   for n in WEIGHERS}
    settings = conf.Settings(
        service_down_time=DOWN_TIME, ram_weight_multiplier=multipliers["ram"],
        cpu_weight_multiplier=multipliers["cpu"], disk_weight_multiplier=multipliers["disk"])
    chosen = draw(st.lists(st.sampled_from(FILTERS + [NotOnHostB]), max_size=5))
    return (tuple(f(settings) for f in chosen),
            tuple(WEIGHERS[n](settings) for n in names))


requests = st.builds(
    lambda ram, disk, vcpus, pcpus, ignored, count: (types.SimpleNamespace(requested={
        k: v for k, v in {accounting.MEMORY_MB: ram, accounting.DISK_GB: disk,
                          accounting.VCPU: vcpus}.items() if v} | (
        {accounting.PCPU: pcpus} if pcpus else {})), frozenset(ignored), count),
    st.sampled_from([0, 512, 1024, 4096, 8192]), st.integers(0, 3), st.integers(0, 3),
    st.integers(0, 2), st.sets(st.sampled_from(["host-a", "host-c"]), max_size=1),
    st.integers(1, 5))


def full_pass(states, filters, weighers, spec, ignored, count):
    """The reference: filter and weigh every host, as HostManager._rank does."""
    passing = sorted((s for s in states if s.host not in ignored),
                     key=lambda s: (s.host, s.nodename))
    for f in filters:
        if f.applies(spec):
            passing, _ = f.filter_all(passing, spec, NOW)
    if not passing:
        return []
    totals = wgh.weights(passing, spec, weighers)
    return [passing[i] for i in heapq.nlargest(count, range(len(passing)),
                                               key=totals.__getitem__)]


def indexed(index, states, filters, spec, ignored, count):
    passes, minimums = host_checks.host_test(filters, spec, NOW, ignored)
    ordered = sorted(states, key=lambda s: (s.host, s.nodename))
    return index.best({s.uuid: s for s in states}, passes, count, minimums, ordered)


#: How many states put at once are sorted in: 1 (every put of more than one
#: at once, as the first read of a fleet puts them) or the default.
bulks = st.sampled_from((1, host_index.BULK_PUT))
#: Entries per block of the orders: a few (blocks split and empty as states
#: move) or the default (one block at these sizes).
loads = st.sampled_from((1, 2, 3, sorted_rows.LOAD))


class HostIndexTests(testtools.TestCase):

    def check(self, index, states, config, request):
        filters, weighers = config
        spec, ignored, count = request
        expected = full_pass(states, filters, weighers, spec, ignored, count)
        got = indexed(index, states, filters, spec, ignored, count)
        self.assertEqual([s.uuid for s in expected], [s.uuid for s in got],
                         f"expected {expected}, got {got}")

    @hypothesis.settings(max_examples=400)
    @hypothesis.given(fleets(), configs(), st.lists(requests, min_size=1, max_size=4), bulks,
                      loads)
    def test_agrees_with_the_full_pass(self, states, config, reqs, bulk, load):
        index = HostIndex(host_checks.weigh_specs(config[1]), bulk_put=bulk, load=load)
        for state in states:
            index.put(state)
        for request in reqs:
            self.check(index, states, config, request)

    @hypothesis.settings(max_examples=200)
    @hypothesis.given(fleets(), configs(), requests, st.data(), bulks, loads)
    def test_agrees_after_changes(self, states, config, request, data, bulk, load):
        index = HostIndex(host_checks.weigh_specs(config[1]), bulk_put=bulk, load=load)
        for state in states:
            index.put(state)
        states = list(states)
        for round_ in range(data.draw(st.integers(1, 4))):
            for state in data.draw(st.lists(st.sampled_from(states), max_size=5)):
                a = data.draw(amounts)
                state.free_ram_mb, state.free_disk_gb = a["ram"], a["disk"]
                state.free_vcpus, state.free_pcpus = a["vcpus"], a["pcpus"]
                index.put(state)
            if len(states) > 1 and data.draw(st.booleans()):
                gone = states.pop(data.draw(st.integers(0, len(states) - 1)))
                index.discard(gone.uuid)
            for new in data.draw(fleets(max_size=3)):
                new.uuid, new.nodename = f"n{round_}-{new.uuid}", f"new-{round_}-{new.nodename}"
                states.append(new)
                index.put(new)
            self.check(index, states, config, request)
            self.assertEqual(len(states), len(index))

    def test_ties_come_in_host_and_node_order(self):
        settings = conf.Settings(service_down_time=DOWN_TIME)
        up = ServiceRecord("h", COMPUTE_BINARY, 0.0, NOW, 1, False)
        ok = types.SimpleNamespace(host="h", reported=True, last_error=None)
        states = [FakeState(f"u{i}", f"host-{9 - i}", "n", 4096 if i % 2 else 2048, 1, 1, 0,
                            up, ok) for i in range(10)]
        index = HostIndex(host_checks.weigh_specs([wgh.RAMWeigher(settings)]))
        for state in states:
            index.put(state)
        spec = types.SimpleNamespace(requested={accounting.MEMORY_MB: 512})
        got = indexed(index, states, [flt.RamFilter(settings)], spec, frozenset(), 3)
        self.assertEqual(["host-0", "host-2", "host-4"], [s.host for s in got])

    def test_a_tie_not_read_yet_that_comes_first_wins(self):
        # Round 2 reads w1 and w2: the bound then equals the pick's total
        # (z, 1.0), but u (5, 5) ties it unread and comes before z.
        settings = conf.Settings(service_down_time=DOWN_TIME)
        up = ServiceRecord("h", COMPUTE_BINARY, 0.0, NOW, 1, False)
        ok = types.SimpleNamespace(host="h", reported=True, last_error=None)
        fleet = {"z": (10, 0), "z2": (0, 10), "a": (5, 0), "a2": (0, 5), "m": (5, 5),
                 "zz": (0, 0)}
        states = [FakeState(key, key, "n", ram, 1, cpu, 0, up, ok)
                  for key, (ram, cpu) in fleet.items()]
        index = HostIndex(host_checks.weigh_specs(
            [wgh.RAMWeigher(settings), wgh.CPUWeigher(settings)]))
        for state in states:
            index.put(state)
        spec = types.SimpleNamespace(requested={})
        got = indexed(index, states, [], spec, frozenset(), 1)
        self.assertEqual(["m"], [s.host for s in got])

    def test_filters_judging_hosts_together_or_own_weigher_values_are_not_indexed(self):
        settings = conf.Settings()

        class Together(flt.BaseHostFilter):
            def filter_all(self, states, spec, now):
                return states[:1], [(s, "not first") for s in states[1:]]

        class OwnValues(wgh.BaseHostWeigher):
            def values(self, states, spec):
                return [len(s.host) for s in states]

        self.assertFalse(host_checks.per_host([Together(settings)]))
        self.assertTrue(host_checks.per_host([flt.RamFilter(settings), NotOnHostB(settings)]))
        self.assertIsNone(host_checks.weigh_specs([OwnValues(settings)]))
        self.assertEqual((), host_checks.weigh_specs(
            [wgh.RAMWeigher(conf.Settings(ram_weight_multiplier=0.0))]))


class IndexedHostManagerTests(base.TestCase):
    """A HostManager with the index chooses what one without it chooses, on
    real records that claims, audits and new nodes change between requests."""

    def test_same_choices_with_and_without_the_index(self):
        rng = random.Random(20261125)
        names = [f"node-{i:02d}" for i in range(14)]
        store = self.sqlite_store()
        for multipliers in ((1.0, 1.0, 1.0), (-1.0, 0.5, 0.0), (2.0, -1.0, 1.0)):
            settings = self.settings(
                reserved_host_memory_mb=0, ram_weight_multiplier=multipliers[0],
                cpu_weight_multiplier=multipliers[1], disk_weight_multiplier=multipliers[2])
            driver, rt = self.make_tracker("fake.multinode", settings=settings, store=store,
                                           audit=False, nodes=names)
            for name in names:
                driver.set_node_size(name, vcpus=rng.choice([2, 4, 8]),
                                     memory_mb=rng.choice([4096, 8192, 16384]),
                                     local_gb=rng.choice([10, 20, 40]))
            rt.update_available_resource()
            store.heartbeat(self.host)
            fast = HostManager(store, settings)
            slow = HostManager(store, settings, indexed=False)
            for _ in range(40):
                flavor = base.flavor(vcpus=rng.choice([1, 2, 4]),
                                     memory_mb=rng.choice([512, 2048, 8192]),
                                     root_gb=rng.choice([1, 5, 20]))
                step = rng.random()
                if step < 0.3:
                    try:
                        rt.instance_claim(base.instance(flavor), rng.choice(names))
                    except ComputeResourcesUnavailable:
                        pass
                elif step < 0.35:
                    driver.set_node_size(rng.choice(names), memory_mb=rng.choice([2048, 32768]))
                    rt.update_available_resource()
                else:
                    count = rng.choice([1, 1, 2, 3])
                    self.assertEqual(self._choose(slow, flavor, count),
                                     self._choose(fast, flavor, count))
            driver.destroy_all()
            for inst in store.list_instances():
                rt.update_usage(attrs.evolve(inst, vm_state="deleted"))

    @staticmethod
    def _choose(manager, flavor, count):
        try:
            return manager.select_destinations(flavor, count)
        except NoValidHost as exc:
            return str(exc)

