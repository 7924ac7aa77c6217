// The bias and the ReLU of the feed-forward layer's first product (equation 2), fused; and the
// bias alone, added in place to any product (xW + b of every linear layer).
//
//   forward:  y = max(0, p + b)            p: the product x W_1 (rows x cols), b: the bias (cols)
//             y = p + b                    with RELU false (the plain bias: its backward is dy
//                                          itself, and db = Σ over rows of dy, a sum_rows product)
//   backward: dp = dy ⊙ [y > 0],   db = Σ over rows of dp
//
// Thread mapping. Forward: p seen as one flat array of groups x rows x cols values, each thread
// taking V consecutive ones as one 16-byte load and store (V = 16 / sizeof(T)) where cols is a
// multiple of V and p is 16-byte aligned, so that a pack never leaves its row; one value (V = 1)
// otherwise. Its column is its flat index mod cols, its group the index over rows x cols: with
// groups, p is (groups, rows, cols) and b (groups, cols), each group its own bias row (the Q, K
// and V products of one input, made as one batch); one group otherwise. A block of 256 threads
// covers 256 packs, so every thread has its load in flight at once (a grid-stride loop only past
// 2^31 - 1 blocks' worth). Backward: block (c, r) of the grid owns the columns [32c, 32c + 32)
// and the rows [r * rows_per_block, (r + 1) * rows_per_block); its 8 warps take every 8th row
// of that range, lane l column 32c + l, so each warp's loads are one coalesced row segment and
// each thread sums its one column.
//
// The forward overwrites p with y in one pass (the product is a fresh array nobody else
// reads), so the bias costs no pass and no array of its own. A NaN stays NaN, as in
// maximum(p + b, 0): the fp16 loss scaler must still see an overflow.
//
// The backward writes dp and the bias gradient from one read of dy and y, with no bool
// temporary. db needs a sum over all rows; as in layer_norm.cu it is a deterministic
// two-stage reduction, never atomics: each block adds its warps' column sums in a fixed
// order into partial[r][column], and stage 2 (column_sums) adds the partial rows of each
// column in order.
//
// T is the storage type of p, y and dy (float, f16, bf16, double); B the bias's (float for a
// 16-bit product under autocast, so db comes out in float32 directly, else T). Arithmetic and
// the partial sums run in Acc<T>::type. Edge cases: cols need not be a multiple of 32 (lanes
// past the last column idle) nor of V (then V = 1); rows = 0 is not launched.
#include "common.cuh"

#define BR_WARPS 8

template <typename T, typename B, bool RELU, int V>
__global__ void bias_relu_forward(T* __restrict__ y, const B* __restrict__ bias, long long packs, int cols,
                                  long long group_size) {
    typedef typename Acc<T>::type A;
    Pack<T, V>* __restrict__ packed = reinterpret_cast<Pack<T, V>*>(y);
    const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; k < packs; k += step) {
        const long long i = k * V;                                        // the pack's first value
        const B* b = bias + (i / group_size) * cols + static_cast<int>(i % cols);
        Pack<T, V> p = packed[k];
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const A v = widen(p.v[e]) + static_cast<A>(widen(b[e]));
            p.v[e] = narrow<T>(!RELU || v > A(0) || v != v ? v : A(0));
        }
        packed[k] = p;
    }
}

template <typename T>
__global__ void bias_relu_backward(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dp,
                                   typename Acc<T>::type* __restrict__ partial, long long rows, int cols,
                                   long long rows_per_block) {
    typedef typename Acc<T>::type A;
    __shared__ A sums[BR_WARPS][MT_WARP];
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP;
    const int col = blockIdx.x * MT_WARP + lane;
    const long long first = static_cast<long long>(blockIdx.y) * rows_per_block;
    long long last = first + rows_per_block;
    if (last > rows) last = rows;
    A acc = A(0);
    if (col < cols) {
        for (long long row = first + warp; row < last; row += BR_WARPS) {
            const long long i = row * cols + col;
            const A g = widen(y[i]) > A(0) ? widen(dy[i]) : A(0);
            dp[i] = narrow<T>(g);
            acc += g;
        }
    }
    sums[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && col < cols) {
        A total = A(0);
        for (int w = 0; w < BR_WARPS; ++w) total += sums[w][lane];  // a fixed order: deterministic
        partial[static_cast<long long>(blockIdx.y) * cols + col] = total;
    }
}

// Stage 2: one thread per column adds the `parts` partial rows in order, into B.
template <typename A, typename B>
__global__ void column_sums(const A* __restrict__ partial, B* __restrict__ out, int parts, int cols) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    A total = A(0);
    for (int r = 0; r < parts; ++r) total += partial[static_cast<long long>(r) * cols + j];
    out[j] = narrow<B>(static_cast<typename Acc<B>::type>(total));
}
