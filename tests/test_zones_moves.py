"""Instances record their availability zone at build; resize and migrate keep it.

h1 and h2 are in zone az1, h3 in az2; each host a real ComputeService with
its fake driver on one store (SQLite file or PostgreSQL schema).
"""

import json
import uuid

import attrs

from nova_lite import objects
from nova_lite.cli import server
from nova_lite.compute import api, moves
from nova_lite.scheduler import NoValidHost, RequestSpec
from tests import base
from tests.reliability.base import dump
from tests.test_moves import BIG, SMALL, Hosts, use_move_commands
from tests.test_moves import CommandTests as _Commands


class _Zones(Hosts):

    hosts = ("h1", "h2", "h3")

    def setUp(self):
        super().setUp()
        aggs = self.store.aggregates
        aggs.create("rack-a", "az1")
        aggs.add_host("rack-a", "h1")
        aggs.add_host("rack-a", "h2")
        aggs.create("rack-b", "az2")
        aggs.add_host("rack-b", "h3")

    def built(self, spec, settings=None):
        result = api.build(self.store, spec, settings=settings or self.settings_)
        self.drive()
        return self.store.get_instance(result.instances[0].uuid)

class ZoneMoveTests(_Zones):

    def test_a_build_records_the_zone_it_was_scheduled_in(self):
        # No zone asked: the zone of the host it landed on.
        inst = self.built(RequestSpec(SMALL, force_hosts=("h3",)))
        self.assertEqual(("active", "h3", "az2"),
                         (inst.vm_state, inst.host, inst.availability_zone))
        inst = self.built(RequestSpec(SMALL, force_hosts=("h1",)))
        self.assertEqual("az1", inst.availability_zone)
        # A zone asked: that zone.
        inst = self.built(RequestSpec(SMALL, availability_zone="az2"))
        self.assertEqual(("h3", "az2"), (inst.host, inst.availability_zone))

    def test_default_schedule_zone(self):
        conf = self.settings(reserved_host_memory_mb=0, default_schedule_zone="az2")
        for _ in range(3):
            inst = self.built(RequestSpec(SMALL), settings=conf)
            self.assertEqual(("h3", "az2"), (inst.host, inst.availability_zone))
        # A zone asked wins over it.
        inst = self.built(RequestSpec(SMALL, availability_zone="az1"), settings=conf)
        self.assertEqual("az1", inst.availability_zone)

    def test_a_claim_on_an_alternate_records_the_alternates_zone(self):
        # The chosen node has no room by claim time (the claim's limits say
        # so): the claim lands on an alternate of another zone, and records it.
        manager = api.HostManager(self.store, self.settings_)
        (sel,) = manager.select_destinations(RequestSpec(SMALL))
        (alternate,) = [a for a in sel.alternates
                        if manager.host_zone(a.host) != manager.host_zone(sel.host)][:1]
        lost = attrs.evolve(sel, limits={"memory_mb": 1.0}, alternates=(alternate,))
        attempts = []
        inst = objects.Instance(uuid=str(uuid.uuid4()), flavor=SMALL, project_id="demo")
        trackers = api.RecordsTrackers(self.store, self.settings_)
        (claim,) = api._claim_with_alternates(lost, [inst], trackers, attempts,
                                              manager.host_zone).claims
        self.assertEqual([sel.host], [a[0] for a in attempts])
        self.assertEqual(alternate.host, claim.instance.host)
        self.assertEqual(manager.host_zone(alternate.host),
                         self.store.get_instance(inst.uuid).availability_zone)
        claim.abort()

    def test_resize_keeps_the_zone(self):
        inst = self.build(host="h1")
        self.assertEqual("az1", inst.availability_zone)
        for _ in range(3):   # h2 is the only other host of az1, whatever the weights
            task = moves.resize(self.store, inst, BIG, settings=self.settings_)
            self.assertEqual("h2", task.host)
            self.drive()
            moves.revert(self.store, inst)
            self.drive()
        # h2 unavailable: no host in the zone, and the report says why h3 went.
        self.store.set_service_disabled("h2", True, "maintenance")
        before = dump(self.store)
        exc = self.assertRaises(NoValidHost, moves.resize, self.store, inst, BIG,
                                settings=self.settings_)
        self.assertIn("AvailabilityZone removed 1 of 2 hosts: host is in availability zone "
                      "'az2', not 'az1'", str(exc))
        self.assertEqual(before, dump(self.store))

    def test_migrate_keeps_the_zone_and_confirm_keeps_it(self):
        inst = self.build(host="h1")
        task = moves.migrate(self.store, inst, settings=self.settings_)
        self.assertEqual("h2", task.host)
        self.drive()
        self.drive_confirm(inst)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("active", "h2", "az1"), (now.vm_state, now.host,
                                                   now.availability_zone))

    def test_migrate_to_a_host_of_another_zone_is_refused(self):
        inst = self.build(host="h1")
        before = dump(self.store)
        exc = self.assertRaises(NoValidHost, moves.migrate, self.store, inst, "h3",
                                settings=self.settings_)
        self.assertIn("AvailabilityZone removed 1 of 1 hosts", str(exc))
        self.assertEqual(before, dump(self.store))
        self.assertIsNone(self.store.get_instance(inst.uuid).task_state)

    def test_a_record_without_a_zone_moves_within_its_hosts_zone(self):
        inst = self.build(host="h1")
        old = attrs.evolve(self.store.get_instance(inst.uuid), availability_zone=None)
        self.store.record_instance_state(old)
        self.assertIsNone(self.store.get_instance(inst.uuid).availability_zone)
        self.assertEqual("az1", moves.server_zone(self.store, old, self.settings_))
        self.assertRaises(NoValidHost, moves.migrate, self.store, inst, "h3",
                          settings=self.settings_)
        self.assertEqual("h2", moves.migrate(self.store, inst, settings=self.settings_).host)


class TestZoneMovesSQLite(ZoneMoveTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestZoneMovesPostgreSQL(ZoneMoveTests, base.OnPostgreSQL, base.TestCase):
    pass


class ZoneCommandTests(_Zones):
    """``server create|list|show`` show the zone."""

    cli = _Commands.cli

    def setUp(self):
        super().setUp()
        use_move_commands(self)

    def test_list_and_show_show_the_zone(self):
        self.build(host="h3")
        code, out, err = self.cli("server", "create", "--vcpus", "1", "--ram", "512",
                                  "--availability-zone", "az1", "-f", "json")
        self.assertEqual(0, code, err)
        (made,) = json.loads(out)
        self.assertEqual("az1", made["Availability Zone"])
        code, out, err = self.cli("server", "list", "-f", "json", "--long")
        self.assertEqual(0, code, err)
        zones = sorted(r["Availability Zone"] for r in json.loads(out))
        self.assertEqual(["az1", "az2"], zones)
        code, out, err = self.cli("server", "show", made["ID"], "-f", "json")
        self.assertEqual(0, code, err)
        self.assertEqual("az1", json.loads(out)["availability_zone"])
        self.assertIn("Availability Zone", server.LIST_HEADERS)


class TestZoneCommandsSQLite(ZoneCommandTests, base.OnSQLiteFile, base.TestCase):
    pass
