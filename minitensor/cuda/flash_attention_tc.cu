// Fused attention in the FlashAttention style on the tensor cores (f16, bf16, tf32): the
// algorithm of flash_attention.cu (read it first: the online softmax, the two-pass backward,
// lse and delta are explained there) with its products on the tensor cores.
//
// The products on the tensor cores (FlashAttention-2, Dao, 2023), sums in
// float32: mma.sync m16n8k16 on f16 or bf16 storage, and m16n8k8 in TF32 on float32 storage (the
// inputs rounded to TF32's 10 mantissa bits as they are read, as cuBLAS does in TF32 mode).
// TcMath<T> below holds everything that differs between the two; the kernels are written once.
//
// Block: 4 warps (128 threads) and 64 MT rows (queries; keys in the dK/dV pass, which has MT = 1),
// MT blocks of 16 rows a warp: a B fragment read from shared memory serves the MT blocks' products.
// A warp's own rows of Q, dO, K or V stay in A fragments (registers) for the whole kernel; the
// other side's rows are staged tile by tile in shared memory, row-major as they lie in memory,
// and each product reads its B fragments from there: for Q K^T the staged rows are B's columns,
// for P V they are B's rows (16-bit: ldmatrix, with .trans for the second; TF32: one load per
// register). Rows are padded so that a fragment's reads fall in different banks. Tiles are
// copied with cp.async, 16 bytes at a time where the rows allow, into two buffers: the next tile
// is copied while this one is computed (TilePipe).
//
// Scores, probabilities and their gradients live in accumulator fragments: lane 4g + t holds
// rows g and g + 8 and two columns of every 8-column tile. Those are the A fragment's entries of
// the next product (P V, dS K, ...), so P and dS go from one product to the next without leaving
// registers. A row's max and sum meet in the 4 lanes of its quad (two xor shuffles).
//
// Arrays are read through strides (in elements) for the batch, head and time axes, so q, k, v
// may be views of (B, T, H, d) projections with no head copies, and column blocks of one wider
// product (Q, K and V of one input made by one product: gaps between the rows): Q has one set
// (q_s*), O, dO and dQ another (o_s*), K and V a third (k_s*), dK and dV a fourth (dk_s*). The
// head size d is 32, 64 or 128 (no padding); every row starts 4-byte aligned. The mask is read
// per score through MaskView; `causal` also forbids key j > query i, and then the tiles wholly
// above the diagonal are skipped (not computed). A warp's tile that every score may enter (no
// mask, inside both lengths, below the diagonal) skips the per-score check.
// lse and delta are float32. The backward is two passes without atomics, as in flash_attention.cu, or (16-bit,
// set_one_pass_backward) one pass in which the key blocks add their shares of dQ in a fixed order
// (the dK/dV kernel with DQ): the result is deterministic either way. A query with no allowed key
// gets O = 0, lse = +inf and zero gradients.
//
// WG (sm_90a, 16-bit, head sizes 32 and 64): the same kernels with their products on Hopper's
// warpgroup instructions (common.cuh's wgmma_64xNx16). The fragments in registers are the same;
// the staged tiles lie in wgmma's core matrices instead of padded rows (TileLayout), the 4 warps
// issue each product together for 64 rows (so a warp's MT blocks of 16 rows are 64 rows apart),
// and B is read from shared memory by the tensor cores, not by ldmatrix (tile_product).

#include "common.cuh"

// TcMath<T>: how T-storage rows feed one warp's mma.sync (the fragments are common.cuh's).
// KS is a k-step's width; a 32-bit register holds 4 / sizeof(T) values.
//
// An accumulator tile's position 2t + e (e = 0, 1) in lane 4g + t is column col(t, e) of the
// matrix. For 16-bit storage that is 2t + e, the positions as they are. m16n8k8's A fragment
// wants columns t and t + 4 of a lane instead, so in TF32 every product's 8 output columns are
// permuted: B's column n is read from column b_row(n) of its 8-column tile (n / 2 + 4 (n % 2)),
// and position 2t + e then holds column t + 4e, exactly what the next product's A fragment takes.
// The permutation is one of each tile's columns, so masks, row maxima and stores only need col().
//
// B fragments come from a row-major shared tile s (`pitch` values per row) in one of two ways:
// b_frag_t where s holds B transposed (B[k][n] = s[n][k]: the keys of Q K^T) and b_frag where s
// holds B itself (B[k][n] = s[k][n]: the values of P V); each gives the 8-column tile n0 at the
// k-step that starts at column (or row) k0.
template <typename T>
struct TcMath {   // f16, bf16: m16n8k16, a pair of values per register
    static constexpr int KS = 16, PAD = 8;   // PAD: rows stay 16-byte aligned, and ldmatrix's 8 rows hit 8 bank groups
    __device__ static __forceinline__ int col(int t, int e) { return 2 * t + e; }
    // A fragment register r of a 16-row block: p is its row g + 8 (r % 2) at the k-step's first column
    __device__ static __forceinline__ unsigned int a_reg(const T* p, int t, int r) { return pair_at(p + 2 * t + (r / 2) * 8); }
    // ldmatrix's matrix i (lanes 8i .. 8i + 7) is b[i]: k from k0 + 8i
    __device__ static __forceinline__ void b_frag_t(unsigned int b[2], const T* s, int pitch, int n0, int k0) {
        const int lane = threadIdx.x % MT_WARP;
        ldmatrix_x2<false>(b, s + (n0 + lane % 8) * pitch + k0 + 8 * (lane / 8 % 2));
    }
    __device__ static __forceinline__ void b_frag(unsigned int b[2], const T* s, int pitch, int n0, int k0) {
        const int lane = threadIdx.x % MT_WARP;
        ldmatrix_x2<true>(b, s + (k0 + 8 * (lane / 8 % 2) + lane % 8) * pitch + n0);
    }
    // the A fragment of A's 16 x KS block at row m0 and column k0 from a tile s that holds A transposed
    // (A[m][k] = s[k][m]: dS from dS^T's rows, in the one-pass backward): ldmatrix .trans, once for
    // columns k0 .. k0 + 7 (registers 0 and 1: rows g and g + 8) and once for the next 8
    __device__ static __forceinline__ void a_frag_t(unsigned int a[4], const T* s, int pitch, int m0, int k0) {
        const int lane = threadIdx.x % MT_WARP;
        const T* p = s + (k0 + lane % 8) * pitch + m0 + 8 * (lane / 8 % 2);
        ldmatrix_x2<true>(a, p);
        ldmatrix_x2<true>(a + 2, p + 8 * pitch);
    }
    __device__ static __forceinline__ void mma(float acc[4], const unsigned int a[4], const unsigned int b[2]) {
        mma_16x8x16<T>(acc, a, b, acc);
    }
    // the A fragment of one k-step from the accumulators of its KS / 8 = 2 column tiles
    __device__ static __forceinline__ void pack(unsigned int a[4], const float (*acc)[4]) {
        a[0] = pack_pair<T>(acc[0][0], acc[0][1]);
        a[1] = pack_pair<T>(acc[0][2], acc[0][3]);
        a[2] = pack_pair<T>(acc[1][0], acc[1][1]);
        a[3] = pack_pair<T>(acc[1][2], acc[1][3]);
    }
    // positions 2t + e, e = 0, 1 of an output tile: p is the tile's first column
    __device__ static __forceinline__ void store(T* p, int t, float v0, float v1) {
        *reinterpret_cast<unsigned int*>(p + 2 * t) = pack_pair<T>(v0, v1);
    }
};

