"""The compute services of ``bench.cluster_work``: one process per host.

:func:`start` runs one :class:`~nova_lite.compute.manager.ComputeService`
per host, each in a process of its own (``multiprocessing``, spawned), each
with its own ``fake.multinode`` driver, store and worker thread, exactly as
``nova-lite compute --host H`` runs it.  The bench talks to them over a
pipe: :meth:`Services.guests` (what each driver runs), :meth:`Services.steps`
(what each worker spent, see :class:`Steps`), :meth:`Services.stop`.

A service is ready once its first pass (audit of every node, heartbeat) is
done; the periodic audit then waits ``update_resources_interval`` (the
bench sets an hour), so no audit runs while work is timed.

:class:`Steps` times the worker thread's calls: ``take`` (a take that got
tasks; ``take_empty`` one that found none), ``read`` (the task's instance,
when it is not read with the task),
``spawn`` / ``destroy`` (the driver), ``free`` (a delete's state change,
which frees the claim), ``finish`` (the outcome recorded), ``poll``
(``has_work``) and ``wait`` (the listener's waits; ``wakes`` counts those
ended by a notification).  Beside the wall time of each: the worker
thread's CPU time, and the SQL statements and transactions it sent
(counted at psycopg's cursor and commit), so a task's round trips are
``statements + 2 x transactions`` (BEGIN and COMMIT).
"""

import collections
import logging
import threading
import time

LOG = logging.getLogger(__name__)

#: How long a service may take to start and make its first pass (s).
READY_TIMEOUT = 900


class Steps:
    """Per-step counters of one worker thread (see the module docstring)."""

    def __init__(self):
        self._local = threading.local()
        self.worker_thread = None
        self.reset()

    def reset(self):
        self.calls = collections.Counter()
        self.wall = collections.Counter()
        self.cpu = collections.Counter()
        self.statements = collections.Counter()
        self.transactions = collections.Counter()
        self.tasks = 0
        self.wakes = 0
        self._cpu0 = self._thread_cpu()
        self._process_cpu0 = time.process_time()

    def _thread_cpu(self):
        thread = self.worker_thread
        if thread is None or thread.ident is None:
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):   # the thread is gone, or not Linux
            return 0.0

    def _mine(self):
        return threading.current_thread() is self.worker_thread

    def _frame(self):
        """The innermost timed call of this thread: ``[step, statements, transactions]``."""
        stack = getattr(self._local, "stack", None)
        return stack[-1] if stack else None

    def timed(self, step, fn, label=None):
        """``fn`` wrapped: its calls from the worker thread counted under ``step``
        (``label(result)`` may rename the step after the call)."""
        def wrapper(*args, **kwargs):
            if not self._mine():
                return fn(*args, **kwargs)
            stack = self._local.__dict__.setdefault("stack", [])
            frame = [step, 0, 0]
            stack.append(frame)
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            try:
                result = fn(*args, **kwargs)
            finally:
                stack.pop()
            name = label(result) if label is not None else step
            self.calls[name] += 1
            self.wall[name] += time.perf_counter() - wall0
            self.cpu[name] += time.thread_time() - cpu0
            self.statements[name] += frame[1]
            self.transactions[name] += frame[2]
            return result
        return wrapper

    def _count(self, index):
        if not self._mine():
            return
        frame = self._frame()
        if frame is not None:
            frame[index] += 1
        elif index == 1:
            self.statements["other"] += 1
        else:
            self.transactions["other"] += 1

    def count_sql(self):
        """Count the worker thread's statements and transactions at psycopg."""
        import psycopg
        from psycopg import pq
        steps = self

        def counting_execute(original):
            def execute(cursor, *args, **kwargs):
                steps._count(1)
                return original(cursor, *args, **kwargs)
            return execute

        def counting_end(original):
            def end(conn, *args, **kwargs):
                if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    steps._count(2)
                return original(conn, *args, **kwargs)
            return end
        psycopg.Cursor.execute = counting_execute(psycopg.Cursor.execute)
        psycopg.Cursor.executemany = counting_execute(psycopg.Cursor.executemany)
        psycopg.Connection.commit = counting_end(psycopg.Connection.commit)
        psycopg.Connection.rollback = counting_end(psycopg.Connection.rollback)

    def install(self, service):
        """Wrap the calls of ``service``'s worker (instance attributes only)."""
        worker, tasks = service.worker, service.store.tasks

        def took(result):
            self.tasks += len(result)
            return "take" if result else "take_empty"

        def woke(result):
            self.wakes += bool(result)
            return "wait"
        tasks.take = self.timed("take", tasks.take, took)
        if hasattr(tasks, "take_with_instances"):   # the instances read with the tasks
            tasks.take_with_instances = self.timed("take", tasks.take_with_instances, took)
        tasks.finish = self.timed("finish", tasks.finish)
        if hasattr(tasks, "finish_many"):   # the outcomes of several tasks at once
            tasks.finish_many = self.timed("finish", tasks.finish_many)
        tasks.has_work = self.timed("poll", tasks.has_work)
        service.store.get_instance = self.timed("read", service.store.get_instance)
        service.driver.spawn = self.timed("spawn", service.driver.spawn)
        service.driver.destroy = self.timed("destroy", service.driver.destroy)
        service.tracker.update_usage = self.timed("free", service.tracker.update_usage)
        worker.listener.wait = self.timed("wait", worker.listener.wait, woke)

    def snapshot(self):
        """What the worker spent since the last :meth:`reset` (JSON-ready)."""
        steps = {}
        for name in sorted(set(self.calls) | set(self.statements)):
            steps[name] = {"calls": self.calls[name],  # "other": statements only
                           "wall_ms": round(self.wall[name] * 1000, 3),
                           "cpu_ms": round(self.cpu[name] * 1000, 3),
                           "statements": self.statements[name],
                           "transactions": self.transactions[name]}
        return {"tasks": self.tasks, "wakes": self.wakes, "steps": steps,
                "worker_cpu_ms": round((self._thread_cpu() - self._cpu0) * 1000, 3),
                "process_cpu_ms": round((time.process_time() - self._process_cpu0) * 1000, 3)}


