"""Count the device work of one training update of Transformer (base) on the CuPy double.

A GPU update of this model is bound by the host, not the device, at the batch sizes that fit:
each kernel launch costs a few microseconds of Python, CuPy and driver work whatever its
size. The double counts every call that would launch device work (``double.launches()``), so
the count of one update is the CPU's measure of that host time. The update is the one
``benchmarks/base_step_vs_torch.py`` times: forward, the label-smoothed loss, backward, the
loss scaler in fp16, and Adam. The model is the paper's base model with a 64-token
vocabulary: the count does not depend on the vocabulary or the batch, only on the model's
structure.

    python -m tests.cupy_double.launches          # prints the count of each precision by kind
"""
from __future__ import annotations

import collections
import sys

import numpy as np

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def count_update(precision: str, batch: int = 2, length: int = 6) -> collections.Counter:
    """The launches of one update (the second: the first compiles the kernels and makes the
    optimizer's state), by kind. The double must be installed."""
    from tests.cupy_double import double  # noqa: PLC0415

    import minitensor as mt  # noqa: PLC0415
    from minitensor import amp  # noqa: PLC0415
    from transformer import Transformer, TransformerConfig, fuse, label_smoothed_loss, paper_adam  # noqa: PLC0415

    if not double.installed():
        raise RuntimeError("count_update needs the CuPy double installed (tests.cupy_double.install())")
    mt.manual_seed(0)
    mt.cuda.set_tf32(precision == "tf32")
    model = fuse(Transformer(TransformerConfig.base(64))).to("cuda")  # the form a training run uses
    opt = paper_adam(model.parameters(), lr=1e-4)
    scaler = amp.LossScaler(init_scale=2.0**4) if precision == "fp16" else None  # no overflow: a full update
    half = {"fp16": "float16", "bf16": "bfloat16"}.get(precision)
    rng = np.random.default_rng(0)
    src = mt.tensor(rng.integers(3, 64, (batch, length + 1)), device="cuda")
    tgt = rng.integers(3, 64, (batch, length + 1))
    tgt[:, 0] = 1
    tgt_in, tgt_out = mt.tensor(tgt[:, :-1], device="cuda"), mt.tensor(tgt[:, 1:], device="cuda")

    def update():
        with amp.autocast(half, weights=model.parameters()):
            loss = label_smoothed_loss(model(src, tgt_in), tgt_out, 0, 0.1, reduction="sum")
        opt.zero_grad()
        (loss * scaler.scale if scaler else loss).backward()
        if scaler:
            ok = scaler.unscale_(opt.params)
            scaler.update(not ok)
            assert ok, "the fp16 update overflowed: its count would leave out Adam"
        opt.step()

    try:
        update()
        before = double.launches()
        update()
        return double.launches() - before
    finally:
        mt.cuda.set_tf32(False)


def main(argv: list[str]) -> None:
    from tests.cupy_double import install  # noqa: PLC0415

    install()
    for precision in argv or PRECISIONS:
        counts = count_update(precision)
        print(f"{precision}: {sum(counts.values())} launches per update")
        for kind, n in counts.most_common():
            print(f"  {n:5d}  {kind}")


if __name__ == "__main__":
    main(sys.argv[1:])
