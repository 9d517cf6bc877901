"""The ``zshard`` console script: the same command as the ``zshard`` binary (``zshard_cli::main``)."""

from __future__ import annotations

import sys

from . import _zshard


def main() -> None:
    """Runs ``zshard`` with this process's arguments and exits with its status."""
    sys.exit(_zshard.cli_main(sys.argv[1:]))
