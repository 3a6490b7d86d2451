"""Sphinx directive ``nova-lite-config``: the configuration reference.

The text comes from :func:`nova_lite.conf_reference.reference_rst`, which
reads the option metadata declared on each ``nova_lite.conf.Settings``
field, so the page can never disagree with the code::

    .. nova-lite-config::
"""

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class NovaLiteConfigDirective(SphinxDirective):
    """Render every option of ``nova_lite.conf.Settings``, by section."""

    has_content = False

    def run(self):
        from nova_lite import conf, conf_reference

        # Rebuild this page whenever the options' declarations change.
        self.env.note_dependency(conf.__file__)
        self.env.note_dependency(conf_reference.__file__)
        text = conf_reference.reference_rst()
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(text.splitlines(), "nova_lite.conf"),
                                 container)
        return container.children


def setup(app):
    app.add_directive("nova-lite-config", NovaLiteConfigDirective)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
