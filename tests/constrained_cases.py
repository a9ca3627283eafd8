"""Shared cases of the constrained-beam and term-mode tests: small random models and sources,
a scripted decoder, a French hotel corpus and a glossary run's pairs."""

from __future__ import annotations

import torch

from seq2seq.config import ModelConfig
from seq2seq.data.batching import pad
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode.glossary import make_glossary
from seq2seq.model.transformer import Transformer


def random_model(seed: int, vocab: int = 40, max_positions: int = 64) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        d_model=16,
        heads=2,
        encoder_layers=1,
        decoder_layers=2,
        ffn_dim=32,
        dropout=0.0,
        max_positions=max_positions,
    )
    model = Transformer(cfg, vocab, vocab, joint_vocab=True).eval()
    with torch.no_grad():  # sharpen the output so hypotheses differ clearly
        model.output.weight.mul_(4.0)
    return model


def random_sources(seed: int, batch: int = 3, vocab: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 9, (batch,), generator=g).tolist()
    return pad([torch.randint(4, vocab, (n,), generator=g).tolist() + [EOS_ID] for n in lengths])


def count_term(tokens: list[int], term: tuple[int, ...]) -> int:
    n = len(term)
    return sum(tuple(tokens[i : i + n]) == term for i in range(len(tokens) - n + 1))


class ScriptedModel(torch.nn.Module):
    """A decoder that writes `script` (token ids) then EOS whatever the source: at step t,
    probability 0.9 on script[t] (EOS after it), the rest shared evenly."""

    def __init__(self, script: list[int], vocab: int):
        super().__init__()
        self.cfg = ModelConfig(d_model=16, heads=2, max_positions=64)
        rows = []
        for wanted in [*script, EOS_ID]:
            row = torch.full((vocab,), 0.1 / (vocab - 1))
            row[wanted] = 0.9
            rows.append(row.log())
        self.table = torch.stack(rows)

    def encode(self, src, src_mask):
        return src

    def start_decoding(self, memory, src_mask, beam, capacity=None):
        return ScriptedSteps()

    def decode_step(self, ids, cache):
        step = min(cache.t, self.table.size(0) - 1)
        cache.t += 1
        return self.table[step].repeat(ids.size(0), 1)


class ScriptedSteps:
    t = 0
    compiled = None  # no compiled step: search scores on torch

    def reorder(self, rows):
        pass

    def keep(self, sentences):
        pass


FRENCH = [
    "Je dors à l'hôtel.",
    "L'hôtel est grand.",
    "Un hôtel bleu.",
    "Le bouton-poussoir est rouge.",
    "Il y a un bouton vert.",
    "Nous aimons l'hôtel et le jardin.",
    "Le jardin d'hiver est beau.",
]
ENGLISH = [
    "I sleep at the hotel.",
    "The hotel is big.",
    "A blue hotel.",
    "The push-button is red.",
    "There is a green button.",
    "We love the hotel and the garden.",
    "The winter garden is nice.",
]


TERM_PAIRS = [
    ("Press the button to close the window.", "Appuyez sur le bouton pour fermer la fenêtre."),
    ("The window is open.", "La fenêtre est ouverte."),
    ("Click the button twice.", "Cliquez deux fois sur le bouton."),
    ("Use the push button at the casement.", "Utilisez le bouton-poussoir de la croisée."),
] * 40
TERM_GLOSSARY = make_glossary([("button", "bouton-poussoir"), ("window", "croisée")])
TERM_LINE = "Press the button to close the window."
