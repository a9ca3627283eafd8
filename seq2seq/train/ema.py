"""An exponential moving average of the weights (Polyak averaging), kept beside training.

After every update, shadow ← decay · shadow + (1 − decay) · weights. What a run hands on is the
average: validation scores it, the best checkpoint holds it, and every checkpoint's weights file
is it, so `translate`, `evaluate`, `export` and checkpoint averaging all see the averaged model
without knowing about it. The raw weights, which the optimizer goes on from, travel in the
checkpoint's trainer state so that `--resume` continues exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class WeightEMA:
    """The moving average of a model's floating-point parameters."""

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be between 0 and 1, not {decay}")
        self.decay = decay
        self.names = [n for n, p in model.named_parameters() if p.dtype.is_floating_point]
        self.shadow = [p.detach().clone() for p in self._params(model)]
        # The training step calls update: the model's parameter list is looked up once.
        self._model, self._model_params = model, self._params(model)

    def _params(self, model: nn.Module) -> list[torch.Tensor]:
        if getattr(self, "_model", None) is model:
            return self._model_params
        params = dict(model.named_parameters())
        return [params[n] for n in self.names]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average towards the model's current weights (once per update)."""
        torch._foreach_lerp_(self.shadow, self._params(model), 1 - self.decay)

    @torch.no_grad()
    def reset(self, model: nn.Module) -> None:
        """Start the average over from the model's current weights."""
        for s, p in zip(self.shadow, self._params(model)):
            s.copy_(p)

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
        """The model holds the average inside; yields copies of its raw weights (by name)."""
        params = self._params(model)
        raw = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, s in zip(params, self.shadow):
                p.copy_(s)
        try:
            yield {n: r.cpu() for n, r in zip(self.names, raw)}
        finally:
            with torch.no_grad():
                for p, r in zip(params, raw):
                    p.copy_(r)

    @torch.no_grad()
    def load_raw(self, model: nn.Module, raw: dict[str, torch.Tensor]) -> None:
        """Resume: the model's weights (the average, from the checkpoint) become the shadow and
        the saved raw weights go back into the model."""
        missing = [n for n in self.names if n not in raw]
        if missing:
            raise KeyError(f"raw weights lack {missing[:3]}")
        self.reset(model)
        for n, p in zip(self.names, self._params(model)):
            p.copy_(raw[n])


@torch.no_grad()
def load_raw_weights(model: nn.Module, raw: dict[str, torch.Tensor]) -> None:
    """Put saved raw weights (by parameter name) back into a model."""
    params = dict(model.named_parameters())
    unknown = [n for n in raw if n not in params]
    if unknown:
        raise KeyError(f"raw weights name parameters the model lacks: {unknown[:3]}")
    for n, r in raw.items():
        params[n].copy_(r)


@contextmanager
def handed_on(ema: WeightEMA | None, model: nn.Module) -> Iterator[dict[str, torch.Tensor] | None]:
    """The weights a run hands on, in the model inside: their EMA when there is one (yielding
    the raw weights, which resume needs), else the weights as they are (yielding None)."""
    if ema is None:
        yield None
        return
    with ema.applied(model) as raw:
        yield raw