#ifdef MT_HAS_TENSOR_CORES
template <>
struct TcMath<float> {   // TF32: m16n8k8, one value per register, every value rounded by to_tf32 as read
    static constexpr int KS = 8, PAD = 4;   // PAD: b_frag_t's 32 reads hit 32 banks (b_frag's: at most 2 a bank)
    __device__ static __forceinline__ int col(int t, int e) { return t + 4 * e; }
    __device__ static __forceinline__ int b_row(int n) { return n / 2 + 4 * (n % 2); }
    __device__ static __forceinline__ unsigned int a_reg(const float* p, int t, int r) { return to_tf32(p[t + (r / 2) * 4]); }
    // b[r] = B[k0 + t + 4r][n0 + b_row(g)], rounded to TF32 as it is read
    __device__ static __forceinline__ void b_frag_t(unsigned int b[2], const float* s, int pitch, int n0, int k0) {
        const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
        b[0] = to_tf32(s[(n0 + b_row(g)) * pitch + k0 + t]);
        b[1] = to_tf32(s[(n0 + b_row(g)) * pitch + k0 + t + 4]);
    }
    __device__ static __forceinline__ void b_frag(unsigned int b[2], const float* s, int pitch, int n0, int k0) {
        const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
        b[0] = to_tf32(s[(k0 + t) * pitch + n0 + b_row(g)]);
        b[1] = to_tf32(s[(k0 + t + 4) * pitch + n0 + b_row(g)]);
    }
    __device__ static __forceinline__ void mma(float acc[4], const unsigned int a[4], const unsigned int b[2]) {
        mma_16x8x8_tf32(acc, a, b, acc);
    }
    __device__ static __forceinline__ void pack(unsigned int a[4], const float (*acc)[4]) {
        a[0] = to_tf32(acc[0][0]);   // A[g][t]
        a[1] = to_tf32(acc[0][2]);   // A[g + 8][t]
        a[2] = to_tf32(acc[0][1]);   // A[g][t + 4]
        a[3] = to_tf32(acc[0][3]);   // A[g + 8][t + 4]
    }
    __device__ static __forceinline__ void store(float* p, int t, float v0, float v1) {
        p[t] = v0;
        p[t + 4] = v1;
    }
};
#endif

struct AllowedKeys {   // may query i attend to key j?
    MaskView mv;
    int b, h, Tq, Tk, causal;
    __device__ __forceinline__ bool operator()(int i, int j) const {
        return i < Tq && j < Tk && (!causal || j <= i) && mv.allows(mv.row(b, h, i), j);
    }
    // may every query of [i0, i0 + rows) attend to every key of [j0, j0 + cols), with no mask to
    // read? (Then a tile's scores need no check: most tiles, when only the causal flag masks.)
    __device__ __forceinline__ bool whole(int i0, int rows, int j0, int cols) const {
        return mv.data == nullptr && i0 + rows <= Tq && j0 + cols <= Tk && (!causal || j0 + cols - 1 <= i0);
    }
};

// Where a thread of a tensor-core block stands, given the block's (batch, head) pair n and its block of
// rows (blockIdx.x and .y, except in the one-pass backward, whose blocks take theirs in the order they
// start): the lane's g and t, the block's first row (64 MT rows a block) and its warp's first (its MT
// blocks of 16 rows follow one another with mma.sync; with wgmma (WG) block mt is the warp's 16 rows
// of the warpgroup's mt-th 64), both families' offsets for this (batch, head), and the mask.
struct TcPlace {
    int n, g, t, block_row0, row0;
    long long q_off, o_off, k_off, dk_off;
    AllowedKeys allowed;
};

__device__ __forceinline__ TcPlace tc_place(int n, int row_block, const unsigned char* mask, long long mask_sb,
                                            long long mask_sh, long long mask_sq, long long mask_sk, int H, int Tq,
                                            int Tk, long long q_sb, long long q_sh, long long o_sb, long long o_sh,
                                            long long k_sb, long long k_sh, long long dk_sb, long long dk_sh,
                                            int causal, int MT = 1, bool WG = false) {
    const int b = n / H, h = n % H, lane = threadIdx.x % MT_WARP;
    const int block_row0 = row_block * 64 * MT;
    return TcPlace{n, lane / 4, lane % 4, block_row0,
                   block_row0 + static_cast<int>(threadIdx.x / MT_WARP) * (WG ? 16 : 16 * MT),
                   b * q_sb + h * q_sh, b * o_sb + h * o_sh, b * k_sb + h * k_sh, b * dk_sb + h * dk_sh,
                   AllowedKeys{{mask, mask_sb, mask_sh, mask_sq, mask_sk}, b, h, Tq, Tk, causal}};
}

// the quad's (4 lanes of one row's) sum and max
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(MT_FULL_MASK, v, 1);
    return v + __shfl_xor_sync(MT_FULL_MASK, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(MT_FULL_MASK, v, 1));
    return fmaxf(v, __shfl_xor_sync(MT_FULL_MASK, v, 2));
}

// The A fragments of the 16 x D rows [row0, row0 + 16) of a (rows x D) matrix with row stride
// `stride`, zero past `rows`: f[kk] covers columns [KS kk, KS kk + KS).
template <typename T, int D>
__device__ __forceinline__ void load_rows_a(unsigned int f[D / TcMath<T>::KS][4], const T* __restrict__ base,
                                            long long stride, int row0, int rows) {
    constexpr int KS = TcMath<T>::KS;
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kk = 0; kk < D / KS; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = row0 + g + (r % 2) * 8;
            f[kk][r] = row < rows ? TcMath<T>::a_reg(base + row * stride + kk * KS, t, r) : 0u;
        }
}

// Σ_c a_ic b_ic of the lane's rows g and g + 8 of the warp's block (each summed over its quad),
// in float from the stored values: delta = dO . O.
template <typename T, int D>
__device__ __forceinline__ void row_dots(float out[2], const T* __restrict__ a, const T* __restrict__ b,
                                         long long stride, int row0, int rows) {
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + r * 8;
        float part = 0.f;
        if (row < rows)
#pragma unroll
            for (int c = t; c < D; c += 4) part += widen(a[row * stride + c]) * widen(b[row * stride + c]);
        out[r] = quad_sum(part);
    }
}

