"""Sampling the next token instead of taking the most probable one: the back-translation
outputs of Edunov et al. 2018 (§3: sampled and top-k sampled synthetic sources beat beam search's
at scale, being more varied). It replaces greedy search's argmax, on the same batched path."""

from __future__ import annotations

from collections.abc import Callable

import torch

from seq2seq.config import parse_sampling

Choose = Callable[[torch.Tensor], torch.Tensor]


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Greedy search's choice: the most probable column of each row."""
    return logits.argmax(dim=-1)


def sampler(text: str, seed: int, device: torch.device) -> Choose:
    """The next-token choice a sampling setting asks for (argmax for `none`), drawing from a
    generator seeded with `seed`: the same batch, settings and seed give the same tokens."""
    parsed = parse_sampling(text)
    if parsed is None:
        return argmax
    kind, value = parsed
    generator = torch.Generator(device=device).manual_seed(seed)

    def draw(logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    def choose(logits: torch.Tensor) -> torch.Tensor:
        if kind == "temperature":
            return draw(logits / value)
        if kind == "topk":
            top = logits.topk(min(int(value), logits.size(-1)), dim=-1)
            return top.indices.gather(1, draw(top.values).unsqueeze(1)).squeeze(1)
        # nucleus (Holtzman et al. 2020): the fewest most probable tokens holding mass P.
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        outside = probs.cumsum(dim=-1) - probs >= value  # the top token always stays
        picked = draw(ordered.masked_fill(outside, -torch.inf))
        return order.gather(1, picked.unsqueeze(1)).squeeze(1)

    return choose
