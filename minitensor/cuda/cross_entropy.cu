// Label-smoothed cross-entropy over the last axis of the logits, forward and backward.
//
//   forward:  lse = log Σ_c exp(x_c), computed as m + log Σ_c exp(x_c - m), m the row's max;
//             loss = (1-ε)·(lse - x_t) + ε·(lse - mean_c x_c)   (target q = (1-ε)·onehot(t) + ε/V),
//             0 for a row whose target is ignore_index; lse is saved for the backward.
//   backward: g_c = w·(exp(x_c - lse) - ε/V) - w·(1-ε)·[c = t],  w the row's weight (the
//             launcher makes it 0 for an ignored row); g may be written over the logits.
//
// Rows are (N, V) with V up to tens of thousands, so one block of 32·WARPS threads owns a row.
// Its values are read in packs of P: 16 bytes (P = 16 / sizeof(T)) where every row starts
// 16-byte aligned (V·sizeof(T) a multiple of 16, the logits aligned), one value otherwise; thread
// i reads packs i, i + blockDim.x, ... (coalesced, and with P > 1 each load brings 16 bytes, so
// that more bytes are in flight). The forward is one pass over the logits: each thread keeps a
// running max m, the sum Σ exp(x - m) (rescaled when m grows, pack by pack: the online softmax of
// Milakov and Gimelshein, 2018) and Σ x. Each warp combines its lanes by
// butterfly shuffles; thread 0 then combines the warps' partials from shared memory in warp
// order, so the result does not depend on timing. The backward reads the logits once and writes
// the gradient once; read and write of an entry are the same thread's, so in place is safe.
// Edge cases: a row of one class (V = 1) has loss 0 when smoothing is 0; a NaN logit makes its
// row's loss and gradient NaN; targets are int64 and must lie in [0, V) unless ignored (the
// caller checks that on the host).
// T is the storage type (float, f16, bf16, double); arithmetic runs in Acc<T>::type.
#include "common.cuh"

// (m, s) absorbs (m2, s2): two running (max, Σ exp(x - max)); a max of -inf is an empty part
template <typename A>
__device__ __forceinline__ void absorb(A& m, A& s, A m2, A s2) {
    const A top = max_(m, m2);
    if (top == -MT_INF) return;  // both parts empty
    s = s * exp_(m - top) + s2 * exp_(m2 - top);
    m = top;
}

template <typename T, int WARPS, int P>
__global__ void cross_entropy_forward(const T* __restrict__ logits, const long long* __restrict__ target,
                                      typename Acc<T>::type* __restrict__ loss,
                                      typename Acc<T>::type* __restrict__ lse_out, long long rows, int V,
                                      long long ignore_index, int has_ignore, double eps) {
    typedef typename Acc<T>::type A;
    __shared__ A part_m[WARPS];
    __shared__ A part_s[WARPS];
    __shared__ A part_x[WARPS];
    const long long row = blockIdx.x;
    if (row >= rows) return;  // the whole block leaves together
    const T* x = logits + row * V;

    A m = -MT_INF, s = A(0), sx = A(0);
    const Pack<T, P>* packs = reinterpret_cast<const Pack<T, P>*>(x);
    for (int j = threadIdx.x; j < V / P; j += blockDim.x) {
        const Pack<T, P> p = packs[j];
        A v[P], top = m;
#pragma unroll
        for (int e = 0; e < P; ++e) {
            v[e] = widen(p.v[e]);
            sx += v[e];
            top = v[e] > top ? v[e] : top;
        }
        if (top > m) {
            s = s * exp_(m - top);  // the old terms, rescaled to the new max
            m = top;
        }
#pragma unroll
        for (int e = 0; e < P; ++e) s += exp_(v[e] - m);
    }
#pragma unroll
    for (int offset = MT_WARP / 2; offset > 0; offset /= 2) {
        const A m2 = __shfl_xor_sync(MT_FULL_MASK, m, offset);
        const A s2 = __shfl_xor_sync(MT_FULL_MASK, s, offset);
        sx += __shfl_xor_sync(MT_FULL_MASK, sx, offset);
        absorb(m, s, m2, s2);
    }
    const int warp = threadIdx.x / MT_WARP;
    if (threadIdx.x % MT_WARP == 0) {
        part_m[warp] = m;
        part_s[warp] = s;
        part_x[warp] = sx;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    A top = part_m[0], sum = part_s[0], sum_x = part_x[0];
    for (int w = 1; w < WARPS; ++w) {
        absorb(top, sum, part_m[w], part_s[w]);
        sum_x += part_x[w];
    }
    const A lse = top + log_(sum);
    lse_out[row] = lse;
    const long long t = target[row];
    if (has_ignore && t == ignore_index) {
        loss[row] = A(0);
        return;
    }
    const A e = static_cast<A>(eps);
    loss[row] = (A(1) - e) * (lse - widen(x[t])) + e * (lse - sum_x / static_cast<A>(V));
}

template <typename T, int P>
__global__ void cross_entropy_backward(const T* logits, const long long* __restrict__ target,
                                       const typename Acc<T>::type* __restrict__ lse,
                                       const typename Acc<T>::type* __restrict__ weight, T* grad,
                                       long long rows, int V, double eps) {
    typedef typename Acc<T>::type A;
    const long long row = blockIdx.x;
    if (row >= rows) return;
    const A w = weight[row];
    const A l = lse[row];
    const long long t = target[row];
    const A e = static_cast<A>(eps);
    const A smooth = w * e / static_cast<A>(V);
    const A hit = w * (A(1) - e);
    const Pack<T, P>* x = reinterpret_cast<const Pack<T, P>*>(logits + row * V);
    Pack<T, P>* g = reinterpret_cast<Pack<T, P>*>(grad + row * V);
    for (int j = threadIdx.x; j < V / P; j += blockDim.x) {
        Pack<T, P> p = x[j];
#pragma unroll
        for (int e = 0; e < P; ++e) {
            A v = w * exp_(widen(p.v[e]) - l) - smooth;
            if (j * P + e == t) v -= hit;
            p.v[e] = narrow<T>(v);
        }
        g[j] = p;
    }
}
