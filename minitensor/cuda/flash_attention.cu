// Fused attention in the FlashAttention style (Dao et al., 2022; FlashAttention-2's loop
// order), forward and backward, on the CUDA cores in float32 (and float64, for checking): the
// algorithm in its plainest form. flash_attention_tc.cu runs the same algorithm on the tensor
// cores in float16, bfloat16 and TF32.
//
//   O = softmax(scale * Q K^T + mask) V   for Q (N, Tq, d), K and V (N, Tk, d), N = B * H.
//
// The Tq x Tk score matrix is never stored. The forward walks over tiles of BK keys,
// keeping for each query a running maximum m, a running denominator l and an unnormalised
// output: when a tile raises the maximum from m to m', what was accumulated so far is
// multiplied by exp(m - m') (the "online softmax"). It saves O and the log-sum-exp
// lse = m + log(l) of every row, so memory grows linearly with the sequence length.
// The backward recomputes each probability from the scores and lse, p = exp(s - lse):
//
//   delta_i = sum_c dO_ic O_ic         (computed before these kernels)
//   dV_j = sum_i p_ij dO_i,   dp_ij = dO_i . V_j,   ds_ij = p_ij (dp_ij - delta_i)
//   dK_j = scale * sum_i ds_ij Q_i,    dQ_i = scale * sum_j ds_ij K_j
//
// in two passes without atomics (so the result is deterministic): one block per tile of
// keys accumulates dK and dV, one block per tile of queries accumulates dQ.
//
// Grids are (N, number of tiles): blockIdx.x picks the (batch, head) pair, blockIdx.y the
// tile. Each thread owns one row (a query, or a key in the dK/dV pass) and computes its dot
// products with the rows of a tile that the block staged in shared memory; every thread of
// a warp reads the same shared element at once (a broadcast, no bank conflicts). D is the
// head size rounded up to 16, 32 or 64 (columns d..D-1 are zero). These are CUDA-core
// (FFMA) kernels: clear, and memory-light, but they do not use the tensor cores.
//
// A query with no allowed key gets O = 0 and lse = +inf, so every p = exp(s - inf) is 0
// in the backward and its gradients are 0, as in the reference.
//
// S is float (the fast path: __expf, float32 everywhere) or double (for the float64
// gradcheck of these kernels; smaller tiles keep its shared memory under 48 KB).
#include "common.cuh"

// Stage rows [row0, row0 + ROWS) of two row-major (rows_total x d) matrices into the shared
// tiles a_tile and b_tile ([ROWS][D]), zero past rows_total and past column d. All THREADS
// threads of the block take part; consecutive threads read consecutive columns (coalesced).
template <typename S, int ROWS, int D, int THREADS>
__device__ __forceinline__ void stage_tiles(S (*a_tile)[D], S (*b_tile)[D], const S* __restrict__ a,
                                            const S* __restrict__ b, int row0, int rows_total, int d) {
    for (int e = threadIdx.x; e < ROWS * D; e += THREADS) {
        const int r = e / D, c = e % D, row = row0 + r;
        const bool ok = row < rows_total && c < d;
        a_tile[r][c] = ok ? a[static_cast<long long>(row) * d + c] : S(0);
        b_tile[r][c] = ok ? b[static_cast<long long>(row) * d + c] : S(0);
    }
}