// Where a staged tile's element (r, c) lies: row-major with PAD values past each row for mma.sync
// (PITCH = D + PAD a row); in wgmma's core matrices of 8 rows x 8 values (WG: common.cuh), core
// matrix (r / 8, c / 8) at ((r / 8) (D / 8) + c / 8) 64 and row r % 8 at 8 (r % 8) within it, so
// that 8 rows take 8 D values, as 8 rows of PITCH = D would.
template <typename T, int D, bool WG>
struct TileLayout {
    static constexpr int PITCH = WG ? D : D + TcMath<T>::PAD;
    __device__ static __forceinline__ int at(int r, int c) {
        return WG ? ((r / 8) * (D / 8) + c / 8) * 64 + 8 * (r % 8) + c % 8 : r * PITCH + c;
    }
};

// Start copying rows [row0, row0 + R) of a (rows x D) matrix (row stride `stride`) into the
// shared tile s laid out as TileLayout says (row-major s[R][D + PAD] for mma.sync), zeros past
// `rows` (cp.async, BYTES at a time: the block's 128 threads take consecutive pieces of a row, so
// the reads are coalesced). Thread x copies piece x % P of rows x / P + k 128 / P (P pieces a
// row): its first addresses are worked out once, the others one fixed step apart (the loop's
// index arithmetic cost more than the copies). In wgmma's core matrices (WG), thread x copies piece
// (x / 8) % P of row x % 8 + 8 (x / 8P) instead, so that a warp writes four whole core matrices
// (512 contiguous bytes: no bank conflict).
template <int BYTES, typename T, int R, int D, bool WG = false>
__device__ __forceinline__ void copy_rows(T* s, const T* __restrict__ base, long long stride, int row0, int rows) {
    constexpr int V = BYTES / sizeof(T), P = D / V, STEP = 128 / P;   // STEP rows a pass
    static_assert(128 % P == 0 && R % STEP == 0, "the block's 128 threads copy whole rows, the same count each");
    static_assert(!WG || (BYTES == 16 && STEP % 8 == 0), "core matrices are copied 16 bytes at a time, 8 rows whole");
    const int r0 = WG ? threadIdx.x % 8 + 8 * (threadIdx.x / (8 * P)) : threadIdx.x / P;
    const int c = V * (WG ? threadIdx.x / 8 % P : threadIdx.x % P);
    const long long step = STEP * stride;
    const T* src = base + (row0 + r0) * stride + c;
    T* dst = s + TileLayout<T, D, WG>::at(r0, c);
#pragma unroll
    for (int k = 0; k < R / STEP; ++k, src += step) {   // STEP rows on: STEP PITCH values on, in both layouts
        const bool inside = row0 + r0 + k * STEP < rows;
        cp_async<BYTES>(dst + k * STEP * TileLayout<T, D, WG>::PITCH, inside ? src : base, inside);
    }
}

// does every row of a matrix at p, `stride` elements apart, start 16-byte aligned?
template <typename T>
__device__ __forceinline__ bool rows_aligned_16(const T* p, long long stride) {
    return ((reinterpret_cast<unsigned long long>(p) | static_cast<unsigned long long>(stride * sizeof(T))) % 16) == 0;
}

// copy_rows in 16-byte pieces where the rows allow (wide), else in 4-byte ones (wgmma's tiles: always
// 16-byte pieces, the launcher takes them only where the rows allow)
template <typename T, int R, int D, bool WG = false>
__device__ __forceinline__ void stage_rows(T* s, const T* __restrict__ base, long long stride, int row0, int rows,
                                           bool wide) {
    if (WG || wide)
        copy_rows<16, T, R, D, WG>(s, base, stride, row0, rows);
    else
        copy_rows<4, T, R, D>(s, base, stride, row0, rows);
}

// The forward's and the dQ pass's copies: keys [it BK, it BK + BK) of K and V (row stride
// `stride`, Tk rows) into buffer `buf` of the shared tiles Ks and Vs. Whether every row is
// 16-byte aligned is decided once, when the copier is made, not at every tile.
template <typename T, int BK, int D, bool WG>
struct KeyValueTiles {
    static constexpr int PITCH = TileLayout<T, D, WG>::PITCH;
    T (*Ks)[BK][PITCH];
    T (*Vs)[BK][PITCH];
    const T* K;
    const T* V;
    long long stride;
    int Tk;
    bool wide;
    __device__ __forceinline__ KeyValueTiles(T (*ks)[BK][PITCH], T (*vs)[BK][PITCH], const T* k, const T* v,
                                             long long st, int tk)
        : Ks(ks), Vs(vs), K(k), V(v), stride(st), Tk(tk),
          wide(rows_aligned_16(k, st) && rows_aligned_16(v, st)) {}
    __device__ __forceinline__ void operator()(int it, int buf) const {
        stage_rows<T, BK, D, WG>(&Ks[buf][0][0], K, stride, it * BK, Tk, wide);
        stage_rows<T, BK, D, WG>(&Vs[buf][0][0], V, stride, it * BK, Tk, wide);
    }
};

// The tile loop's copies, into two shared buffers: tile `it` goes to buffer it % 2, by
// copy(it, buffer) (which only starts cp.async copies). begin() before the loop (when it has a
// tile); await() at the top of each tile: it starts the next tile's copies, which then run behind
// this tile's products, and returns when the block sees this tile (and, with WG, when wgmma's
// proxy sees it too); release() at its end, after which no warp reads its buffer (the next await()
// refills it).
struct TilePipe {
    template <typename Copy>
    __device__ __forceinline__ static void begin(Copy copy) {
        copy(0, 0);
        cp_async_commit();
    }
    template <bool WG, typename Copy>
    __device__ __forceinline__ static void await(int it, bool has_next, Copy copy) {
        if (has_next) copy(it + 1, (it + 1) % 2);
        cp_async_commit();
        cp_async_wait<1>();   // all but the newest group (the next tile's) have landed
        if constexpr (WG) fence_async_shared();   // this thread's copies, for the tensor cores' reads
        __syncthreads();
    }
    __device__ __forceinline__ static void release() { __syncthreads(); }
};

