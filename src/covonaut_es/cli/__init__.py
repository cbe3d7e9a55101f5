"""The ``covonaut-es`` command line (also ``python -m covonaut_es``).

This package owns the operator's commands: one module per command group, with the
options they share declared once. It is an outer layer: it may import every other
package, and nothing but ``python -m covonaut_es`` imports it.
"""

from covonaut_es.cli._app import main

__all__ = ["main"]
