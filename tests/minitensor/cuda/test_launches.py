"""The host's work in one GPU update, counted: the launches of one Transformer (base) training
update on the strict CuPy double (``tests/cupy_double/launches.py``). On a GPU at the batch
sizes that fit, an update waits on the host issuing kernels, a few microseconds each whatever
their size; the count is what the CPU can measure of that time. Each bound sits a little above
today's count, so a change that adds launches fails here and has to say why.

The counts before the cuBLAS products, the casts made once, dropout's own kernel, Adam, the loss
scaler's unscale and the 16-bit weights in one launch each, the fused bias + ReLU and the fused
dropout + residual + LayerNorm (the same double): fp32 and tf32 1691, bf16 2565, fp16 3147;
after: 1066, 1132 and 1138; with 16-bit attention on the tensor-core flash kernels, which read
the heads in place, bf16 808 and fp16 814; with TF32 attention on them too, tf32 742; with the
projections of one input as one product (Q, K, V; K, V of the memory), fp32 1000, tf32 676, bf16
742, fp16 748; with their input gradients as products added in place (one more launch for each
of the 12 Q/K/V projections, no concatenation), fp32 1012, tf32 688, bf16 754, fp16 760
(docs/performance/2026-11.md, "Launches per update")."""
import pytest

from tests.cupy_double.launches import count_update

BOUND = {"fp32": 1020, "tf32": 700, "bf16": 770, "fp16": 770}


@pytest.mark.slow
@pytest.mark.parametrize("precision", list(BOUND))
def test_one_base_update_launches_at_most_its_bound(cupy_double, precision):
    if precision == "bf16":
        pytest.importorskip("ml_dtypes")
    made = count_update(precision)
    assert sum(made.values()) <= BOUND[precision], made.most_common()
    # every product is one cuBLAS call: none through CuPy's matmul, none widened or copied there
    assert not {k for k in made if k.startswith("matmul")}, made
    assert not {"random", "greater_equal"} & set(made), made   # dropout draws its mask in its kernel
    assert not {"maximum", "greater"} & set(made), made        # ReLU with its bias, one kernel each way
    # the sub-layers' dropout, residual sum and LayerNorm are one kernel: dropout's own kernel
    # runs only on the embeddings (2 forward, 2 backward)
    assert sum(n for k, n in made.items() if k.startswith("kernel dropout_apply")) == 4, made
    assert sum(n for k, n in made.items() if k.startswith("kernel adam")) == 1, made  # every parameter at once
    if precision == "fp16":                                    # every gradient unscaled at once
        assert sum(n for k, n in made.items() if k.startswith("kernel unscale")) == 1, made
    if precision in ("fp32", "tf32"):   # only the loss's count of targets changes type
        assert made["astype"] == 1, made
    else:                               # every 16-bit weight in one launch, activations once per layer
        assert sum(n for k, n in made.items() if k.startswith("kernel cast_multi")) == 1, made
        assert made["astype"] <= 70, made["astype"]
    if precision != "fp32":   # attention at these 7 keys on the tensor-core kernels: 3 launches each, no head copies
        assert sum(n for k, n in made.items() if k.startswith("kernel flash_attention_tc")) == 54, made
        assert not {k for k in made if "softmax" in k}, made
        # the heads split and merged as views, read in place from the column blocks of one product
        assert not {"ascontiguousarray", "reshape"} & set(made), made
        # the projections of one input (Q, K, V; K, V of the memory) are one plain product each
        assert "gemmStridedBatchedEx" not in made, made


@pytest.mark.slow
def test_the_count_does_not_grow_with_the_batch(cupy_double):
    """What the count measures is per update, not per token: 2 sentences of 6 tokens or 5 of 9
    launch the same kernels."""
    assert count_update("fp32", batch=2, length=6) == count_update("fp32", batch=5, length=9)
