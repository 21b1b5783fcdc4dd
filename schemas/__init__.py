"""The trainctl contract: the job request, lifecycle events and the GPU catalog. Imports pydantic only."""
