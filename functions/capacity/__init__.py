"""Where and when a request's GPUs run: the capacity ladder and a request's next attempt, trainctl's quota pool and
queue, fair share between teams, and budgets."""
