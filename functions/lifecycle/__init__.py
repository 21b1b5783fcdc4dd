"""A request's life after submission: what each Vertex job state means, observing a job, and the reconcile sweep."""
