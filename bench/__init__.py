"""nova-lite benchmarks (not tests): ``python -m bench.run_all``.

One module per scenario (``bench.claims``, ``bench.audit``, ``bench.fleet``,
``bench.concurrency``), each printing one JSON object; ``bench.run_all``
runs them all, ``bench.summary`` turns its output into a table and
``bench.profiler`` profiles one case.  See doc/source/benchmarks.rst for
what they measure and the recorded results.
"""
