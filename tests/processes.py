"""Run worker functions in processes of their own, started together.

A test that needs real concurrency (claims from several processes on one
database file or server) starts its workers with :func:`run_together`.
Each worker is a module-level function called as ``target(*args,
barrier, results)``: it waits on ``barrier`` so the workers start their
work together, and puts exactly one outcome on ``results``.  The
processes are spawned (not forked), so nothing of the parent's open
connections leaks into them.
"""

import multiprocessing
import queue


def run_together(test, target, args_of_each, timeout=180.0):
    """Start one process per entry of ``args_of_each`` running ``target``;
    return their outcomes in the order they were reported.

    ``test`` is the running TestCase: it fails when a worker reports
    nothing within ``timeout`` seconds (of the wait for each outcome) or
    exits with a non-zero code.  Processes still alive are killed.
    """
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(args_of_each)), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, results))
             for args in args_of_each]
    for proc in procs:
        proc.start()
    outcomes = []
    try:
        for _ in procs:
            outcomes.append(results.get(timeout=timeout))
    except queue.Empty:
        test.fail(f"only {len(outcomes)} of {len(procs)} workers reported within {timeout} s")
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
    test.assertEqual([0] * len(procs), [proc.exitcode for proc in procs])
    return outcomes
