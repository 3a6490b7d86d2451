"""Reliability tests: stateful properties, soaks, faults, bad input, security.

They run real SQLite files and a real PostgreSQL server (skipped when it is
absent, failed when ``NOVA_LITE_REQUIRE_ALL=1``); nothing under test is
mocked.
"""
