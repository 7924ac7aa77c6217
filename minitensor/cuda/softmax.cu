// Fused scale + mask + softmax over the last axis of attention scores, and its backward.
//
//   forward:  p_j = exp(scale * s_j - m) / sum_k exp(scale * s_k - m) over the allowed keys j,
//             p_j = 0 where the mask forbids key j; m is the row's largest allowed value.
//             A row with no allowed key is all zeros (not NaN).
//   backward: ds_j = scale * p_j * (dp_j - sum_k dp_k p_k)
//
// Scores are (N, Tq, Tk) with N = B * H (row r is query r % Tq of head n = r / Tq). One
// warp owns one row; lane l keeps columns l, l + 32, ... in registers (ITEMS of them, so
// rows up to 32 * ITEMS long), so the scores are read once and the weights written once,
// which makes the kernel a single streaming pass: its speed is set by memory bandwidth.
// T is the storage type (float, f16, bf16, double); arithmetic runs in Acc<T>::type.
#include "common.cuh"

template <typename T, int ITEMS>
__global__ void attention_softmax_forward(const T* __restrict__ scores, T* __restrict__ probs,
                                          const unsigned char* __restrict__ mask, long long mask_sb,
                                          long long mask_sh, long long mask_sq, long long mask_sk,
                                          long long rows, int H, int Tq, int Tk, double scale) {
    typedef typename Acc<T>::type A;
    const int warps_per_block = blockDim.x / MT_WARP;
    const long long row = static_cast<long long>(blockIdx.x) * warps_per_block + threadIdx.x / MT_WARP;
    const int lane = threadIdx.x % MT_WARP;
    if (row >= rows) return;
    const long long n = row / Tq;
    const int i = static_cast<int>(row % Tq);
    const MaskView mv{mask, mask_sb, mask_sh, mask_sq, mask_sk};
    const unsigned char* mrow = mv.row(static_cast<int>(n / H), static_cast<int>(n % H), i);
    const T* s = scores + row * Tk;

    A v[ITEMS];
    A m = -MT_INF;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        v[k] = (j < Tk && mv.allows(mrow, j)) ? static_cast<A>(scale) * widen(s[j]) : -MT_INF;
        m = max_(m, v[k]);
    }
    m = warp_max(m);
    A sum = A(0);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        v[k] = v[k] == -MT_INF ? A(0) : exp_(v[k] - m);  // forbidden keys: exactly 0
        sum += v[k];
    }
    sum = warp_sum(sum);
    const A inv = sum > A(0) ? A(1) / sum : A(0);  // sum == 0 only when every key is forbidden
    T* p = probs + row * Tk;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        if (j < Tk) p[j] = narrow<T>(v[k] * inv);
    }
}

template <typename T, int ITEMS>
__global__ void attention_softmax_backward(const T* __restrict__ probs, const T* __restrict__ dprobs,
                                           T* __restrict__ dscores, long long rows, int Tk, double scale) {
    typedef typename Acc<T>::type A;
    const int warps_per_block = blockDim.x / MT_WARP;
    const long long row = static_cast<long long>(blockIdx.x) * warps_per_block + threadIdx.x / MT_WARP;
    const int lane = threadIdx.x % MT_WARP;
    if (row >= rows) return;
    const T* p = probs + row * Tk;
    const T* dp = dprobs + row * Tk;

    A pv[ITEMS], gv[ITEMS];
    A dot = A(0);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        pv[k] = j < Tk ? widen(p[j]) : A(0);
        gv[k] = j < Tk ? widen(dp[j]) : A(0);
        dot += pv[k] * gv[k];
    }
    dot = warp_sum(dot);
    T* ds = dscores + row * Tk;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        if (j < Tk) ds[j] = narrow<T>(static_cast<A>(scale) * pv[k] * (gv[k] - dot));
    }
}
