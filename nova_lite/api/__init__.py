"""The read-only JSON API and overview page (``nova-lite api serve``).

See :mod:`nova_lite.api.app` for the routes and :mod:`nova_lite.api.openapi`
for their OpenAPI document.
"""

from nova_lite.api.app import ApiApp, make_app

__all__ = ["ApiApp", "make_app"]
