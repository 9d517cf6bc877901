"""The Rust extension behind ``zshard`` (internal: use the functions of ``zshard``)."""

from collections.abc import Callable

__version__: str

def run(args: list[str], progress: Callable[[dict[str, int]], object] | None = None) -> str:
    """Runs a ``convert``, ``plan``, ``finalize``, ``verify`` or ``ls`` command line (no program name) and
    returns its result as JSON."""

def cli_main(args: list[str]) -> int:
    """Runs the ``zshard`` command with ``args`` (no program name) and returns its exit status."""

__all__ = ["run", "cli_main", "__version__"]