template <typename S, int D, int BQ, int BK>
__global__ void __launch_bounds__(BQ)
flash_attention_forward(const S* __restrict__ Q, const S* __restrict__ K, const S* __restrict__ V,
                        S* __restrict__ O, S* __restrict__ LSE, const unsigned char* __restrict__ mask,
                        long long mask_sb, long long mask_sh, long long mask_sq, long long mask_sk,
                        int H, int Tq, int Tk, int d, double scale_) {
    const S scale = static_cast<S>(scale_);
    __shared__ S Ks[BK][D];
    __shared__ S Vs[BK][D];
    const int n = blockIdx.x;                          // the (batch, head) pair
    const int i = blockIdx.y * BQ + threadIdx.x;        // this thread's query
    const bool has_row = i < Tq;
    const MaskView mv{mask, mask_sb, mask_sh, mask_sq, mask_sk};
    const unsigned char* mrow = has_row ? mv.row(n / H, n % H, i) : nullptr;

    S q[D], acc[D];
    const S* qr = Q + (static_cast<long long>(n) * Tq + i) * d;
#pragma unroll
    for (int c = 0; c < D; ++c) {
        q[c] = (has_row && c < d) ? qr[c] * scale : S(0);
        acc[c] = S(0);
    }
    S m = -MT_INF, l = S(0);

    const S* Kn = K + static_cast<long long>(n) * Tk * d;
    const S* Vn = V + static_cast<long long>(n) * Tk * d;
    for (int j0 = 0; j0 < Tk; j0 += BK) {
        stage_tiles<S, BK, D, BQ>(Ks, Vs, Kn, Vn, j0, Tk, d);
        __syncthreads();
        if (has_row) {
            S s[BK];
            S tile_max = -MT_INF;
#pragma unroll
            for (int r = 0; r < BK; ++r) {
                S dot = S(0);
#pragma unroll
                for (int c = 0; c < D; ++c) dot += q[c] * Ks[r][c];
                const int j = j0 + r;
                s[r] = (j < Tk && mv.allows(mrow, j)) ? dot : -MT_INF;
                tile_max = max_(tile_max, s[r]);
            }
            const S m_new = max_(m, tile_max);
            if (m_new != -MT_INF) {                        // else no allowed key yet: nothing to add
                const S correction = exp_(m - m_new);  // 0 on the first allowed tile (m = -inf)
                l *= correction;
#pragma unroll
                for (int c = 0; c < D; ++c) acc[c] *= correction;
#pragma unroll
                for (int r = 0; r < BK; ++r) {
                    const S p = exp_(s[r] - m_new);  // forbidden: exp(-inf) = 0
                    l += p;
#pragma unroll
                    for (int c = 0; c < D; ++c) acc[c] += p * Vs[r][c];
                }
                m = m_new;
            }
        }
        __syncthreads();
    }
    if (has_row) {
        const S inv = l > S(0) ? S(1) / l : S(0);
        S* orow = O + (static_cast<long long>(n) * Tq + i) * d;
#pragma unroll
        for (int c = 0; c < D; ++c)
            if (c < d) orow[c] = acc[c] * inv;
        LSE[static_cast<long long>(n) * Tq + i] = l > S(0) ? m + log_(l) : MT_INF;
    }
}

// dK and dV: thread t owns key j = tile * BK + t; its K and V rows sit in shared memory
// (padded by one S per row so that the threads' own-row reads hit distinct banks),
// its dK and dV accumulate in registers; the block walks over all queries BQ at a time.
template <typename S, int D, int BK, int BQ>
__global__ void __launch_bounds__(BK)
flash_attention_backward_dkdv(const S* __restrict__ Q, const S* __restrict__ K,
                              const S* __restrict__ V, const S* __restrict__ dO,
                              const S* __restrict__ LSE, const S* __restrict__ Delta,
                              S* __restrict__ dK, S* __restrict__ dV,
                              const unsigned char* __restrict__ mask, long long mask_sb, long long mask_sh,
                              long long mask_sq, long long mask_sk, int H, int Tq, int Tk, int d, double scale_) {
    const S scale = static_cast<S>(scale_);
    __shared__ S Ks[BK][D + 1];
    __shared__ S Vs[BK][D + 1];
    __shared__ S Qs[BQ][D];
    __shared__ S dOs[BQ][D];
    __shared__ S lse_s[BQ];
    __shared__ S delta_s[BQ];
    const int n = blockIdx.x;                          // the (batch, head) pair
    const int t = threadIdx.x;
    const int j = blockIdx.y * BK + t;                  // this thread's key
    const bool has_key = j < Tk;
    const MaskView mv{mask, mask_sb, mask_sh, mask_sq, mask_sk};
    const int b = n / H, h = n % H;

    const long long kv_row = (static_cast<long long>(n) * Tk + j) * d;
#pragma unroll
    for (int c = 0; c < D; ++c) {
        Ks[t][c] = (has_key && c < d) ? K[kv_row + c] : S(0);
        Vs[t][c] = (has_key && c < d) ? V[kv_row + c] : S(0);
    }
    S dk[D], dv[D];
#pragma unroll
    for (int c = 0; c < D; ++c) dk[c] = dv[c] = S(0);

    const S* Qn = Q + static_cast<long long>(n) * Tq * d;
    const S* dOn = dO + static_cast<long long>(n) * Tq * d;
    for (int i0 = 0; i0 < Tq; i0 += BQ) {
        stage_tiles<S, BQ, D, BK>(Qs, dOs, Qn, dOn, i0, Tq, d);
        for (int r = t; r < BQ; r += BK) {
            const int i = i0 + r;
            lse_s[r] = i < Tq ? LSE[static_cast<long long>(n) * Tq + i] : MT_INF;
            delta_s[r] = i < Tq ? Delta[static_cast<long long>(n) * Tq + i] : S(0);
        }
        __syncthreads();
        if (has_key) {
            for (int r = 0; r < BQ; ++r) {
                const int i = i0 + r;
                if (i >= Tq) break;
                if (!mv.allows(mv.row(b, h, i), j)) continue;
                S s = S(0), dp = S(0);
#pragma unroll
                for (int c = 0; c < D; ++c) {
                    s += Qs[r][c] * Ks[t][c];
                    dp += dOs[r][c] * Vs[t][c];
                }
                const S p = exp_(scale * s - lse_s[r]);
                const S ds = p * (dp - delta_s[r]) * scale;
#pragma unroll
                for (int c = 0; c < D; ++c) {
                    dv[c] += p * dOs[r][c];
                    dk[c] += ds * Qs[r][c];
                }
            }
        }
        __syncthreads();
    }
    if (has_key) {
#pragma unroll
        for (int c = 0; c < D; ++c) {
            if (c < d) {
                dK[kv_row + c] = dk[c];
                dV[kv_row + c] = dv[c];
            }
        }
    }
}

