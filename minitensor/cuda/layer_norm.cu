// LayerNorm over the last axis (Ba et al., 2016), forward and backward.
//
//   forward:  y = (x - mean) * rstd * gamma + beta,   rstd = 1 / sqrt(var + eps)
//   backward: with g = dy * gamma and xhat = (x - mean) * rstd, means over the D entries,
//             dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//             dgamma = sum over rows of dy * xhat,   dbeta = sum over rows of dy
//
// One warp owns one row. Each lane keeps ITEMS = ceil(D / 32) values of the row in
// registers (lane l holds columns l, l + 32, l + 64, ...: every load is coalesced), so x
// is read from memory once and y written once; mean and variance come from two
// butterfly reductions over values already in registers (the two-pass variance, exact
// and stable). T is the storage type (float, f16, bf16, double); arithmetic runs in
// A = Acc<T>::type (float32, or float64 for double), as do the saved mean and rstd.
//
// The fused residual form (residual_layer_norm_*) normalises z = x + dropout(sub) instead of x:
// the post-norm sub-layer LayerNorm(x + Dropout(Sublayer(x))) of the paper (Sections 3.1,
// 5.4) in one pass each way. The forward writes z (T) for the backward; sub may be narrower
// than T (a 16-bit sub-layer output beside a float32 residual stream), and each term is
// rounded as the unfused ops round it. dropout(sub) = keep ? sub / (1 - p) : 0, keep drawn
// from Philox inside the kernel (keep_mask); the backward draws the same mask again and
// writes both gradients, dx = dz and dsub = dropout(dz), so the sub-layer's gradient costs no
// pass of its own. threshold = 0 is no dropout (p = 0, or evaluation).
//
// dgamma/dbeta need a sum over all rows. Atomics would make it depend on timing; here it
// is a deterministic two-stage reduction: stage 1 (the backward kernel) gives every block
// a fixed range of rows and writes one partial row per block, summing its warps in a
// fixed order; stage 2 adds the partials of each column in block order.
#include "common.cuh"

// The dropout mask, in the lane layout above (the fused residual form): lane `lane` of row `row` makes one Philox4x32-10
// call per 4 of its ITEMS values (values 4g .. 4g + 3 take the words of call g) at counter
// offset + (row * G + g) * 32 + lane, G = ceil(ITEMS / 4): every entry of the array gets a
// word of its own, a function of its row and column alone, so the forward and the backward,
// whatever rows their warps take, draw the same mask. The host reserves rows * G * 32 counters.
template <int ITEMS>
__device__ __forceinline__ void keep_mask(bool keep[ITEMS], long long row, int lane, unsigned int threshold,
                                          unsigned long long seed, unsigned long long offset) {
    const int G = (ITEMS + 3) / 4;
#pragma unroll
    for (int g = 0; g < G; ++g) {
        unsigned int c[4];
        philox_at(c, offset + static_cast<unsigned long long>((row * G + g) * MT_WARP + lane), seed);
#pragma unroll
        for (int w = 0; w < 4; ++w)
            if (4 * g + w < ITEMS) keep[4 * g + w] = threshold == 0u || (c[w] >> 8) >= threshold;
    }
}


// One warp normalises one row held in registers (v, ITEMS values per lane, 0 past D) and
// writes y; returns the row's mean and rstd.
template <typename T, int ITEMS>
__device__ __forceinline__ void normalize_row(const typename Acc<T>::type v[ITEMS], int lane, int D, double eps,
                                              const T* __restrict__ gamma, const T* __restrict__ beta,
                                              T* __restrict__ yr, typename Acc<T>::type& mean_out,
                                              typename Acc<T>::type& rstd_out) {
    typedef typename Acc<T>::type A;
    A sum = A(0);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) sum += v[k];
    const A mean = warp_sum(sum) / D;
    A sq = A(0);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        const A c = j < D ? v[k] - mean : A(0);
        sq += c * c;
    }
    const A rstd = rsqrt_(warp_sum(sq) / D + static_cast<A>(eps));
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        if (j < D) yr[j] = narrow<T>((v[k] - mean) * rstd * widen(gamma[j]) + widen(beta[j]));
    }
    mean_out = mean;
    rstd_out = rstd;
}