def _service_main(url, host, nodes, settings_kwargs, listen, profile, ready, conn):
    """One compute service process: run until the bench says ``stop``."""
    from nova_lite import conf
    from nova_lite.compute.manager import ComputeService
    from nova_lite.db import Store
    from nova_lite.db.listen import WorkListener
    from nova_lite.virt import loader

    class BenchService(ComputeService):
        """Says it is ready once its first pass is done."""

        def run_once(self):
            result = super().run_once()
            ready.set()
            return result

    settings = conf.Settings(**settings_kwargs)
    store = Store(url)
    driver = loader.load_driver("fake.multinode", settings=settings, nodes=list(nodes))
    for name, (vcpus, memory_mb, local_gb) in nodes.items():
        driver.set_node_size(name, vcpus=vcpus, memory_mb=memory_mb, local_gb=local_gb)
    service = BenchService(host, driver, store=store, settings=settings)
    if not listen:
        # No setting turns listening off: the worker polls with this listener.
        service.worker.listener = WorkListener(store.url, host, listen=False)
    steps = Steps()
    steps.count_sql()
    steps.install(service)
    serve = service.worker.serve

    def serving(stop):
        steps.worker_thread = threading.current_thread()
        steps.reset()
        if not profile:
            return serve(stop)
        import cProfile
        profiler = cProfile.Profile(time.thread_time)   # this thread's CPU, not its waits
        profiler.enable()
        try:
            return serve(stop)
        finally:
            profiler.disable()
            profiler.dump_stats(f"{profile}.{host}.prof")
    service.worker.serve = serving

    def control():
        while True:
            command = conn.recv()
            if command == "guests":
                conn.send(driver.list_instances())
            elif command == "steps":
                conn.send(steps.snapshot())
                steps.reset()
            elif command == "stop":
                service.stop()
                return
    threading.Thread(target=control, daemon=True, name="bench control").start()
    service.run(handle_signals=False)
    store.close()
    conn.send("stopped")


class Services:
    """The running compute services of one case: ``hosts`` names them."""

    def __init__(self, processes, pipes, hosts):
        self.processes, self.pipes, self.hosts = processes, pipes, hosts

    def _ask(self, command):
        for pipe in self.pipes:
            pipe.send(command)
        return {host: pipe.recv() for host, pipe in zip(self.hosts, self.pipes)}

    def guests(self):
        """``{host: set of instance uuids its driver runs}``."""
        return {host: set(found) for host, found in self._ask("guests").items()}

    def steps(self):
        """``{host: Steps.snapshot()}``, and the counters start again."""
        return self._ask("steps")

    def stop(self, timeout=60):
        """Stop every service (profiles are written then); raise if one failed."""
        for proc, pipe in zip(self.processes, self.pipes):
            if proc.is_alive():
                try:
                    pipe.send("stop")
                except OSError:
                    pass
        for proc, pipe in zip(self.processes, self.pipes):
            if pipe.poll(timeout):
                try:
                    pipe.recv()
                except EOFError:
                    pass
            proc.join(timeout)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        failed = {h: p.exitcode for h, p in zip(self.hosts, self.processes) if p.exitcode}
        if failed:
            raise RuntimeError(f"compute service exit codes {failed}")


def start(ctx, url, layout, settings_kwargs, listen=True, profile=None):
    """Start one service process per ``{host: {node name: (vcpus, memory MB,
    disk GB)}}`` of ``layout``;
    returns :class:`Services` once every one has made its first pass."""
    processes, pipes, events = [], [], []
    for host, nodes in layout.items():
        parent, child = ctx.Pipe()
        ready = ctx.Event()
        proc = ctx.Process(target=_service_main, name=f"compute {host}",
                           args=(url, host, nodes, settings_kwargs, listen, profile, ready,
                                 child))
        proc.start()
        processes.append(proc)
        pipes.append(parent)
        events.append(ready)
    services = Services(processes, pipes, list(layout))
    deadline = time.monotonic() + READY_TIMEOUT
    for host, proc, ready in zip(layout, processes, events):
        while not ready.wait(0.5):
            if not proc.is_alive() or time.monotonic() > deadline:
                services.stop()
                raise RuntimeError(f"compute service of {host} did not start "
                                   f"(exit code {proc.exitcode})")
    return services