// acc[mt][nt] += A_mt (16 x KS KK) B for the MT 16-row blocks of the warp's A and the NT 8-column
// tiles of B, read from the shared tile s (PITCH values per row): A S^T where s holds B's columns
// as rows (B_T, as the keys of Q K^T), A S where it holds B's rows (as the values of P V). Each B
// fragment is read from shared memory once for all MT blocks: with one block a warp, these reads
// bounded the kernels (two 128-byte wavefronts a product).
template <typename T, int MT, int NT, int KK, int PITCH, bool B_T>
__device__ __forceinline__ void mma_shared(float (*acc)[NT][4], const unsigned int (*a)[KK][4], const T* s) {
    constexpr int KS = TcMath<T>::KS;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) {
            unsigned int b[2];
            if (B_T)
                TcMath<T>::b_frag_t(b, s, PITCH, nt * 8, kk * KS);
            else
                TcMath<T>::b_frag(b, s, PITCH, nt * 8, kk * KS);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) TcMath<T>::mma(acc[mt][nt], a[mt][kk], b);
        }
}

// How tile_product treats its accumulator: ADD (acc += A B) or SET (acc = A B: on wgmma the first
// k-step ignores acc, so no zeros are written first), and whether it waits for its result (the
// default) or, with ON, runs on behind what the warps do next: on wgmma it closes a group of
// products (wgmma's commit_group) and returns, and acc may be read after tile_wait has waited for
// that group, then tile_settle(acc). JOIN: as ON, but the group stays open and the next product
// joins it (two products a wait covers together, as S and dP). On mma.sync every product is done
// when tile_product returns, and tile_wait does nothing.
enum TileOp { ADD = 0, SET = 1, ON = 2, JOIN = 4 };

// acc may be read: after the wait of its tile_product, or the tile_wait that covers its group
template <int MT, int NT, bool WG>
__device__ __forceinline__ void tile_settle(float (*acc)[NT][4]) {
    if constexpr (WG)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) wg_settle<NT>(acc[mt]);
}

// wait until at most N of the groups of products issued ON are still running (groups end in the
// order they were issued)
template <int N, bool WG>
__device__ __forceinline__ void tile_wait() {
    if constexpr (WG) wg_wait<N>();
}

// A tile's work on the warpgroup's MT blocks of rows (wgmma), ordered so that the tensor cores run
// behind the warps: issue(mt) issues block mt's first products (one group) for every block first;
// then, block by block, the warps wait for that block's group (tile_wait<MT - 1> leaves running the
// MT - 1 groups issued after it) and take its own work, work(mt), while the tensor cores compute the
// next blocks' first products or the block before's last, which then(mt) issues (a group); at the
// end, a wait for all.
template <int MT, typename Issue, typename Work, typename Then>
__device__ __forceinline__ void behind_the_products(Issue issue, Work work, Then then) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) issue(mt);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        tile_wait<MT - 1, true>();
        work(mt);
        then(mt);
    }
    tile_wait<0, true>();
}

// The same product on either kind of tile: mma_shared on mma.sync's row-major tiles; with WG, one
// warpgroup product (common.cuh's wgmma_64xNx16) per block of rows and k-step on core matrices,
// in one group. B_T: the tile's rows are B's columns (N) and its D columns K: LBO 128 bytes, SBO
// 16 D (8 rows of D values), a k-step 2 core matrices on. Else its rows are K and its D columns
// N: LBO 16 D, SBO 128, a k-step 16 rows on. (Writing zeros into an accumulator while another
// product was in flight made ptxas wait for that product before the next: hence SET.)
template <typename T, int MT, int NT, int KK, int D, bool B_T, bool WG, int OP = ADD>
__device__ __forceinline__ void tile_product(float (*acc)[NT][4], const unsigned int (*a)[KK][4], const T* s) {
    if constexpr (WG) {
        constexpr unsigned int ROWS8 = 16 * D, KSTEP = B_T ? 256 : 2 * ROWS8;
        const WgDesc b = B_T ? wg_desc(s, 128, ROWS8) : wg_desc(s, ROWS8, 128);
        wg_fence();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < KK; ++kk)
                wgmma_64xNx16<T, 8 * NT, B_T>(acc[mt], a[mt][kk], b.plus(kk * KSTEP), kk > 0 || !(OP & SET));
        if constexpr (!(OP & JOIN)) wg_commit();
        if constexpr (!(OP & (ON | JOIN))) {
            wg_wait<0>();
            tile_settle<MT, NT, WG>(acc);
        }
    } else {
        if constexpr (OP & SET)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
        mma_shared<T, MT, NT, KK, D + TcMath<T>::PAD, B_T>(acc, a, s);
    }
}

// The A fragments of a 16 x 8 NT accumulator (P or dS): k-step kb from column tiles
// [kb KS / 8, (kb + 1) KS / 8).
template <typename T, int NT>
__device__ __forceinline__ void pack_a(unsigned int a[NT * 8 / TcMath<T>::KS][4], const float acc[NT][4]) {
    constexpr int TILES = TcMath<T>::KS / 8;
#pragma unroll
    for (int kb = 0; kb < NT / TILES; ++kb) TcMath<T>::pack(a[kb], acc + kb * TILES);
}

// The warp's 16 x 8 NT tile of scores times `scale`, and -inf where the query may not see the
// key: rows [r0, r0 + 16) are queries and columns [c0, c0 + 8 NT) keys, or the other way round
// (KEY_ROWS, the dK/dV pass). A whole tile (AllowedKeys::whole, the most common) takes the path
// that checks nothing: the check at every score, even not taken, cost more than the products.
template <typename T, int NT, bool CHECK, bool KEY_ROWS>
__device__ __forceinline__ void scale_scores_(float s[NT][4], float scale, const AllowedKeys& allowed, int r0, int c0) {
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = r0 + g + (e / 2) * 8, c = c0 + nt * 8 + TcMath<T>::col(t, e % 2);
            const bool ok = !CHECK || (KEY_ROWS ? allowed(c, r) : allowed(r, c));
            s[nt][e] = ok ? s[nt][e] * scale : -MT_INF;
        }
}
template <typename T, int NT, bool KEY_ROWS>
__device__ __forceinline__ void scale_scores(float s[NT][4], float scale, const AllowedKeys& allowed, int r0, int c0,
                                             bool whole) {
    if (whole)
        scale_scores_<T, NT, false, KEY_ROWS>(s, scale, allowed, r0, c0);
    else
        scale_scores_<T, NT, true, KEY_ROWS>(s, scale, allowed, r0, c0);
}

// The warp's 16 x D accumulator, times `scale`, as rows [row0, row0 + 16) of out (rows past
// `rows` are not written).
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* __restrict__ base, long long stride, int row0, int rows,
                                           const float acc[D / 8][4], float scale) {
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row0 + g + half * 8;
        if (row >= rows) continue;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            TcMath<T>::store(base + row * stride + dt * 8, t, acc[dt][2 * half] * scale, acc[dt][2 * half + 1] * scale);
    }
}

