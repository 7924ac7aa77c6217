"""Training updates replayed from CUDA graphs (``--cuda-graphs true``): on a GPU an update is
hundreds of launches, each costing the host tens of microseconds of Python, and the GPU waits
for them; a graph launches them all at once.

An update splits in two here. The host's part runs every time: the dropout seed, the learning
rate, Adam's step count and bias corrections, the gradient's scale (1 / target tokens) and, in
fp16, the loss scale. The device's part (forward, backward and Adam's launch over the
parameters) is captured into a graph per batch shape, the second time that shape comes (the
first runs it as it is: the kernels get compiled and Adam's moments made outside any capture),
and replayed at every later update of that shape, after the batch is copied into the arrays the
capture read. The numbers the host works out reach the kernels through device memory
(``mt.cuda.from_host``, :mod:`minitensor.cuda.graphs`), so a replay makes the bits the same
update makes without a graph.

A shape is the shapes of the update's batches and their counts of non-pad targets (the loss's
rows): batches of sorted lengths repeat them only now and then, the benchmark's fixed batch at
every update. At most :data:`MAX_GRAPHS` graphs are kept, each with its memory; shapes past them
run without a graph.
"""
from __future__ import annotations

import numpy as np

import minitensor as mt
from minitensor import amp

from .loss import rows_loss, target_rows
from .settings import SettingsError

MAX_GRAPHS = 16


def check_processes(settings, world_size: int) -> None:
    """--cuda-graphs takes one process (checked as soon as the processes are known, before any
    data is prepared): with several, their token counts are summed on the host in each update."""
    if settings.cuda_graphs and world_size > 1:
        raise SettingsError("--cuda-graphs: the ranks' token counts are summed on the host inside each update; "
                            "use it with one process")


class GraphedUpdates:
    """The updates of a :class:`transformer.train.Trainer` (one process, no gradient clipping:
    nothing in its update reads the device on the host). With fp16 the loss scale reaches the
    device as one of the host's numbers, the overflow check's count stays there and Adam's
    launch skips the update where it is not 0; the host reads it after the update, to halve the
    scale and not count the update, as the update without a graph does."""

    def __init__(self, trainer):
        self.t = trainer
        self.seen: set = set()
        self.graphs: dict = {}      # shape -> (the arrays the capture read, Graph)
        self.replays = 0

    def update(self, batches: list, progress: float) -> bool:
        """One update: the host's part, then the device's, replayed where a graph of this shape
        exists (captured now if the shape was seen once before). Returns whether it was skipped
        (fp16's overflow)."""
        t = self.t
        inputs = [(b.src, b.tgt_in, *target_rows(b.tgt_out, t.cfg.pad_id)) for b in batches]
        shape = tuple(tuple(a.shape for a in batch) for batch in inputs)
        grad_scale = 1.0 / sum(b.target_tokens for b in batches)
        t.sched.step(progress)                  # Equation 3's learning rate
        t.opt.count_step(grad_scale / t.scaler.scale)  # Adam's step count, bias corrections, gradients' scale
        entry = self.graphs.get(shape)
        if entry is None and (shape not in self.seen or len(self.graphs) >= MAX_GRAPHS):
            self.seen.add(shape)
            loss_sum, overflow = self._device_part([tuple(self._on_device(a) for a in batch) for batch in inputs])
        else:
            if entry is None:
                static = [tuple(self._on_device(a) for a in batch) for batch in inputs]
                xp = t.opt.params[0].xp
                entry = self.graphs[shape] = static, mt.cuda.Graph(xp, lambda: self._device_part(static))
            else:
                for arrays, batch in zip(entry[0], inputs):
                    for device, host in zip(arrays, batch):
                        device.data.set(host)
            loss_sum, overflow = entry[1].replay()
            loss_sum = loss_sum.copy()   # the next replay writes the graph's own: the loop reads this one later
            self.replays += 1
        t._loss = loss_sum, grad_scale
        if overflow is None:
            return False
        skipped = int(overflow.get()[0]) != 0   # after the update: what the launch decided
        t.scaler.update(found_overflow=skipped)
        if skipped:
            t.opt.steps -= 1                    # as a step never taken (its bias corrections are made again)
        return skipped

    def _on_device(self, a):
        return mt.tensor(a, device=self.t.s.device)

    def _device_part(self, inputs: list):
        """Forward, backward and Adam's update over these device arrays: the loss summed over the
        batches, and with fp16 the overflow check's count (None without), on the device."""
        t = self.t
        t.opt.zero_grad()
        loss_sum = 0.0
        scale = None
        if t.scaler.enabled:   # the loss scale, S, as the host has it at each update
            scale = mt.from_array(mt.cuda.from_host(t.opt.params[0].xp,
                                            lambda: np.array(t.scaler.scale, dtype=np.float32), key="loss scale"))
        for src, tgt_in, rows, target in inputs:
            with amp.autocast(t.amp_dtype, weights=t.model.parameters()):  # the 16-bit weights in one launch
                loss = rows_loss(t.model, src, tgt_in, rows, target, t.cfg.pad_id, t.s.smoothing, reduction="sum")
            (loss if scale is None else loss * scale).backward()
            loss_sum = loss_sum + loss.data
        overflow = None if scale is None else t.scaler.overflow_count(t.opt.params)
        t.opt.update_params(skip=overflow)
        return loss_sum, overflow
