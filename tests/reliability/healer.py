"""A heal process beside the chaos: ``nova-lite audit --heal`` in a loop.

``python -m tests.reliability.healer URL LOG STOP`` runs
:func:`nova_lite.leaks.find_leaks` and :func:`nova_lite.leaks.heal` over
every host, again and again, with a ``migration_stuck_age`` of 10 ms (so
every move in progress is a candidate), until the file ``STOP`` exists;
then it passes again until a pass applies nothing (at most 5 more).  It
prints ``{"beside": passes begun before STOP, "passes": .., "applied": ..}``.

Each step is logged, one JSON object a line, for
:mod:`tests.reliability.history`: a skipped one with its reason; an
applied one with the generations it committed at and the allocations it
removed (read through :class:`RecordingStore`: a
:class:`~nova_lite.leaks.HealAction` carries neither), when its read began
and ended, the hosts whose services were up, and the consumer's record as
read after the step.  It runs at a lower priority than the churn it
watches.
"""

import json
import os
import sys
import time

from nova_lite import leaks
from nova_lite.db import Store
from nova_lite.exception import NovaLiteError
from tests.reliability import chaos

#: ``[compute] migration_stuck_age`` of the heal passes (s).
STUCK_AGE = 0.01


class RecordingStore(Store):
    """A Store that keeps each heal step it was asked for and its
    :class:`~nova_lite.db.heal_writes.HealResult` (the generations it committed at,
    which a :class:`~nova_lite.leaks.HealAction` does not carry)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.heal_steps = []

    def heal(self, change):
        result = super().heal(change)
        self.heal_steps.append((change, result))
        return result


class Healer(chaos.EventLog):
    """``nova-lite audit --heal`` in a loop, logging every step it took."""

    def __init__(self, url, log_path):
        self.store = RecordingStore(url, busy_timeout=30)
        self.open_log(log_path)
        self.settings = chaos.settings(chaos.HOSTS[0], migration_stuck_age=STUCK_AGE)

    def heal_pass(self):
        """One find_leaks + heal; returns the number of steps applied."""
        store = self.store
        try:
            up = [s.host for s in store.list_services()
                  if s.is_up(self.settings.service_down_time)]
            names = {n.uuid: n.nodename for n in store.get_compute_nodes()}
            read_at = time.time()
            report = leaks.find_leaks(store, self.settings)
            read_done = time.time()
            store.heal_steps.clear()
            actions = leaks.heal(store, report)
        except NovaLiteError as exc:
            self.write(op="heal", result="error", error=f"{type(exc).__name__}: {exc}")
            return 0
        # heal() asks the store for each step in order: pair them (or, if the
        # product ever stops doing so, log the steps without them: the
        # checker then says it cannot place them).
        steps = list(store.heal_steps)
        if [(c.kind, c.subject) for c, _ in steps] != [(a.kind, a.subject) for a in actions]:
            steps = [(None, None)] * len(actions)
        for action, (change, result) in zip(actions, steps):
            base = dict(op="heal", kind=action.kind, subject=action.subject,
                        instance=action.instance_uuid, host=action.host, node=action.nodename,
                        detail=action.detail)
            if action.outcome != leaks.APPLIED:
                self.write(**base, result="skipped", reason=action.reason)
                continue
            self.write(**base, result="ok", read_at=read_at, read_done=read_done,
                       services_up=up, nodes=names,
                       generations=result.generations if result else None,
                       removed=[list(a) for a in change.allocations] if change else None,
                       record=self.record_of(action.subject, action.instance_uuid))
        return sum(a.outcome == leaks.APPLIED for a in actions)

    def record_of(self, subject, instance_uuid):
        """The consumer's record as read after the step (for the checker's messages)."""
        try:
            if subject != instance_uuid:
                mig = next(m for m in self.store.list_migrations(instance_uuid=instance_uuid)
                           if m.uuid == subject)
                return {"migration": mig.uuid, "status": mig.status,
                        "hosts": sorted({mig.source_compute, mig.dest_compute}),
                        "from": f"{mig.source_compute}/{mig.source_node}",
                        "to": f"{mig.dest_compute}/{mig.dest_node}"}
            inst = self.store.get_instance(instance_uuid)
        except (NovaLiteError, StopIteration):
            return None
        return {"instance": inst.uuid, "vm_state": inst.vm_state,
                "task_state": inst.task_state, "on": f"{inst.host}/{inst.node}"}

    def run(self, stop_path, last_passes=5):
        """Heal until ``stop_path`` exists, then until a pass applies nothing
        (at most ``last_passes`` more).  Returns ``{"beside": passes begun
        before the stop, "passes": every pass, "applied": steps applied}``."""
        os.nice(5)   # beside the churn, not ahead of it: on 2 cores it would halve its pace
        beside = applied = 0
        while not os.path.exists(stop_path):
            applied += self.heal_pass()
            beside += 1
        passes = beside
        for _ in range(last_passes):   # every worker had stopped: the records stay still
            passes += 1
            done = self.heal_pass()
            applied += done
            if not done:
                break
        return {"beside": beside, "passes": passes, "applied": applied}


def main(argv):
    url, log_path, stop_path = argv
    healer = Healer(url, log_path)
    try:
        print(json.dumps(healer.run(stop_path)), flush=True)
    finally:
        healer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
