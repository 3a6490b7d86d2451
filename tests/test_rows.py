"""Rows from records: an instance's and an allocation's row, as tuples and as dicts.

A claim writes its rows as tuples in a fixed column order
(:func:`~nova_lite.db.rows.new_instance_row`,
:func:`~nova_lite.db.rows.allocation_row`); every other writer takes them
as dicts by column name.  These tests hold that the two name every column
of their tables, and that each row reads back as the record it was made
from, whatever it holds (NUMA cells, PCI requests and devices, a zone,
other classes, child providers).
"""

import collections
import uuid

from nova_lite import objects
from nova_lite.db import models, rows
from nova_lite.objects import Allocation, InstanceNUMACell, InstanceNUMATopology, PciRequest
from tests import base


def _read_back(columns, row):
    """``row`` (a tuple in the order of ``columns``) as a row read by column name."""
    return collections.namedtuple("Row", columns)(*row)


def _rich_instance():
    return base.instance(
        base.flavor(vcpus=2), project_id="p", user_id="u", host="h", node="n",
        vm_state=objects.BUILDING, task_state="spawning", availability_zone="az1",
        pci_requests=[PciRequest(count=1, vendor_id="10de", product_id="1db4")],
        pci_devices=("0000:81:00.1",),
        numa_topology=InstanceNUMATopology(cells=[InstanceNUMACell(
            id=0, cpuset={0, 1}, memory_mb=512, cpu_policy="dedicated")]))


def _rich_allocation(inst):
    return Allocation(
        consumer_uuid=inst.uuid, consumer_type="instance", instance_uuid=inst.uuid,
        node_uuid=str(uuid.uuid4()), flavor=inst.flavor, numa_topology=inst.numa_topology,
        pci_devices=("0000:81:00.1",),
        resources={"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1, "CUSTOM_GOLD": 1, "VGPU": 1},
        providers={"gpu0": {"VGPU": 1}})


class TestRowColumns(base.TestCase):

    def test_the_rows_name_every_column_of_their_tables_once(self):
        for columns, table in ((rows.INSTANCE_ROW_COLUMNS, models.instances),
                               (rows.ALLOCATION_ROW_COLUMNS, models.allocations)):
            with self.subTest(table.name):
                self.assertEqual(len(columns), len(set(columns)))
                self.assertEqual({c.name for c in table.columns}, set(columns))


class TestInstanceRows(base.TestCase):

    def test_a_plain_and_a_rich_instance_read_back_as_recorded(self):
        for inst in (base.instance(project_id="p", host="h", node="n"), _rich_instance()):
            with self.subTest(inst.uuid):
                row = rows.new_instance_row(inst, 12.5)
                self.assertEqual(len(rows.INSTANCE_ROW_COLUMNS), len(row))
                back = _read_back(rows.INSTANCE_ROW_COLUMNS, row)
                self.assertEqual(inst, rows.instance_from_row(back))
                self.assertEqual((12.5, 12.5), (back.created_at, back.updated_at))

    def test_the_dicts_are_the_row_by_name_and_an_update_leaves_out_the_key(self):
        inst = _rich_instance()
        row = rows.new_instance_row(inst, 7.0)
        self.assertEqual(dict(zip(rows.INSTANCE_ROW_COLUMNS, row)),
                         rows.new_instance_values(inst, 7.0))
        update = rows.instance_values(inst, 7.0)
        self.assertEqual(set(rows.INSTANCE_UPDATE_COLUMNS), set(update))
        self.assertEqual("az1", update["availability_zone"])
        self.assertEqual(7.0, update["updated_at"])


class TestAllocationRows(base.TestCase):

    def test_a_plain_and_a_rich_allocation_read_back_as_recorded(self):
        inst = _rich_instance()
        plain = Allocation(consumer_uuid=inst.uuid, consumer_type="instance",
                           instance_uuid=inst.uuid, node_uuid=str(uuid.uuid4()),
                           flavor=inst.flavor, resources={"VCPU": 2, "MEMORY_MB": 512})
        for alloc in (plain, _rich_allocation(inst)):
            with self.subTest(alloc.providers):
                row = rows.allocation_row(alloc, 3.0)
                back = _read_back(rows.ALLOCATION_ROW_COLUMNS, row)
                self.assertEqual(alloc, rows.allocation_from_row(back))
                self.assertEqual(3.0, back.created_at)

    def test_a_child_provider_s_class_is_not_also_the_node_s_other_class(self):
        alloc = _rich_allocation(_rich_instance())
        back = _read_back(rows.ALLOCATION_ROW_COLUMNS, rows.allocation_row(alloc, 0.0))
        self.assertEqual('{"CUSTOM_GOLD":1}', back.other.replace(" ", ""))
        self.assertEqual((2, 0, 512, 1), (back.vcpu, back.pcpu, back.memory_mb, back.disk_gb))
        self.assertEqual(dict(zip(rows.ALLOCATION_ROW_COLUMNS,
                                  rows.allocation_row(alloc, 0.0))),
                         rows.allocation_values(alloc, 0.0))
