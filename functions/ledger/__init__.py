"""The control bucket's records: each request's ledger record and the outbox of its events, request keys, the history
of outcomes, the output folders held, each model's records and charter."""