// One tile of the online softmax for one 16-row block of a warp (rows g and g + 8 in this lane):
// the scores s (log2 units, -inf where not allowed) become p = 2^(s - m) with m the rows' running
// maximum, after the running sums l and the output o were rescaled by 2^(m_old - m_new).
template <int NT, int DT>
__device__ __forceinline__ void online_softmax(float s[NT][4], float m[2], float l[2], float o[DT][4]) {
    float tile_max[2] = {-MT_INF, -MT_INF};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
    float correction[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(m[r], quad_max(tile_max[r]));
        correction[r] = m_new == -MT_INF ? 1.f : exp2_(m[r] - m_new);   // 0 on the first allowed tile
        base[r] = m_new == -MT_INF ? 0.f : m_new;   // no allowed key yet: every s is -inf, every p 0
        l[r] *= correction[r];
        m[r] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float p = exp2_(s[nt][e] - base[e / 2]);
            s[nt][e] = p;
            l[e / 2] += p;
        }
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] *= correction[e / 2];
}

// Forward: a block per (batch, head) pair and 64 MT queries (16 MT a warp), walking over tiles of
// BK keys. (__launch_bounds__(128, 1): ptxas may use up to 255 registers; with no minimum it held
// some instantiations to 128 and spilled.)
template <typename T, int D, int BK, int MT, bool WG = false>
__global__ void __launch_bounds__(128, 1)
flash_attention_tc_forward(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                           T* __restrict__ O, float* __restrict__ LSE, const unsigned char* __restrict__ mask,
                           long long mask_sb, long long mask_sh, long long mask_sq, long long mask_sk,
                           int H, int Tq, int Tk, long long q_sb, long long q_sh, long long q_st,
                           long long o_sb, long long o_sh, long long o_st, long long k_sb, long long k_sh,
                           long long k_st, long long dk_sb, long long dk_sh, long long dk_st, int causal,
                           float scale) {
    constexpr int KS = TcMath<T>::KS, PITCH = TileLayout<T, D, WG>::PITCH, ROWS = 64 * MT;   // the block's queries
    constexpr int STEP = WG ? 64 : 16;                 // from one of the warp's blocks of 16 rows to the next
    __shared__ __align__(16) T Ks[2][BK][PITCH];   // the tile's keys (for Q K^T)
    __shared__ __align__(16) T Vs[2][BK][PITCH];   // and values (for P V)
    static_assert(sizeof(Ks) + sizeof(Vs) <= 48 * 1024, "two buffers fit in the static 48 KB");
    const TcPlace at = tc_place(blockIdx.x, blockIdx.y, mask, mask_sb, mask_sh, mask_sq, mask_sk, H, Tq,
                                Tk, q_sb, q_sh, o_sb, o_sh, k_sb, k_sh, dk_sb, dk_sh, causal, MT, WG);
    const int n = at.n, g = at.g, t = at.t, block_q0 = at.block_row0, q0 = at.row0;   // rows are queries
    const AllowedKeys& allowed = at.allowed;
    const long long q_off = at.q_off, o_off = at.o_off, k_off = at.k_off;
    const float scale2 = scale * MT_LOG2E;   // scores, m and lse in log2 units: p = 2^(s - m)

    unsigned int qf[MT][D / KS][4];
    float o[MT][D / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        load_rows_a<T, D>(qf[mt], Q + q_off, q_st, q0 + STEP * mt, Tq);
        m[mt][0] = m[mt][1] = -MT_INF;
        l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
    }

    // causal: no key past the block's last query
    const int k_end = (causal && block_q0 + ROWS < Tk) ? block_q0 + ROWS : Tk;
    const int tiles = (k_end + BK - 1) / BK;
    const KeyValueTiles<T, BK, D, WG> copy{Ks, Vs, K + k_off, V + k_off, k_st, Tk};
    if (tiles > 0) TilePipe::begin(copy);
    for (int it = 0; it < tiles; ++it) {
        const int j0 = it * BK, buf = it % 2;
        TilePipe::await<WG>(it, it + 1 < tiles, copy);
        float s[MT][BK / 8][4];
        unsigned int pf[MT][BK / KS][4];
        // the softmax of a block of rows: S's scale and mask, P = 2^(S - m) with O and l rescaled, P packed
        auto softmax = [&](int mt) {
            const int r0 = q0 + STEP * mt;
            scale_scores<T, BK / 8, false>(s[mt], scale2, allowed, r0, j0, allowed.whole(r0, 16, j0, BK));
            online_softmax<BK / 8, D / 8>(s[mt], m[mt], l[mt], o[mt]);
            pack_a<T, BK / 8>(pf[mt], s[mt]);
        };
        if constexpr (WG) {   // a block's softmax behind the next block's S or the block before's P V
            behind_the_products<MT>(
                [&](int mt) {
                    tile_product<T, 1, BK / 8, D / KS, D, true, WG, SET | ON>(&s[mt], &qf[mt], &Ks[buf][0][0]);
                },
                [&](int mt) {
                    tile_settle<1, BK / 8, WG>(&s[mt]);   // S = Q K^T
                    softmax(mt);
                },
                [&](int mt) { tile_product<T, 1, D / 8, BK / KS, D, false, WG, ON>(&o[mt], &pf[mt], &Vs[buf][0][0]); });
            tile_settle<MT, D / 8, WG>(o);   // O += P V
        } else {   // mma.sync: one B fragment read serves the MT blocks' products
            tile_product<T, MT, BK / 8, D / KS, D, true, WG, SET>(s, qf, &Ks[buf][0][0]);   // S = Q K^T
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) softmax(mt);
            tile_product<T, MT, D / 8, BK / KS, D, false, WG>(o, pf, &Vs[buf][0][0]);       // O += P V
        }
        TilePipe::release();
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r0 = q0 + STEP * mt;
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l[mt][r] = quad_sum(l[mt][r]);
            inv[r] = l[mt][r] > 0.f ? 1.f / l[mt][r] : 0.f;
            const int i = r0 + g + r * 8;
            if (t == 0 && i < Tq)   // m is in log2 units
                LSE[static_cast<long long>(n) * Tq + i] = l[mt][r] > 0.f ? m[mt][r] * MT_LN2 + log_(l[mt][r]) : MT_INF;
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][dt][e] *= inv[e / 2];
        store_rows<T, D>(O + o_off, o_st, r0, Tq, o[mt], 1.f);
    }
}

