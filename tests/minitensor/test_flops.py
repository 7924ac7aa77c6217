"""The table of the matrix products each op computes (minitensor/flops.py): each entry's count
is the op's formula, a subclass takes its base's entry, and an op outside it multiplies nothing."""
from types import SimpleNamespace

from minitensor import flops
from minitensor.autograd import Function
from minitensor.cuda.softmax import FusedSoftmaxAttention
from minitensor.ops.attention import ScaledDotProductAttention
from minitensor.ops.elementwise import Add
from minitensor.ops.linalg import Linear, Matmul
from minitensor.speed.fusions import Linears


def ctx(*needs):
    return SimpleNamespace(needs_input_grad=needs or None)


def test_the_products_of_a_matmul_a_linear_and_the_qkv_projections():
    assert flops.products(Matmul, ctx(True, True), [(4, 3, 5), (5, 2)], {}) == \
        ([(4, 3, 5, 2)], [(4, 3, 2, 5), (4, 5, 3, 2)])
    assert flops.products(Linear, ctx(True, True, True), [(2, 7, 5), (5, 6), (6,)], {}) == \
        ([(1, 14, 5, 6)], [(1, 14, 6, 5), (1, 5, 14, 6)])
    # x (14 rows, 5) through three (5, 6) weights: one batched product; dx one product of 3·6 columns
    shapes = [(14, 5), (5, 6), (6,), (5, 6), (6,), (5, 6), (6,)]
    assert flops.products(Linears, ctx(*[True] * 7), shapes, {}) == \
        ([(3, 14, 5, 6)], [(1, 14, 18, 5)] + [(1, 5, 14, 6)] * 3)
    assert flops.products(Linear, ctx(), [(3, 5), (5, 6), None], {}) == ([(1, 3, 5, 6)], [])  # no backward


def test_every_attention_op_counts_the_same_products_and_a_subclass_takes_its_bases_entry():
    shapes = [(2, 4, 10, 8), (2, 4, 12, 8), (2, 4, 12, 8), None]
    ours = flops.products(ScaledDotProductAttention, ctx(True, True, True, False), shapes, {})
    assert ours == ([(8, 10, 8, 12), (8, 10, 12, 8)],
                    [(8, 12, 10, 8), (8, 10, 8, 12), (8, 10, 12, 8), (8, 12, 10, 8)])
    assert flops.products(FusedSoftmaxAttention, ctx(True, True, True, False), shapes, {}) == ours


def test_an_op_outside_the_table_multiplies_no_matrices():
    class Planted(Function):
        pass

    assert flops.products(Add, ctx(True, True), [(3,), (3,)], {}) is None
    assert flops.products(Planted, ctx(), [], {}) is None
