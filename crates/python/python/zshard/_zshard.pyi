"""The Rust extension behind ``zshard`` (internal: use the functions of ``zshard``).

Each function takes the settings given (keyword -> value, none ``None``), builds the library's options
model from them and returns the library's result as a dict."""

from collections.abc import Callable, Mapping
from typing import Any

__version__: str

def convert(
    src: object,
    dst: object,
    options: Mapping[str, object],
    progress: Callable[[dict[str, int]], object] | None = None,
) -> dict[str, Any]:
    """Converts ``src`` into ``dst``; returns the run's report document."""

def plan(src: object, dst: object, options: Mapping[str, object]) -> dict[str, Any]:
    """What converting ``src`` into ``dst`` would do; returns the plan document."""

def finalize(src: object, dst: object, options: Mapping[str, object]) -> dict[str, Any]:
    """Finalizes a partitioned conversion of ``src`` into ``dst``."""

def verify(src: object, dst: object | None, options: Mapping[str, object]) -> dict[str, Any]:
    """Compares the output ``dst`` with its source ``src`` (with ``manifest``: the output alone with its
    kept manifest)."""

def status(dst: object, options: Mapping[str, object]) -> dict[str, Any]:
    """How far the conversion into ``dst`` has come; returns the status document."""

def ls(src: object, options: Mapping[str, object]) -> dict[str, Any]:
    """The arrays and groups of ``src``."""

def run(
    job: object,
    worker: str | None = None,
    workers: int | None = None,
    progress: Callable[[dict[str, int]], object] | None = None,
) -> list[dict[str, Any]]:
    """Runs every conversion of the job file ``job``; returns their report documents in order."""

def settings(command: str) -> list[str]:
    """The keys of the settings of the library's options model that ``command`` (``convert``, ``plan``,
    ``finalize``, ``verify``, ``ls`` or ``status``) takes; ``source`` and ``destination`` are ``src`` and ``dst``."""

def cli_main(args: list[str]) -> int:
    """Runs the ``zshard`` command with ``args`` (no program name) and returns its exit status."""

__all__ = ["convert", "plan", "finalize", "verify", "ls", "status", "run", "settings", "cli_main", "__version__"]
