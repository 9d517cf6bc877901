"""``python -m zshard``: the ``zshard`` command."""

from ._cli import main

main()
