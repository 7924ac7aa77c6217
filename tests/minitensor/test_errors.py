"""Bad input gets a clear error naming the op and the shapes, never a silent wrong answer."""
import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor.speed import fusions

from ..helpers import leaf


def test_matmul_with_mismatched_inner_dims_names_both_shapes():
    with pytest.raises(mt.ShapeError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        F.matmul(mt.zeros(2, 3), mt.zeros(4, 5))


def test_elementwise_non_broadcastable_names_op_and_shapes():
    with pytest.raises(mt.ShapeError, match=r"Add.*\(2, 3\).*\(4,\)"):
        mt.zeros(2, 3) + mt.zeros(4)


def test_linear_weight_that_does_not_fit():
    with pytest.raises(mt.ShapeError, match=r"linear.*\(5, 3\).*\(4, 2\)"):
        F.linear(mt.zeros(5, 3), mt.zeros(4, 2))
    with pytest.raises(mt.ShapeError, match="bias"):
        F.linear(mt.zeros(5, 3), mt.zeros(3, 2), mt.zeros(3))


def test_linears_name_the_weight_or_bias_that_does_not_fit():
    with pytest.raises(mt.ShapeError, match=r"linears.*\(5, 3\).*\(4, 2\)"):
        fusions.linears(mt.zeros(5, 3), [mt.zeros(3, 2), mt.zeros(4, 2)])
    with pytest.raises(mt.ShapeError, match=r"\(3, 5\).*all be"):
        fusions.linears(mt.zeros(5, 3), [mt.zeros(3, 2), mt.zeros(3, 5)])
    with pytest.raises(mt.ShapeError, match=r"bias of shape \(3,\)"):
        fusions.linears(mt.zeros(5, 3), [mt.zeros(3, 2), mt.zeros(3, 2)], [None, mt.zeros(3)])
    with pytest.raises(ValueError, match="as many biases"):
        fusions.linears(mt.zeros(5, 3), [mt.zeros(3, 2)], [None, None])
    with pytest.raises(ValueError, match="one or more weights"):
        fusions.linears(mt.zeros(5, 3), [])


def test_attention_mask_of_wrong_shape_or_dtype():
    q = mt.zeros(2, 4, 8)
    with pytest.raises(mt.ShapeError, match=r"mask of shape \(3, 4\)"):
        F.scaled_dot_product_attention(q, q, q, mask=mt.tensor(np.ones((3, 4), bool)))
    with pytest.raises(mt.ShapeError, match="bool"):
        F.scaled_dot_product_attention(q, q, q, mask=mt.ones(4, 4))
    with pytest.raises(mt.ShapeError, match="do not fit"):
        F.scaled_dot_product_attention(q, mt.zeros(2, 4, 3), q)


def test_cross_entropy_bad_targets():
    logits = mt.zeros(2, 3, 5)
    with pytest.raises(mt.ShapeError, match=r"target of shape \(2, 3\)"):
        F.cross_entropy(logits, mt.tensor(np.zeros((3, 2), np.int64)))
    with pytest.raises(mt.ShapeError, match=r"\[0, 5\)"):
        F.cross_entropy(logits, mt.tensor(np.full((2, 3), 5)))
    with pytest.raises(mt.ShapeError, match="integer"):
        F.cross_entropy(logits, mt.zeros(2, 3))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(logits, mt.tensor(np.zeros((2, 3), np.int64)), reduction="avg")


def test_embedding_bad_ids():
    w = mt.zeros(4, 2)
    with pytest.raises(mt.ShapeError, match=r"\[0, 4\)"):
        F.embedding(mt.tensor([0, 4]), w)
    with pytest.raises(mt.ShapeError, match="integers"):
        F.embedding(mt.tensor([0.0, 1.0]), w)


def test_layer_norm_weight_shape():
    with pytest.raises(mt.ShapeError, match=r"weight has shape \(3,\), expected \(4,\)"):
        F.layer_norm(mt.zeros(2, 4), mt.ones(3))


def test_reshape_and_broadcast_and_permute_errors():
    with pytest.raises(mt.ShapeError, match=r"reshape.*\(2, 3\).*\(4,\)"):
        mt.zeros(2, 3).reshape(4)
    with pytest.raises(mt.ShapeError, match="broadcast_to"):
        F.broadcast_to(mt.zeros(3), (2, 4))
    with pytest.raises(mt.ShapeError, match="permutation"):
        F.permute(mt.zeros(2, 3), 0, 0)
    with pytest.raises(mt.ShapeError, match="divide"):
        F.split(mt.zeros(5), 2)


def test_masked_fill_mask_must_not_expand_input():
    with pytest.raises(mt.ShapeError, match="masked_fill"):
        F.masked_fill(mt.zeros(3), mt.tensor(np.ones((2, 3), bool)), 0.0)
    with pytest.raises(mt.ShapeError, match="bool"):
        F.masked_fill(mt.zeros(3), mt.zeros(3), 0.0)


def test_dropout_probability_range():
    with pytest.raises(ValueError, match="dropout"):
        F.dropout(mt.zeros(3), 1.5)


def test_gradcheck_rejects_float32_inputs():
    with pytest.raises(TypeError, match="float64"):
        mt.gradcheck(F.exp, [mt.tensor([1.0], requires_grad=True)])
    with pytest.raises(ValueError, match="nothing to check"):
        mt.gradcheck(F.exp, [leaf([1.0], grad=False)])


def test_only_floating_tensors_require_gradients_bfloat16_among_them():
    """bfloat16 (ml_dtypes' kind "V") is a floating type: a leaf of it may require a gradient;
    an integer or bool tensor may not."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = mt.tensor(np.ones(3, ml_dtypes.bfloat16), requires_grad=True)
    assert x.requires_grad and x.dtype == ml_dtypes.bfloat16
    for data in (np.ones(3, np.int64), np.ones(3, bool)):
        with pytest.raises(TypeError, match="only floating-point tensors can require gradients"):
            mt.tensor(data, requires_grad=True)
