"""Models you can trust: which model a request may feed, then registering a success as a version, judging it by its
model's rule, and moving the alias."""
