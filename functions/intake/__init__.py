"""A request's arrival: markers and their rules, then admit → claim → submit, exactly once (DESIGN.md §4)."""