// dQ: thread t owns query i = tile * BQ + t (its Q and dO rows in padded shared memory,
// dQ in registers); the block walks over all keys BK at a time.
template <typename S, int D, int BQ, int BK>
__global__ void __launch_bounds__(BQ)
flash_attention_backward_dq(const S* __restrict__ Q, const S* __restrict__ K,
                            const S* __restrict__ V, const S* __restrict__ dO,
                            const S* __restrict__ LSE, const S* __restrict__ Delta, S* __restrict__ dQ,
                            const unsigned char* __restrict__ mask, long long mask_sb, long long mask_sh,
                            long long mask_sq, long long mask_sk, int H, int Tq, int Tk, int d, double scale_) {
    const S scale = static_cast<S>(scale_);
    __shared__ S Qs[BQ][D + 1];
    __shared__ S dOs[BQ][D + 1];
    __shared__ S Ks[BK][D];
    __shared__ S Vs[BK][D];
    const int n = blockIdx.x;                          // the (batch, head) pair
    const int t = threadIdx.x;
    const int i = blockIdx.y * BQ + t;                  // this thread's query
    const bool has_row = i < Tq;
    const MaskView mv{mask, mask_sb, mask_sh, mask_sq, mask_sk};
    const unsigned char* mrow = has_row ? mv.row(n / H, n % H, i) : nullptr;

    const long long q_row = (static_cast<long long>(n) * Tq + i) * d;
#pragma unroll
    for (int c = 0; c < D; ++c) {
        Qs[t][c] = (has_row && c < d) ? Q[q_row + c] : S(0);
        dOs[t][c] = (has_row && c < d) ? dO[q_row + c] : S(0);
    }
    const S lse = has_row ? LSE[static_cast<long long>(n) * Tq + i] : MT_INF;
    const S delta = has_row ? Delta[static_cast<long long>(n) * Tq + i] : S(0);
    S dq[D];
#pragma unroll
    for (int c = 0; c < D; ++c) dq[c] = S(0);

    const S* Kn = K + static_cast<long long>(n) * Tk * d;
    const S* Vn = V + static_cast<long long>(n) * Tk * d;
    for (int j0 = 0; j0 < Tk; j0 += BK) {
        stage_tiles<S, BK, D, BQ>(Ks, Vs, Kn, Vn, j0, Tk, d);
        __syncthreads();
        if (has_row) {
            for (int r = 0; r < BK; ++r) {
                const int j = j0 + r;
                if (j >= Tk) break;
                if (!mv.allows(mrow, j)) continue;
                S s = S(0), dp = S(0);
#pragma unroll
                for (int c = 0; c < D; ++c) {
                    s += Qs[t][c] * Ks[r][c];
                    dp += dOs[t][c] * Vs[r][c];
                }
                const S p = exp_(scale * s - lse);
                const S ds = p * (dp - delta) * scale;
#pragma unroll
                for (int c = 0; c < D; ++c) dq[c] += ds * Ks[r][c];
            }
        }
        __syncthreads();
    }
    if (has_row) {
        S* out = dQ + q_row;
#pragma unroll
        for (int c = 0; c < D; ++c)
            if (c < d) out[c] = dq[c];
    }
}
