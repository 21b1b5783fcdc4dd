"""Reading what a requester or a job wrote (documents, metrics.json, progress, failure notes): bounded, schema-checked,
never able to stop a sweep."""