// dQ, and delta_i = dO_i . O_i for the dK/dV pass (which runs after this one): a block per
// (batch, head) pair and 64 MT queries (16 MT a warp), walking over tiles of BK keys.
template <typename T, int D, int BK, int MT, bool WG = false>
__global__ void __launch_bounds__(128, 1)
flash_attention_tc_backward_dq(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                               const T* __restrict__ O, const T* __restrict__ dO, const float* __restrict__ LSE,
                               float* __restrict__ Delta, T* __restrict__ dQ, const unsigned char* __restrict__ mask,
                               long long mask_sb, long long mask_sh, long long mask_sq, long long mask_sk,
                               int H, int Tq, int Tk, long long q_sb, long long q_sh, long long q_st,
                               long long o_sb, long long o_sh, long long o_st, long long k_sb, long long k_sh,
                               long long k_st, long long dk_sb, long long dk_sh, long long dk_st, int causal,
                               float scale) {
    constexpr int KS = TcMath<T>::KS, PITCH = TileLayout<T, D, WG>::PITCH, ROWS = 64 * MT;   // the block's queries
    constexpr int STEP = WG ? 64 : 16;                 // from one of the warp's blocks of 16 rows to the next
    __shared__ __align__(16) T Ks[2][BK][PITCH];   // keys (for Q K^T and dS K)
    __shared__ __align__(16) T Vs[2][BK][PITCH];   // values (for dO V^T)
    static_assert(sizeof(Ks) + sizeof(Vs) <= 48 * 1024, "two buffers fit in the static 48 KB");
    const TcPlace at = tc_place(blockIdx.x, blockIdx.y, mask, mask_sb, mask_sh, mask_sq, mask_sk, H, Tq,
                                Tk, q_sb, q_sh, o_sb, o_sh, k_sb, k_sh, dk_sb, dk_sh, causal, MT, WG);
    const int n = at.n, g = at.g, t = at.t, block_q0 = at.block_row0, q0 = at.row0;   // rows are queries
    const AllowedKeys& allowed = at.allowed;
    const long long q_off = at.q_off, o_off = at.o_off, k_off = at.k_off;
    const float scale2 = scale * MT_LOG2E;   // scores and lse in log2 units: p = 2^(s - lse)

    unsigned int qf[MT][D / KS][4], dof[MT][D / KS][4];
    float lse[MT][2], delta[MT][2], dq[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r0 = q0 + STEP * mt;
        load_rows_a<T, D>(qf[mt], Q + q_off, q_st, r0, Tq);
        load_rows_a<T, D>(dof[mt], dO + o_off, o_st, r0, Tq);
        row_dots<T, D>(delta[mt], dO + o_off, O + o_off, o_st, r0, Tq);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = r0 + g + r * 8;
            lse[mt][r] = i < Tq ? LSE[static_cast<long long>(n) * Tq + i] * MT_LOG2E : MT_INF;   // in log2 units
            if (t == 0 && i < Tq) Delta[static_cast<long long>(n) * Tq + i] = delta[mt][r];
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) dq[mt][dt][0] = dq[mt][dt][1] = dq[mt][dt][2] = dq[mt][dt][3] = 0.f;
    }

    const int k_end = (causal && block_q0 + ROWS < Tk) ? block_q0 + ROWS : Tk;
    const int tiles = (k_end + BK - 1) / BK;
    const KeyValueTiles<T, BK, D, WG> copy{Ks, Vs, K + k_off, V + k_off, k_st, Tk};
    if (tiles > 0) TilePipe::begin(copy);
    for (int it = 0; it < tiles; ++it) {
        const int j0 = it * BK, buf = it % 2;
        TilePipe::await<WG>(it, it + 1 < tiles, copy);
        float s[MT][BK / 8][4], dp[MT][BK / 8][4];
        unsigned int dsf[MT][BK / KS][4];
        // dS of a block of rows from its S and dP, packed
        auto scores_gradient = [&](int mt) {
            const int r0 = q0 + STEP * mt;
            scale_scores<T, BK / 8, false>(s[mt], scale2, allowed, r0, j0, allowed.whole(r0, 16, j0, BK));
#pragma unroll
            for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float p = exp2_(s[mt][nt][e] - lse[mt][e / 2]);   // 0 where not allowed (s = -inf)
                    dp[mt][nt][e] = p * (dp[mt][nt][e] - delta[mt][e / 2]);  // dS
                }
            pack_a<T, BK / 8>(dsf[mt], dp[mt]);
        };
        if constexpr (WG) {   // a block's dS behind the next block's S and dP or the block before's dS K
            behind_the_products<MT>(
                [&](int mt) {   // S and dP in one group
                    tile_product<T, 1, BK / 8, D / KS, D, true, WG, SET | JOIN>(&s[mt], &qf[mt], &Ks[buf][0][0]);
                    tile_product<T, 1, BK / 8, D / KS, D, true, WG, SET | ON>(&dp[mt], &dof[mt], &Vs[buf][0][0]);
                },
                [&](int mt) {
                    tile_settle<1, BK / 8, WG>(&s[mt]);    // S = Q K^T
                    tile_settle<1, BK / 8, WG>(&dp[mt]);   // dP = dO V^T
                    scores_gradient(mt);
                },
                [&](int mt) {
                    tile_product<T, 1, D / 8, BK / KS, D, false, WG, ON>(&dq[mt], &dsf[mt], &Ks[buf][0][0]);
                });
            tile_settle<MT, D / 8, WG>(dq);   // dQ += dS K
        } else {   // mma.sync: one B fragment read serves the MT blocks' products
            tile_product<T, MT, BK / 8, D / KS, D, true, WG, SET>(s, qf, &Ks[buf][0][0]);      // S = Q K^T
            tile_product<T, MT, BK / 8, D / KS, D, true, WG, SET>(dp, dof, &Vs[buf][0][0]);    // dP = dO V^T
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) scores_gradient(mt);
            tile_product<T, MT, D / 8, BK / KS, D, false, WG>(dq, dsf, &Ks[buf][0][0]);       // dQ += dS K
        }
        TilePipe::release();
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) store_rows<T, D>(dQ + o_off, o_st, q0 + STEP * mt, Tq, dq[mt], scale);
}

// Before the one-pass backward (the dK/dV kernel with DQ): delta_i = dO_i . O_i, which the dQ pass
// computes otherwise, and 0 in the turns of the tiles of BQ queries that start among the block's 64
// queries; block (0, 0) also sets the start-order counter after the turns to 0. A block per
// (batch, head) pair and 64 queries, 16 a warp.
template <typename T, int D, int BQ>
__global__ void __launch_bounds__(128)
flash_attention_tc_delta(const T* __restrict__ O, const T* __restrict__ dO, float* __restrict__ Delta,
                         int* __restrict__ turns, int H, int Tq, long long o_sb, long long o_sh, long long o_st) {
    const int n = blockIdx.x, lane = threadIdx.x % MT_WARP, row0 = blockIdx.y * 64 + 16 * (threadIdx.x / MT_WARP);
    const long long off = (n / H) * o_sb + (n % H) * o_sh;
    float delta[2];
    row_dots<T, D>(delta, dO + off, O + off, o_st, row0, Tq);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = row0 + lane / 4 + 8 * r;
        if (lane % 4 == 0 && i < Tq) Delta[static_cast<long long>(n) * Tq + i] = delta[r];
    }
    const int tiles = (Tq + BQ - 1) / BQ;
    const int tile = blockIdx.y * (64 / BQ) + threadIdx.x;
    if (threadIdx.x < 64 / BQ && tile < tiles) turns[static_cast<long long>(n) * tiles + tile] = 0;
    if (n == 0 && blockIdx.y == 0 && threadIdx.x == 0) turns[static_cast<long long>(gridDim.x) * tiles] = 0;
}

