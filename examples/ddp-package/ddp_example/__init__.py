"""A small two-node DDP training package that follows trainctl's contract for your own code (README: Your own code)."""
