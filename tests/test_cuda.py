"""What only a GPU can show: bf16 training against fp32, compiled variable shapes, fused Adam,
NCCL DDP, bf16 decoding, and decoding that waits for the device at most once a step.

Marked `cuda`: skipped without CUDA (CI), run by `make gpu-check` on a GPU machine.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

from seq2seq.data.batching import collate, no_peek_mask, padding_mask
from seq2seq.decode.search import beam_search, greedy
from seq2seq.decode.step import Settings
from seq2seq.model.transformer import Transformer
from seq2seq.train.loss import TranslationLoss
from seq2seq.train.trainer import accumulate_gradients
from tests.factories import tiny_model, tiny_shape
from tests.runs import train_tiny_run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
BF16 = torch.bfloat16
VOCAB = 1000


def _model(dropout: float = 0.0, seed: int = 0) -> Transformer:
    cfg = tiny_shape(
        d_model=256,
        encoder_layers=3,
        decoder_layers=3,
        ffn_dim=1024,
        dropout=dropout,
        norm_first=True,
        max_positions=256,
    )
    return tiny_model(cfg, VOCAB, seed=seed).cuda()


def _batches(count: int, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n, s, t = 8 + i, 10 + 3 * i, 12 + 2 * i  # every batch a new shape
        src = [torch.randint(4, VOCAB, (s - 1,), generator=g).tolist() + [2] for _ in range(n)]
        tgt = [torch.randint(4, VOCAB, (t,), generator=g).tolist() for _ in range(n)]
        out.append(collate(src, tgt))
    return out


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten().float() for p in model.parameters()])


def test_a_bf16_training_step_matches_fp32_within_bf16_tolerance():
    model, (batch,) = _model(), _batches(1)
    device = torch.device("cuda")
    objective = TranslationLoss(model, 0.1)
    fp32 = accumulate_gradients(objective, [batch], scale=1 / batch.ntokens, device=device)
    reference = _grads(model)
    model.zero_grad()

    def autocast():
        return torch.autocast("cuda", dtype=BF16)

    bf16 = accumulate_gradients(
        objective, [batch], scale=1 / batch.ntokens, device=device, autocast=autocast
    )
    assert bf16.item() == pytest.approx(fp32.item(), rel=1e-2)
    assert (_grads(model) - reference).norm() <= 3e-2 * reference.norm()


def test_compiled_training_on_variable_shapes_recompiles_a_bounded_number_of_times():
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = _model()
    net = torch.compile(TranslationLoss(model, 0.1))
    device = torch.device("cuda")
    for batch in _batches(6):
        with torch.autocast("cuda", dtype=BF16):
            loss = net(
                *(t.to(device) for t in (batch.src, batch.tgt_in, batch.tgt_out)),
                batch.src_mask.to(device),
            )
        loss.backward()
    # Six shapes: a static graph, then one with symbolic lengths.
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 2


def test_fused_adam_takes_the_steps_foreach_adam_takes():
    models = [_model(seed=3), _model(seed=3)]
    optimizers = [
        torch.optim.Adam(models[0].parameters(), lr=1e-3, betas=(0.9, 0.98), fused=True),
        torch.optim.Adam(models[1].parameters(), lr=1e-3, betas=(0.9, 0.98), foreach=True),
    ]
    device = torch.device("cuda")
    for batch in _batches(3):
        for model, optimizer in zip(models, optimizers):
            accumulate_gradients(
                TranslationLoss(model, 0.1), [batch], scale=1 / batch.ntokens, device=device
            )
            optimizer.step()
            optimizer.zero_grad()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_one_process_nccl_ddp_step_equals_the_plain_step():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        (batch,) = _batches(1)
        device = torch.device("cuda")
        plain = _model(seed=5)
        accumulate_gradients(
            TranslationLoss(plain, 0.1), [batch], scale=1 / batch.ntokens, device=device
        )
        wrapped = _model(seed=5)
        ddp = DistributedDataParallel(
            TranslationLoss(wrapped, 0.1), device_ids=[0], broadcast_buffers=False
        )
        accumulate_gradients(ddp, [batch], scale=1 / batch.ntokens, device=device, ddp=True)
        assert torch.allclose(_grads(plain), _grads(wrapped), atol=1e-6, rtol=1e-5)
    finally:
        dist.destroy_process_group()


def test_cached_decoding_in_bf16_matches_recomputing_the_prefix():
    model, (batch,) = _model().eval(), _batches(1)
    src, tgt = batch.src.cuda(), batch.tgt_in.cuda()
    src_mask = padding_mask(src)
    with torch.inference_mode(), torch.autocast("cuda", dtype=BF16):
        memory = model.encode(src, src_mask)
        full = model.logits(model.decoder_states(tgt, memory, src_mask, no_peek_mask(tgt)))
        cache = model.start_decoding(memory, src_mask)
        for t in range(tgt.size(1)):
            step = model.decode_step(tgt[:, t], cache).float()
            scale = full[:, t].float().abs().max()
            assert (step - full[:, t].float()).abs().max() <= 0.03 * scale, t
    assert cache.self_k[0].dtype == BF16


def _syncs_while(fn) -> int:
    """How many times the host waited for the device while `fn` ran."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


@pytest.mark.parametrize("beam", [1, 4])
def test_decoding_waits_for_the_device_at_most_once_a_step(beam):
    model = _model().eval()
    src = collate([[5 + i] * (6 + 3 * i) + [2] for i in range(8)], [[4]] * 8).src.cuda()
    mask, cap = padding_mask(src), 12  # max_len_a 0: every sentence runs `cap` steps at most

    def decode():
        with torch.autocast("cuda", dtype=BF16):
            if beam == 1:
                greedy(model, src, mask, Settings(max_len_a=0.0, max_len_b=cap, alpha=0.0))
            else:
                beam_search(model, src, mask, Settings(beam=beam, max_len_a=0.0, max_len_b=cap))

    decode()  # warm-up: kernels loaded, allocator primed
    syncs = _syncs_while(decode)
    # One read-back per step (which sentences are done), plus a few per batch, not per step:
    # the length cap, the never-generated ids and the results at the end.
    assert syncs <= cap + 6, syncs


@pytest.mark.slow
def test_greedy_outputs_in_bf16_equal_float32_on_a_trained_demo_model(tmp_path, demo_pairs):
    from seq2seq.config import run_decode
    from seq2seq.decode.translator import load_translator

    run = train_tiny_run(
        tmp_path,
        demo_pairs,
        "tokenizer: {vocab_size: 400}\n"
        "model: {d_model: 128, heads: 4, encoder_layers: 2, decoder_layers: 2, ffn_dim: 512,\n"
        "        dropout: 0.1, norm_first: true, max_positions: 128}\n"
        "train: {max_tokens: 4096, max_steps: 800, lr: 2.0e-3, warmup_steps: 100,\n"
        "        eval_every: 800, save_every: 800, valid_bleu_sentences: 0, device: cuda}\n",
    )
    sources = [a for a, _ in demo_pairs[:300]]
    bf16, _ = load_translator(run, device="cuda", decode=run_decode(run, beam_size=1))
    fp32, _ = load_translator(run, device="cuda", decode=run_decode(run, beam_size=1))
    fp32.amp_dtype = None
    assert bf16.amp_dtype == BF16
    a, b = bf16.translate(sources), fp32.translate(sources)
    same = sum(x == y for x, y in zip(a, b)) / len(sources)
    assert same >= 0.97, same