// The one-pass backward (DQ below) adds each key block's share of dQ to a float32 sum, dQ_i +=
// sum_j dS_ij K_j over the block's 64 keys, for one tile of BQ queries. The block holds dS^T (its keys
// as rows), and dQ = dS K wants the queries as A's rows: dS^T goes through shared memory (dSs, rows
// are keys, SPITCH values a row) and is read back transposed, with the keys from Ks (KPITCH a row).
// The 4 warps split the BQ x D product: BQ / 16 blocks of 16 queries, each block's D columns shared
// by 64 / BQ warps. operator() leaves the warp's sums in acc: NT accumulator tiles of 8 columns,
// the first at column c0, for queries m0 .. m0 + 15 of the tile.
template <typename T, int D, int BQ, int SPITCH, int KPITCH>
struct DqShare {
    static constexpr int KS = TcMath<T>::KS, RB = BQ / 16, NT = D * RB / 32;   // NT tiles of 8 columns a warp
    static_assert(RB >= 1 && 4 % RB == 0, "a tile of 16, 32 or 64 queries");
    int m0, c0;   // the warp's first query of the tile, and first column
    __device__ __forceinline__ DqShare() {
        const int warp = threadIdx.x / MT_WARP;
        m0 = 16 * (warp % RB);
        c0 = 8 * NT * (warp / RB);
    }
    __device__ __forceinline__ void operator()(float (*acc)[NT][4], const T* dSs, const T* Ks) const {
        unsigned int af[1][64 / KS][4];
#pragma unroll
        for (int kk = 0; kk < 64 / KS; ++kk) TcMath<T>::a_frag_t(af[0][kk], dSs, SPITCH, m0, kk * KS);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) acc[0][nt][0] = acc[0][nt][1] = acc[0][nt][2] = acc[0][nt][3] = 0.f;
        mma_shared<T, 1, NT, 64 / KS, KPITCH, false>(acc, af, Ks + c0);
    }
};

