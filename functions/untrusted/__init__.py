"""Reading what a requester or a job wrote (documents, metrics.json, progress, failure notes, a package's archive):
bounded, schema-checked, never able to stop a sweep, never run."""
