"""The run against the champion on rows it does not choose: scores, reference set, bootstrap, label check, drift."""
