"""The trainer's update as it was written before the loop became the textbook one: each
gradient divided by the token count in a pass of its own, the loss scaler's ``unscale_`` in
place, the flat buffer's all-reduce spelled out. Kept as the reference that the loop of
:meth:`transformer.train.Trainer.update` must match bit for bit (tests/transformer/test_update_loop.py)."""
import numpy as np

import minitensor as mt
from minitensor import amp
from transformer.batching import collate
from transformer.loss import batch_loss
from transformer.train import reseed_dropout


def old_update(t, group) -> None:
    """One update of trainer ``t`` over the index arrays ``group``, the old way (no --clip-norm)."""
    mine = group[t.comm.rank::t.comm.world_size]
    reseed_dropout(t.s.seed, t.step, t.comm.rank)
    t.model.train()
    t.opt.zero_grad()
    tokens = 0
    for idx in mine:
        b = collate(t.batches.src, t.batches.tgt, idx)
        with amp.autocast(t.amp_dtype, weights=t.model.parameters()):
            loss = batch_loss(t.model, mt.tensor(b.src), mt.tensor(b.tgt_in), b.tgt_out, t.cfg.pad_id, t.s.smoothing,
                              reduction="sum")
        if t.scaler.enabled:
            with np.errstate(over="ignore", invalid="ignore"):
                (loss * t.scaler.scale).backward()
        else:
            loss.backward()
        tokens += b.target_tokens
    params = t.opt.params
    if t.comm.world_size == 1:
        for p in params:
            if p.grad is not None:
                p.grad.data *= 1.0 / tokens
    else:
        sizes = [p.size for p in params]
        flat = np.zeros(sum(sizes) + 1, dtype=np.float32)
        offset = 0
        for p, n in zip(params, sizes):
            if p.grad is not None:
                flat[offset:offset + n] = p.grad.data.reshape(-1)
            offset += n
        flat[offset] = tokens
        t.comm.all_reduce(flat)
        flat[:offset] *= 1.0 / float(flat[offset])
        offset = 0
        for p, n in zip(params, sizes):
            p.grad = mt.from_array(flat[offset:offset + n].reshape(p.shape))
            offset += n
    if t.scaler.enabled:
        finite = t.scaler.unscale_(params)
        t.scaler.update(found_overflow=not finite)
        if not finite:
            t.step += 1
            return
    t.sched.step(0.0)
    t.opt.step()
    t.step += 1


def run_both(settings, tok, train, run_dir, comm=None, updates: int = 5) -> list[str]:
    """Train ``updates`` updates with the trainer's loop and with :func:`old_update` from the
    same start; the names of the weights that differ in any bit (on this rank)."""
    from transformer.train import Trainer  # noqa: PLC0415

    new = Trainer(settings(run_dir / "new", max_steps=updates), tok, train, comm=comm)
    new.fit()
    old = Trainer(settings(run_dir / "old", max_steps=updates), tok, train, comm=comm)
    batches = old.batches.of_epoch(0)
    chunk = old.s.update_freq * old.comm.world_size
    for u in range(updates):
        old_update(old, batches[u * chunk:(u + 1) * chunk])
    a, b = new.model.state_dict(), old.model.state_dict()
    assert new.opt.steps == old.opt.steps
    return [k for k in a if not np.array_equal(a[k].numpy(), b[k].numpy())]
