"""The built-in MLP and the `module:factory` hook that lets a user train their own `nn.Module` on the same
pipeline. A factory is called as `factory(in_features=…, out_features=…, **kwargs)`; `model.pt` records the
factory and its arguments, so `trainer.predict` rebuilds the same module before loading the weights."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from torch import nn

BUILTIN_MLP = "trainer.model:mlp"


def mlp(
    in_features: int, out_features: int, hidden_sizes: Sequence[int] = (128, 64), dropout: float = 0.1
) -> nn.Module:
    layers: list[nn.Module] = []
    width = in_features
    for hidden in hidden_sizes:
        layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


def load_factory(spec: str) -> Callable[..., nn.Module]:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--model {spec!r} must look like 'package.module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--model {spec!r}: cannot load it ({e})") from e
    if not callable(factory):
        raise ValueError(f"--model {spec!r} is not callable")
    return factory


def build_model(spec: str, in_features: int, out_features: int, kwargs: dict) -> nn.Module:
    model = load_factory(spec)(in_features=in_features, out_features=out_features, **kwargs)
    if not isinstance(model, nn.Module):
        raise TypeError(f"--model {spec!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model