// dK and dV: a block per (batch, head) pair and 64 keys, walking over tiles of BQ queries. The
// warp computes the transposed products (keys as rows): S^T = K Q^T, dP^T = V dO^T,
// dV += P^T dO, dK += dS^T Q.
//
// DQ: the whole backward in this one pass (FlashAttention-2's loop, 5 products a tile where the
// two passes take 7: S and dP are not computed a second time for dQ), with delta computed before it
// (flash_attention_tc_delta). For each tile of queries the block also computes its share of dQ
// (DqShare), and the key blocks of one (batch, head) add their shares in the order of their index:
// key block kb (a place the block takes in the order blocks start, not its blockIdx) waits for turn
// kb on the tile's flag (turns[n][tile], set to 0 by flash_attention_tc_delta), adds its share to
// what blocks 0 .. kb - 1 left in dQ_sum (float32, (N, Tq, D)), and passes the turn on (common.cuh's
// await_turn; a wait that gives up is reported in `stalls`, int[5], which the host reads). Block 0
// writes its share without reading, and the tile's last block (the last key block, or with `causal`
// the last one that reaches the tile) writes dQ itself, scaled and in T. The sums are so added in
// one order at every run: the result is deterministic, as the two passes' is.
template <typename T, int D, int BQ, bool WG = false, bool DQ = false>
__global__ void __launch_bounds__(128, 1)
flash_attention_tc_backward_dkdv(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                                 const T* __restrict__ dO, const float* __restrict__ LSE,
                                 const float* __restrict__ Delta, T* __restrict__ dK, T* __restrict__ dV,
                                 T* __restrict__ dQ, float* __restrict__ dQ_sum, int* __restrict__ turns,
                                 int* __restrict__ stalls,
                                 const unsigned char* __restrict__ mask, long long mask_sb, long long mask_sh,
                                 long long mask_sq, long long mask_sk, int H, int Tq, int Tk,
                                 long long q_sb, long long q_sh, long long q_st,
                                 long long o_sb, long long o_sh, long long o_st, long long k_sb, long long k_sh,
                                 long long k_st, long long dk_sb, long long dk_sh, long long dk_st, int causal,
                                 float scale) {
    constexpr int KS = TcMath<T>::KS, PITCH = TileLayout<T, D, WG>::PITCH;
    // DQ: the block's keys and a tile's dS^T in mma.sync's padded rows (read by ldmatrix, also with WG)
    constexpr int KPITCH = TileLayout<T, D, false>::PITCH, SPITCH = TileLayout<T, BQ, false>::PITCH;
    __shared__ __align__(16) T Qs[2][BQ][PITCH];    // queries
    __shared__ __align__(16) T dOs[2][BQ][PITCH];   // and their output gradients
    __shared__ __align__(16) float lse_s[2][BQ], delta_s[2][BQ];
    __shared__ __align__(16) T Ks[DQ ? 64 : 1][DQ ? KPITCH : 8];
    __shared__ __align__(16) T dSs[DQ ? 64 : 1][DQ ? SPITCH : 8];
    static_assert(sizeof(Qs) + sizeof(dOs) + sizeof(lse_s) + sizeof(delta_s) + sizeof(Ks) + sizeof(dSs) <= 48 * 1024,
                  "two buffers fit in 48 KB");
    // DQ: key block kb waits for key blocks 0 .. kb - 1 of its (batch, head), so the blocks take their
    // places in the order they start (common.cuh's start_order; the counter follows the turns)
    __shared__ int started;
    int place_n = blockIdx.x, kb = blockIdx.y;
    if constexpr (DQ) {
        const int order = start_order(turns + static_cast<long long>(gridDim.x) * ((Tq + BQ - 1) / BQ), started);
        place_n = order % gridDim.x;
        kb = order / gridDim.x;
    }
    const TcPlace at = tc_place(place_n, kb, mask, mask_sb, mask_sh, mask_sq, mask_sk, H, Tq, Tk, q_sb, q_sh, o_sb,
                                o_sh, k_sb, k_sh, dk_sb, dk_sh, causal);
    const int n = at.n, g = at.g, t = at.t, block_k0 = at.block_row0, k0 = at.row0;   // rows are keys
    const AllowedKeys& allowed = at.allowed;
    const long long q_off = at.q_off, o_off = at.o_off, k_off = at.k_off, dk_off = at.dk_off;

    const float scale2 = scale * MT_LOG2E;   // scores in log2 units: p = 2^(s - lse log2 e)
    unsigned int kf[D / KS][4], vf[D / KS][4];
    load_rows_a<T, D>(kf, K + k_off, k_st, k0, Tk);
    // V's fragments are held like K's, except at head size 128, where holding both would spill
    // registers: there they are read again for each tile (from the cache)
    constexpr bool HOLD_V = D <= 64;
    if (HOLD_V) load_rows_a<T, D>(vf, V + k_off, k_st, k0, Tk);
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.f;

    const int i_begin = causal ? block_k0 / BQ * BQ : 0;   // causal: no query before the block's first key
    const int tiles = Tq > i_begin ? (Tq - i_begin + BQ - 1) / BQ : 0;
    const bool wide = rows_aligned_16(Q + q_off, q_st) && rows_aligned_16(dO + o_off, o_st);
    auto copy = [&](int it, int buf) {
        const int i0 = i_begin + it * BQ;
        stage_rows<T, BQ, D, WG>(&Qs[buf][0][0], Q + q_off, q_st, i0, Tq, wide);
        stage_rows<T, BQ, D, WG>(&dOs[buf][0][0], dO + o_off, o_st, i0, Tq, wide);
        for (int r = threadIdx.x; r < BQ; r += 128) {   // zeros past Tq, where no score is allowed
            const long long i = static_cast<long long>(n) * Tq + (i0 + r < Tq ? i0 + r : 0);
            cp_async<4>(&lse_s[buf][r], LSE + i, i0 + r < Tq);
            cp_async<4>(&delta_s[buf][r], Delta + i, i0 + r < Tq);
        }
    };
    if (DQ && tiles > 0) {   // the block's keys, for dQ: landed with the first tile
        stage_rows<T, 64, D>(&Ks[0][0], K + k_off, k_st, block_k0, Tk, rows_aligned_16(K + k_off, k_st));
        cp_async_commit();
    }
    if (tiles > 0) TilePipe::begin(copy);
    for (int it = 0; it < tiles; ++it) {
        const int i0 = i_begin + it * BQ, buf = it % 2;
        TilePipe::await<WG>(it, it + 1 < tiles, copy);
        float st[BQ / 8][4], dpt[BQ / 8][4];
        // On wgmma each product runs behind the warps' work that does not need it: P^T's exponentials
        // behind dP^T, dS^T behind dV's product, and (DQ) the share of dQ behind dK's
        tile_product<T, 1, BQ / 8, D / KS, D, true, WG, SET | ON>(&st, &kf, &Qs[buf][0][0]);   // S^T = K Q^T
        if (!HOLD_V) load_rows_a<T, D>(vf, V + k_off, k_st, k0, Tk);
        tile_product<T, 1, BQ / 8, D / KS, D, true, WG, SET | ON>(&dpt, &vf, &dOs[buf][0][0]);  // dP^T = V dO^T
        tile_wait<1, WG>();
        tile_settle<1, BQ / 8, WG>(&st);
        scale_scores<T, BQ / 8, true>(st, scale2, allowed, k0, i0, allowed.whole(i0, BQ, k0, 16));
#pragma unroll
        for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {   // P^T, 0 where not allowed
                const int c = nt * 8 + TcMath<T>::col(t, e % 2);   // query i0 + c
                st[nt][e] = exp2_(fmaf(lse_s[buf][c], -MT_LOG2E, st[nt][e]));
            }
        unsigned int pf[BQ / KS][4], dsf[BQ / KS][4];
        pack_a<T, BQ / 8>(pf, st);
        tile_product<T, 1, D / 8, BQ / KS, D, false, WG, ON>(&dv, &pf, &dOs[buf][0][0]);   // dV += P^T dO
        tile_wait<1, WG>();
        tile_settle<1, BQ / 8, WG>(&dpt);
#pragma unroll
        for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)   // dS^T
                dpt[nt][e] = st[nt][e] * (dpt[nt][e] - delta_s[buf][nt * 8 + TcMath<T>::col(t, e % 2)]);
        pack_a<T, BQ / 8>(dsf, dpt);
        tile_product<T, 1, D / 8, BQ / KS, D, false, WG, ON>(&dk, &dsf, &Qs[buf][0][0]);   // dK += dS^T Q
        if constexpr (DQ) {
            store_rows<T, BQ>(&dSs[0][0], SPITCH, k0 - block_k0, 64, dpt, 1.f);   // dS^T, rounded as dK took it
            __syncthreads();
            using Share = DqShare<T, D, BQ, SPITCH, KPITCH>;
            const Share share;
            float dq[1][Share::NT][4];
            share(dq, &dSs[0][0], &Ks[0][0]);   // this block's part of dQ for queries [i0, i0 + BQ)
            // the tile's last key block: with `causal`, the last that starts at or before query i0
            const int blocks = gridDim.y, last = causal && i0 / 64 < blocks ? i0 / 64 : blocks - 1;
            int* flag = turns + static_cast<long long>(n) * ((Tq + BQ - 1) / BQ) + i0 / BQ;
            if (kb > 0) await_turn(flag, kb, stalls, n, i0 / BQ);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = i0 + share.m0 + g + 8 * half;
                if (i >= Tq) continue;
#pragma unroll
                for (int nt = 0; nt < Share::NT; ++nt) {
                    const int c = share.c0 + nt * 8;   // the tile's first column: TcMath::store places the pair
                    float v[2] = {dq[0][nt][2 * half], dq[0][nt][2 * half + 1]};
                    // dQ_sum is null where one key block is all (then kb = last = 0: never used)
                    const long long at_sum = (static_cast<long long>(n) * Tq + i) * D + c + 2 * t;
                    if (kb > 0) {
                        float before[2];
                        load_l2(before, dQ_sum + at_sum);
                        v[0] += before[0];
                        v[1] += before[1];
                    }
                    if (kb == last)
                        TcMath<T>::store(dQ + at.o_off + i * o_st + c, t, v[0] * scale, v[1] * scale);
                    else
                        *reinterpret_cast<Pack<float, 2>*>(dQ_sum + at_sum) = Pack<float, 2>{{v[0], v[1]}};
                }
            }
            if (kb < last) pass_turn(flag, kb + 1);
        }
        tile_wait<0, WG>();
        tile_settle<1, D / 8, WG>(&dv);
        tile_settle<1, D / 8, WG>(&dk);
        TilePipe::release();
    }
    store_rows<T, D>(dK + dk_off, dk_st, k0, Tk, dk, scale);
    store_rows<T, D>(dV + dk_off, dk_st, k0, Tk, dv, 1.f);
}
