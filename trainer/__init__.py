"""The DDP trainer that runs inside a job's container, configured only by its command line; README.md maps it."""