template <typename T, int ITEMS>
__global__ void layer_norm_forward(const T* __restrict__ x, const T* __restrict__ gamma,
                                   const T* __restrict__ beta, T* __restrict__ y,
                                   typename Acc<T>::type* __restrict__ mean_out,
                                   typename Acc<T>::type* __restrict__ rstd_out,
                                   long long rows, int D, double eps) {
    typedef typename Acc<T>::type A;
    const int warps_per_block = blockDim.x / MT_WARP;
    const long long row = static_cast<long long>(blockIdx.x) * warps_per_block + threadIdx.x / MT_WARP;
    const int lane = threadIdx.x % MT_WARP;
    if (row >= rows) return;  // the whole warp leaves together
    const T* xr = x + row * D;
    A v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        v[k] = j < D ? widen(xr[j]) : A(0);
    }
    T* yr = y + row * D;
    A mean, rstd;
    normalize_row<T, ITEMS>(v, lane, D, eps, gamma, beta, yr, mean, rstd);
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// Stage 1 of the backward: dx for every row (and, given dsub, dsub = dropout(dx) with the mask
// at seed and offset), and per-block partial sums of dgamma/dbeta.
// Block b owns rows [b * rows_per_block, (b + 1) * rows_per_block); its warp w takes the
// rows w, w + WARPS, ... of that range. Needs 2 * WARPS * D values of type A in dynamic shared memory.
template <typename T, int ITEMS, int WARPS, typename S>
__device__ __forceinline__ void backward_rows(const T* __restrict__ dy, const T* __restrict__ x,
                                              const T* __restrict__ gamma,
                                              const typename Acc<T>::type* __restrict__ mean_in,
                                              const typename Acc<T>::type* __restrict__ rstd_in, T* __restrict__ dx,
                                              S* __restrict__ dsub, typename Acc<T>::type* __restrict__ partial_dgamma,
                                              typename Acc<T>::type* __restrict__ partial_dbeta, long long rows, int D,
                                              long long rows_per_block, unsigned int threshold, double scale,
                                              unsigned long long seed, unsigned long long offset) {
    typedef typename Acc<T>::type A;
    MT_DYNAMIC_SHARED(unsigned char, shared_bytes);  // [WARPS][D] for dgamma, then [WARPS][D] for dbeta
    A* s_dgamma = reinterpret_cast<A*>(shared_bytes);
    A* s_dbeta = s_dgamma + WARPS * D;
    const int warp = threadIdx.x / MT_WARP;
    const int lane = threadIdx.x % MT_WARP;
    const long long first = static_cast<long long>(blockIdx.x) * rows_per_block;
    long long last = first + rows_per_block;
    if (last > rows) last = rows;

    A acc_dgamma[ITEMS], acc_dbeta[ITEMS], g_col[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        acc_dgamma[k] = A(0);
        acc_dbeta[k] = A(0);
        g_col[k] = j < D ? widen(gamma[j]) : A(0);
    }

    for (long long row = first + warp; row < last; row += WARPS) {
        const A mean = mean_in[row], rstd = rstd_in[row];
        const T* xr = x + row * D;
        const T* dyr = dy + row * D;
        A xhat[ITEMS], g[ITEMS];
        A sum_g = A(0), sum_gx = A(0);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int j = lane + k * MT_WARP;
            const A d = j < D ? widen(dyr[j]) : A(0);
            xhat[k] = j < D ? (widen(xr[j]) - mean) * rstd : A(0);
            g[k] = d * g_col[k];
            sum_g += g[k];
            sum_gx += g[k] * xhat[k];
            acc_dgamma[k] += d * xhat[k];
            acc_dbeta[k] += d;
        }
        const A mean_g = warp_sum(sum_g) / D;
        const A mean_gx = warp_sum(sum_gx) / D;
        T* dxr = dx + row * D;
        bool keep[ITEMS];
        if (dsub != nullptr) keep_mask<ITEMS>(keep, row, lane, threshold, seed, offset);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int j = lane + k * MT_WARP;
            if (j < D) {
                const A d = rstd * (g[k] - mean_g - xhat[k] * mean_gx);
                dxr[j] = narrow<T>(d);
                if (dsub != nullptr) dsub[row * D + j] = narrow<S>(keep[k] ? d * static_cast<A>(scale) : A(0));
            }
        }
    }

    // combine the warps of this block in a fixed order: deterministic
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        if (j < D) {
            s_dgamma[warp * D + j] = acc_dgamma[k];
            s_dbeta[warp * D + j] = acc_dbeta[k];
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        A a = A(0), b = A(0);
        for (int w = 0; w < WARPS; ++w) {
            a += s_dgamma[w * D + j];
            b += s_dbeta[w * D + j];
        }
        partial_dgamma[static_cast<long long>(blockIdx.x) * D + j] = a;
        partial_dbeta[static_cast<long long>(blockIdx.x) * D + j] = b;
    }
}

