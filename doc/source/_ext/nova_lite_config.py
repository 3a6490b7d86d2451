"""Sphinx directive ``nova-lite-config``: the configuration reference.

The text comes from :func:`nova_lite.conf_reference.reference_rst`, which
reads the option metadata declared on each ``nova_lite.conf.Settings``
field, so the page can never disagree with the code::

    .. nova-lite-config::

Given the dotted path of a driver's options class, it renders that
class's options instead::

    .. nova-lite-config:: nova_lite_libvirt.config.LibvirtOptions
"""

import importlib
import sys


from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class NovaLiteConfigDirective(SphinxDirective):
    """Render every option of ``nova_lite.conf.Settings`` (or of the options
    class named by the argument), by section."""

    has_content = False
    optional_arguments = 1

    def run(self):
        from nova_lite import conf, conf_reference

        # Rebuild this page whenever the options' declarations change.
        self.env.note_dependency(conf.__file__)
        self.env.note_dependency(conf_reference.__file__)
        cls = None
        if self.arguments:
            module_name, _, name = self.arguments[0].rpartition(".")
            module = importlib.import_module(module_name)
            cls = getattr(module, name)
            self.env.note_dependency(sys.modules[module_name].__file__)
        text = conf_reference.reference_rst(conf_reference.option_docs(cls))
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(text.splitlines(), "nova_lite.conf"),
                                 container)
        return container.children


def setup(app):
    app.add_directive("nova-lite-config", NovaLiteConfigDirective)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
