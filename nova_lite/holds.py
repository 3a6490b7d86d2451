"""What holds resources: the one rule, for instances and migrations.

Every reader that must know whether a consumer holds resources on a node
asks here: the periodic pass's SQL (through :mod:`nova_lite.db.holds_sql`,
built from these sets), the leak finder, heal (inside its own
transaction), explain, the audit command, the API and the metrics.

An **instance** holds resources on the node its record places it on
(``host`` and ``node`` both set) unless it is deleted.  Shelve-offload
takes an instance off its node (the record keeps no host or node), so an
offloaded record that is placed was placed by the claim of an unshelve:
it holds that claim whatever its task_state.  A state being *recorded*
(``update_usage``) is judged on the state alone, ``placed=False``:
recording ``shelved_offloaded`` without an unshelve task is the offload
itself, and frees the instance.

A **migration** holds its destination's claim (and, on a resize within one
node, both flavors count) while its status is in progress: every status
Nova's resource tracker counts, up to a final one.

Nova's strings throughout: vm_state, task_state and migration status.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nova_lite.objects import Instance

# Nova's vm_state strings.
ACTIVE = "active"
BUILDING = "building"
PAUSED = "paused"
SUSPENDED = "suspended"
STOPPED = "stopped"
RESCUED = "rescued"
RESIZED = "resized"
SOFT_DELETED = "soft-delete"
DELETED = "deleted"
ERROR = "error"
SHELVED = "shelved"
SHELVED_OFFLOADED = "shelved_offloaded"
VM_STATES = frozenset({ACTIVE, BUILDING, PAUSED, SUSPENDED, STOPPED, RESCUED, RESIZED,
                       SOFT_DELETED, DELETED, ERROR, SHELVED, SHELVED_OFFLOADED})

#: Nova's task_state strings (None: no task).
TASK_STATES = (
    None, "scheduling", "block_device_mapping", "networking", "spawning",
    "image_snapshot", "image_snapshot_pending", "image_pending_upload", "image_uploading",
    "image_backup", "updating_password", "resize_prep", "resize_migrating",
    "resize_migrated", "resize_finish", "resize_reverting", "resize_confirming",
    "rebooting", "reboot_pending", "reboot_started", "rebooting_hard",
    "reboot_pending_hard", "reboot_started_hard", "pausing", "unpausing", "suspending",
    "resuming", "powering-off", "powering-on", "rescuing", "unrescuing", "rebuilding",
    "rebuild_block_device_mapping", "rebuild_spawning", "migrating", "deleting",
    "soft-deleting", "restoring", "shelving", "shelving_image_pending_upload",
    "shelving_image_uploading", "shelving_offloading", "unshelving")

#: task_states of a shelved-offloaded instance being spawned again (unshelve).
UNSHELVE_TASK_STATES = frozenset({"unshelving", "spawning"})
#: vm_states whose state alone holds nothing (see :func:`instance_holds`).
STATES_WITHOUT_RESOURCES = frozenset({DELETED, SHELVED_OFFLOADED})

#: Migration statuses that still hold resources, in Nova's order of a move:
#: a cold migration or resize (``pre-migrating`` to ``finished``, then
#: ``confirming`` or ``reverting``), a live migration (``accepted`` to
#: ``running``) and an evacuation.
MIGRATION_IN_PROGRESS = frozenset({
    "accepted", "queued", "preparing", "pre-migrating", "migrating", "running",
    "post-migrating", "finished", "confirming", "reverting"})
#: Migration statuses that hold nothing: the move is over.
MIGRATION_FINAL = frozenset({
    "confirmed", "reverted", "completed", "done", "error", "failed", "cancelled"})
MIGRATION_STATUSES = MIGRATION_IN_PROGRESS | MIGRATION_FINAL
#: Statuses of a move whose guest already runs on the destination: it waits
#: for a person to confirm (or revert) it, or is being confirmed.
MIGRATION_WAITING_FOR_CONFIRM = frozenset({"finished", "confirming"})

#: The order each kind of move goes through its statuses (Nova's).
MIGRATION_STEPS = {
    "resize": ("pre-migrating", "migrating", "post-migrating", "finished"),
    "migration": ("pre-migrating", "migrating", "post-migrating", "finished"),
    "live-migration": ("accepted", "queued", "preparing", "running", "completed"),
    "evacuation": ("accepted", "pre-migrating", "done"),
}


def instance_holds(vm_state: str, task_state: str | None, placed: bool) -> bool:
    """Whether an instance in ``vm_state``/``task_state`` holds resources.

    ``placed``: its record has a host and a node (it holds them *there*;
    an instance with no node holds nothing anywhere, whatever this says).
    Pass ``placed=False`` to judge a state being recorded on its own.
    """
    if vm_state == DELETED:
        return False
    if vm_state != SHELVED_OFFLOADED:
        return True
    return bool(placed) or task_state in UNSHELVE_TASK_STATES


def instance_holds_on(instance: "Instance", host: str | None, nodename: str | None) -> bool:
    """Whether the record ``instance`` holds resources on node ``host``/``nodename``."""
    return (instance.host, instance.node) == (host, nodename) and instance_holds(
        instance.vm_state, instance.task_state, placed=True)


def migration_holds(status: str) -> bool:
    """Whether a migration in ``status`` holds its claim (destination, or both on one node)."""
    return status in MIGRATION_IN_PROGRESS


def hold_table() -> list[tuple[str, str | None, bool, bool]]:
    """Every (vm_state, task_state, placed) with what it holds: a list of
    ``(vm_state, task_state, placed, holds)``, in a stable order."""
    return [(vm, task, placed, instance_holds(vm, task, placed))
            for vm in sorted(VM_STATES) for task in TASK_STATES for placed in (True, False)]


__all__ = ["instance_holds", "instance_holds_on", "migration_holds", "hold_table",
           "VM_STATES", "TASK_STATES", "UNSHELVE_TASK_STATES", "STATES_WITHOUT_RESOURCES",
           "MIGRATION_IN_PROGRESS", "MIGRATION_FINAL", "MIGRATION_STATUSES",
           "MIGRATION_WAITING_FOR_CONFIRM", "MIGRATION_STEPS"]
