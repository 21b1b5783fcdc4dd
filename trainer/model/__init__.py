"""What is learned and how it runs: the network (built-in MLP or a user's factory), the objective, the GPU settings."""

# `trainer.model:mlp` is the built-in network's name in every model.pt (network.BUILTIN_MLP), those of champions
# trained before the trainer had folders included, and a champion is loaded only when its name matches: it stays here.
from trainer.model.network import mlp

__all__ = ["mlp"]
