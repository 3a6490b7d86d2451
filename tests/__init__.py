"""The core's test suite.

Property-based tests run on busy CI machines: hypothesis's time-based
checks (a per-example deadline, the slow-generation health check) would
turn a slow machine into a failure that says nothing about the code, so
this suite's profile turns them off.  What the properties assert is
unchanged.

A SQLAlchemy deprecation is an error here: besides the change it warns
of, each call of a deprecated API costs a warning's work (a stack walk and
the registry's lookup), which on a hot path was a twentieth of a build.
"""

import warnings

from hypothesis import HealthCheck, settings
from sqlalchemy.exc import SADeprecationWarning

warnings.filterwarnings("error", category=SADeprecationWarning)

settings.register_profile(
    "nova-lite", deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
settings.load_profile("nova-lite")
