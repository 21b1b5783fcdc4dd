"""Python's garbage collector around a torch process's start-up.

Importing torch (and torch._dynamo, which the optimizer imports when it is built) makes about a million objects
that live as long as the process. The collector, started by allocation counts, scans them again and again while
they are being made — ~0.5 s of each process's start-up here — and the interpreter collects once more over all of
them on the way out (~0.6 s of every node's exit). So a trainer process pauses the collector over its imports and
set-up, then freezes what they made: moved where no collection looks again, the exit's included.
bench/RESULTS.md has the figures.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No collection while the block runs; what exists when it ends is frozen, and the collector is on again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
