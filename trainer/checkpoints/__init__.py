"""Checkpoints that survive preemption: what one holds, its copy taken in a step's time, and the committed write."""