template <typename T, int ITEMS, int WARPS>
__global__ void layer_norm_backward(const T* __restrict__ dy, const T* __restrict__ x,
                                    const T* __restrict__ gamma, const typename Acc<T>::type* __restrict__ mean_in,
                                    const typename Acc<T>::type* __restrict__ rstd_in, T* __restrict__ dx,
                                    typename Acc<T>::type* __restrict__ partial_dgamma,
                                    typename Acc<T>::type* __restrict__ partial_dbeta,
                                    long long rows, int D, long long rows_per_block) {
    backward_rows<T, ITEMS, WARPS, T>(dy, x, gamma, mean_in, rstd_in, dx, nullptr, partial_dgamma, partial_dbeta, rows,
                                      D, rows_per_block, 0u, 1.0, 0ull, 0ull);
}

// Stage 2: one thread per column adds the `blocks` partial rows in order.
template <typename T>
__global__ void layer_norm_param_grads(const typename Acc<T>::type* __restrict__ partial_dgamma,
                                       const typename Acc<T>::type* __restrict__ partial_dbeta,
                                       T* __restrict__ dgamma, T* __restrict__ dbeta, int blocks, int D) {
    typedef typename Acc<T>::type A;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    A a = A(0), b = A(0);
    for (int blk = 0; blk < blocks; ++blk) {
        a += partial_dgamma[static_cast<long long>(blk) * D + j];
        b += partial_dbeta[static_cast<long long>(blk) * D + j];
    }
    dgamma[j] = narrow<T>(a);
    dbeta[j] = narrow<T>(b);
}

// ---------------------------------------------------------------- the fused residual form
template <typename T, int ITEMS, typename S>
__global__ void residual_layer_norm_forward(const T* __restrict__ x, const S* __restrict__ sub,
                                            const T* __restrict__ gamma, const T* __restrict__ beta,
                                            T* __restrict__ y, T* __restrict__ z,
                                            typename Acc<T>::type* __restrict__ mean_out,
                                            typename Acc<T>::type* __restrict__ rstd_out, long long rows, int D,
                                            double eps, unsigned int threshold, double scale,
                                            const unsigned long long* __restrict__ seed_word,
                                            unsigned long long offset) {
    typedef typename Acc<T>::type A;
    const unsigned long long seed = *seed_word;   // in memory, as dropout.cu's: a graph's replay reads the update's own
    const int warps_per_block = blockDim.x / MT_WARP;
    const long long row = static_cast<long long>(blockIdx.x) * warps_per_block + threadIdx.x / MT_WARP;
    const int lane = threadIdx.x % MT_WARP;
    if (row >= rows) return;  // the whole warp leaves together
    bool keep[ITEMS];
    keep_mask<ITEMS>(keep, row, lane, threshold, seed, offset);
    const A s = static_cast<A>(scale);
    A v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int j = lane + k * MT_WARP;
        v[k] = A(0);
        if (j < D) {  // z = x + dropout(sub): dropout's product rounded to S, the sum to T
            const A d = keep[k] ? widen(narrow<S>(widen(sub[row * D + j]) * s)) : A(0);
            const T zt = narrow<T>(widen(x[row * D + j]) + d);
            z[row * D + j] = zt;
            v[k] = widen(zt);
        }
    }
    A mean, rstd;
    normalize_row<T, ITEMS>(v, lane, D, eps, gamma, beta, y + row * D, mean, rstd);
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// dz (= dx) and dsub = dropout(dz), with stage 1's partial dgamma/dbeta (then layer_norm_param_grads).
template <typename T, int ITEMS, int WARPS, typename S>
__global__ void residual_layer_norm_backward(const T* __restrict__ dy, const T* __restrict__ z,
                                             const T* __restrict__ gamma,
                                             const typename Acc<T>::type* __restrict__ mean_in,
                                             const typename Acc<T>::type* __restrict__ rstd_in, T* __restrict__ dz,
                                             S* __restrict__ dsub, typename Acc<T>::type* __restrict__ partial_dgamma,
                                             typename Acc<T>::type* __restrict__ partial_dbeta, long long rows,
                                             int D, long long rows_per_block, unsigned int threshold, double scale,
                                             const unsigned long long* __restrict__ seed_word,
                                             unsigned long long offset) {
    backward_rows<T, ITEMS, WARPS, S>(dy, z, gamma, mean_in, rstd_in, dz, dsub, partial_dgamma, partial_dbeta, rows, D,
                                      rows_per_block, threshold, scale, *seed_word, offset);
}
