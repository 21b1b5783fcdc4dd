"""The commands trainctl suggests to the user (in a problem's one line, or after what it did), typed as this
shell can run them."""

from __future__ import annotations

import sys
from pathlib import Path


def trainctl_command() -> str:
    """`trainctl` as the user can type it in a fresh shell, for the commands the CLI suggests: a new shell has not
    activated .venv, so the path the user typed (`.venv/bin/trainctl`), or this installation's script by its
    path, relative to the current folder when it lies inside it."""
    typed = Path(sys.argv[0]) if sys.argv and Path(sys.argv[0]).name == "trainctl" else None
    if typed is not None and not typed.is_absolute():
        return str(typed)
    script = typed or Path(sys.executable).parent / "trainctl"
    try:
        relative = script.relative_to(Path.cwd())
    except ValueError:
        return str(script)
    return str(relative) if relative.parent != Path() else f"./{relative}"  # a bare name would be looked up on PATH


def local_stack_hint() -> str:
    """How to bring the local stack up, typed as this shell can run it."""
    return f"`{trainctl_command()} local up --detach` starts one"
