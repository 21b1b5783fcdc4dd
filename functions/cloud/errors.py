"""The one distinction the entry points act on: retry (raise, the trigger redelivers) or not (return)."""


class Transient(Exception):
    """Worth retrying: a dependency is down or busy, or another delivery holds the claim. The entry point
    re-raises it so the event is redelivered (with backoff, up to the retry window, then dead-lettered)."""
