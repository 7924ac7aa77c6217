// Helpers shared by every kernel in this folder.
//
// No CUDA headers are included, so the same text compiles under NVRTC (what CuPy's
// RawModule uses at run time), under nvcc (tests/minitensor/cuda/test_sources.py) and, on the CPU,
// under the host C++ compiler with emulator.h in front (minitensor/cuda/emulator.py, which
// defines MT_EMULATOR). The launchers in Python paste this file in place of the
// `#include "common.cuh"` line, so CuPy's kernel cache keys on the full text.
#pragma once

// Dynamic shared memory: `extern __shared__ T name[]` on the GPU; on the emulator, the
// block's buffer that the launch sized with shared_mem.
#ifdef MT_EMULATOR
#define MT_DYNAMIC_SHARED(T, name) T* const name = reinterpret_cast<T*>(::mt_emu::dynamic_shared())
#else
#define MT_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

#define MT_INF __int_as_float(0x7f800000)
#define MT_WARP 32
#define MT_FULL_MASK 0xffffffffu

// ---------------------------------------------------------------- storage and compute types
// Half precision values are stored as 16 raw bits. Arithmetic runs in Acc<T>::type:
// float for float, f16 and bf16 storage; double for double (the float64 instantiations
// exist so that a float64 gradcheck can go through the kernels themselves).
struct f16  { unsigned short bits; };
struct bf16 { unsigned short bits; };

template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ float widen(f16 v) {
#ifdef MT_EMULATOR
    return ::mt_emu::half_bits_to_float(v.bits);  // the same conversion in C++, bit for bit
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
#endif
}
__device__ __forceinline__ float widen(bf16 v) {
    return __uint_as_float(static_cast<unsigned int>(v.bits) << 16);  // bf16 is float's top half
}

template <typename T> __device__ __forceinline__ T narrow(typename Acc<T>::type v);
template <> __device__ __forceinline__ float narrow<float>(float v) { return v; }
template <> __device__ __forceinline__ double narrow<double>(double v) { return v; }
template <> __device__ __forceinline__ f16 narrow<f16>(float v) {
    f16 h;
#ifdef MT_EMULATOR
    h.bits = ::mt_emu::float_to_half_bits_rn(v);
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
#endif
    return h;
}
template <> __device__ __forceinline__ bf16 narrow<bf16>(float v) {
    unsigned int u = __float_as_uint(v);
    bf16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {   // NaN stays NaN (a quiet one)
        h.bits = 0x7fc0;
        return h;
    }
    u += 0x7fffu + ((u >> 16) & 1u);          // round to nearest, ties to even
    h.bits = static_cast<unsigned short>(u >> 16);
    return h;
}

// the fast hardware approximations in float; the exact functions in double
__device__ __forceinline__ float exp_(float v) { return __expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }
__device__ __forceinline__ float log_(float v) { return __logf(v); }
__device__ __forceinline__ double log_(double v) { return log(v); }
// 2^v, the hardware's approximation (ex2.approx, the instruction under __expf): where a kernel
// works in log2 units, one multiply-add and this, against __expf's multiply, add and ex2
#define MT_LOG2E 1.4426950408889634f
#define MT_LN2 0.6931471805599453f
#ifdef MT_EMULATOR
__device__ __forceinline__ float exp2_(float v) { return std::exp2(v); }
#else
__device__ __forceinline__ float exp2_(float v) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}
#endif
__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }
__device__ __forceinline__ float max_(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double max_(double a, double b) { return fmax(a, b); }

// P consecutive values of storage type T moved as one aligned load or store: 16 bytes where
// P = 16 / sizeof(T) (the launchers' build.PACK), which keeps more bytes in flight per thread
template <typename T, int P>
struct alignas(sizeof(T) * P) Pack { T v[P]; };

// ---------------------------------------------------------------- warp reductions
// Butterfly (xor) shuffles: after log2(32) = 5 rounds every lane holds the result.
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
    for (int offset = MT_WARP / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(MT_FULL_MASK, v, offset);
    return v;
}

template <typename A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
    for (int offset = MT_WARP / 2; offset > 0; offset /= 2)
        v = max_(v, __shfl_xor_sync(MT_FULL_MASK, v, offset));
    return v;
}

// ---------------------------------------------------------------- attention masks
// A bool mask broadcastable to the scores (B, H, Tq, Tk) is read through its broadcast
// strides (in elements, 0 on a broadcast axis), so a (B, 1, 1, Tk) padding mask or a
// (1, 1, Tq, Tk) causal one is never materialised at full size. True = may attend.
// Kernels take the pointer and the four strides as plain arguments and build the view.
struct MaskView {
    const unsigned char* data;   // nullptr: no mask, every key allowed
    long long stride_b, stride_h, stride_q, stride_k;

    __device__ __forceinline__ const unsigned char* row(int b, int h, int i) const {
        if (data == nullptr) return nullptr;
        return data + b * stride_b + h * stride_h + static_cast<long long>(i) * stride_q;
    }
    __device__ __forceinline__ bool allows(const unsigned char* row_ptr, int j) const {
        return data == nullptr || row_ptr[static_cast<long long>(j) * stride_k] != 0;
    }
};

// ---------------------------------------------------------------- many arrays in one launch
// A launcher passes a table of the arrays' device addresses and `starts`, the running total of
// their sizes (tensors + 1 entries): the arrays laid end to end make one index range [0, total).
// tensor_of gives the array that entry i of that range falls in: the last p with
// starts[p] <= i, by binary search (empty arrays, whose starts are equal, are never chosen).
__device__ __forceinline__ int tensor_of(const long long* starts, int tensors, long long i) {
    int lo = 0, hi = tensors - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (starts[mid] <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// ---------------------------------------------------------------- counter-based random bits
// Philox4x32-10 (Salmon et al., 2011, "Parallel random numbers: as easy as 1, 2, 3"): four
// 32-bit words from a 128-bit counter and a 64-bit key, the same on every device and in any
// order of threads. The dropout kernels keep an entry when the word's top 24 bits are at least
// the host's threshold = ceil(p * 2^24).
__device__ __forceinline__ void philox_round(unsigned int c[4], const unsigned int k[2]) {
    const unsigned long long p0 = 0xD2511F53ull * c[0];
    const unsigned long long p1 = 0xCD9E8D57ull * c[2];
    const unsigned int hi0 = static_cast<unsigned int>(p0 >> 32), lo0 = static_cast<unsigned int>(p0);
    const unsigned int hi1 = static_cast<unsigned int>(p1 >> 32), lo1 = static_cast<unsigned int>(p1);
    c[0] = hi1 ^ c[1] ^ k[0];
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k[1];
    c[3] = lo0;
}

// Philox4x32-10 of the 128-bit counter c under the 64-bit key k, in place in c.
__device__ __forceinline__ void philox4x32_10(unsigned int c[4], unsigned int k0, unsigned int k1) {
    unsigned int k[2] = {k0, k1};
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r) {
            k[0] += 0x9E3779B9u;
            k[1] += 0xBB67AE85u;
        }
        philox_round(c, k);
    }
}

// The four words at counter (ctr, 0) under key `seed`, into c.
__device__ __forceinline__ void philox_at(unsigned int c[4], unsigned long long ctr, unsigned long long seed) {
    c[0] = static_cast<unsigned int>(ctr);
    c[1] = static_cast<unsigned int>(ctr >> 32);
    c[2] = 0u;
    c[3] = 0u;
    philox4x32_10(c, static_cast<unsigned int>(seed), static_cast<unsigned int>(seed >> 32));
}

// ---------------------------------------------------------------- 16-bit pairs, as fragments hold them
// Two adjacent 16-bit values as one 32-bit register (the lower index in the low half), read from
// memory (4-byte aligned: an even element index of an aligned row) or made from two floats.
template <typename T>
__device__ __forceinline__ unsigned int pair_at(const T* p) { return *reinterpret_cast<const unsigned int*>(p); }

// one value of a pair, as float
template <typename T>
__device__ __forceinline__ float half_at(unsigned int pair, int high) {
    T h;
    h.bits = static_cast<unsigned short>(high ? pair >> 16 : pair & 0xffffu);
    return widen(h);
}

// two floats rounded to T, lo in the low half: on sm_80 and newer one cvt.rn.{bf16,f16}x2.f32 (in
// bf16 the integer rounding of narrow<bf16> took about ten instructions a pair); the same
// rounding to nearest even, NaN kept a NaN
template <typename T>
__device__ __forceinline__ unsigned int pack_pair(float lo, float hi) {
    return static_cast<unsigned int>(narrow<T>(lo).bits) | (static_cast<unsigned int>(narrow<T>(hi).bits) << 16);
}
#if !defined(MT_EMULATOR) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <>
__device__ __forceinline__ unsigned int pack_pair<bf16>(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));   // the first source goes high
    return r;
}
template <>
__device__ __forceinline__ unsigned int pack_pair<f16>(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#endif

// ---------------------------------------------------------------- tensor-core products (one warp)
// D = A B + C on the tensor cores, through PTX's mma.sync rather than the WMMA API: mma.sync's
// fragments have a documented register layout (PTX ISA, "Matrix fragments for mma.m16n8k16"
// and "... mma.m16n8k8"), so a kernel can apply a softmax to the accumulator fragment in
// registers, as FlashAttention-2 does, where WMMA's layout is opaque and would need a round
// trip through shared memory; and the emulator below can model each lane's registers exactly.
//
// Lane l = 4g + t (g = l / 4, t = l % 4) holds, with a pair of 16-bit values per 32-bit
// register (the lower index in the low half):
//   m16n8k16 (f16, bf16): a[0] = A[g][2t, 2t+1]    a[1] = A[g+8][2t, 2t+1]
//                         a[2] = A[g][2t+8, 2t+9]  a[3] = A[g+8][2t+8, 2t+9]
//                         b[0] = B[2t, 2t+1][g]    b[1] = B[2t+8, 2t+9][g]
//   m16n8k8 (tf32, one value per register):
//                         a[0] = A[g][t]  a[1] = A[g+8][t]  a[2] = A[g][t+4]  a[3] = A[g+8][t+4]
//                         b[0] = B[t][g]  b[1] = B[t+4][g]
//   C and D (float):      c[0], c[1] = C[g][2t, 2t+1]    c[2], c[3] = C[g+8][2t, 2t+1]
// Every lane of the warp must call it together (mma.sync is ".aligned").
//
// On the CPU emulator the product is a model: the warp meets once (emulator.h's warp_gather, as
// an .aligned instruction needs every lane), each lane reads the rows of A and the columns of B
// its outputs need from the lanes that hold them, then adds the products to C in float in the
// order k = 0, 1, ... A tensor core
// adds them in an order of its own, so the two agree to float rounding, not bit for bit.
// MT_HAS_TENSOR_CORES is defined where these products exist: the emulator, and sm_80 and newer.
#ifdef MT_EMULATOR
#define MT_HAS_TENSOR_CORES 1

template <typename T>
__device__ __forceinline__ void mma_16x8x16(float d[4], const unsigned int a[4], const unsigned int b[2],
                                            const float c[4]) {
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
    const unsigned int mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const unsigned int* all = ::mt_emu::warp_gather("mma.sync.m16n8k16", MT_FULL_MASK, mine, 6);
    const int W = ::mt_emu::kGatherWords;           // lane l's words start at all[W * l]
    float arow[2][16], bcol[2][16];   // A's rows g and g + 8; B's columns 2t and 2t + 1
    for (int src = 0; src < 4; ++src) {          // the lanes 4g + src hold A's rows g, g + 8
        for (int r = 0; r < 4; ++r) {
            const unsigned int v = all[W * (4 * g + src) + r];
            const int row = r % 2, k = 2 * src + (r / 2) * 8;
            arow[row][k] = half_at<T>(v, 0);
            arow[row][k + 1] = half_at<T>(v, 1);
        }
        for (int j = 0; j < 2; ++j)              // the lanes 4n + src hold B's column n
            for (int r = 0; r < 2; ++r) {
                const unsigned int v = all[W * (4 * (2 * t + j) + src) + 4 + r];
                const int k = 2 * src + r * 8;
                bcol[j][k] = half_at<T>(v, 0);
                bcol[j][k + 1] = half_at<T>(v, 1);
            }
    }
    for (int i = 0; i < 4; ++i) {
        float acc = c[i];
        for (int k = 0; k < 16; ++k) acc += arow[i / 2][k] * bcol[i % 2][k];
        d[i] = acc;
    }
}

__device__ __forceinline__ void mma_16x8x8_tf32(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                const float c[4]) {
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
    const unsigned int mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const unsigned int* all = ::mt_emu::warp_gather("mma.sync.m16n8k8", MT_FULL_MASK, mine, 6);
    const int W = ::mt_emu::kGatherWords;
    float arow[2][8], bcol[2][8];
    for (int src = 0; src < 4; ++src) {
        for (int r = 0; r < 4; ++r) arow[r % 2][src + (r / 2) * 4] = __uint_as_float(all[W * (4 * g + src) + r]);
        for (int j = 0; j < 2; ++j)
            for (int r = 0; r < 2; ++r) bcol[j][src + r * 4] = __uint_as_float(all[W * (4 * (2 * t + j) + src) + 4 + r]);
    }
    for (int i = 0; i < 4; ++i) {
        float acc = c[i];
        for (int k = 0; k < 8; ++k) acc += arow[i / 2][k] * bcol[i % 2][k];
        d[i] = acc;
    }
}

// float to TF32 (10 mantissa bits) as cvt.rna.tf32.f32 rounds: to nearest, ties away from zero
__device__ __forceinline__ unsigned int to_tf32(float v) {
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  // inf and NaN as they are
    return u;
}
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // tensor cores with bf16 and tf32: sm_80 and newer
#define MT_HAS_TENSOR_CORES 1
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float d[4], const unsigned int a[4], const unsigned int b[2],
                                            const float c[4]);
template <>
__device__ __forceinline__ void mma_16x8x16<bf16>(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                  const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
template <>
__device__ __forceinline__ void mma_16x8x16<f16>(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                 const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ void mma_16x8x8_tf32(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ unsigned int to_tf32(float v) {
    unsigned int u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(v));
    return u;
}
#endif

// ---------------------------------------------------------------- fragments from shared memory (one warp)
// ldmatrix_x2<TRANS>(r, row): two 8 x 8 matrices of 16-bit values from shared memory, one per
// register, in the mma.sync B-fragment layout (PTX ISA, "ldmatrix"). Lanes 8i .. 8i + 7 (i = 0, 1)
// give the addresses of matrix i's rows 0..7 (each row 8 consecutive values, 16-byte aligned;
// the other lanes' addresses are not read); lane l = 4g + t then receives in r[i]
//   TRANS = false:  M_i[g][2t, 2t+1]     (a row of M_i: B's column g when the rows are B's columns)
//   TRANS = true:   M_i[2t, 2t+1][g]     (a column of M_i: B's column g when the rows are B's rows)
// with the lower index in the low half: one mma.sync m16n8k16's b[0] and b[1] in one instruction,
// and with TRANS from a row-major tile, with no transposed copy.
//
// On the emulator the warp meets once to hand round the row addresses (as for mma.sync); each
// lane then reads its own values, so the race tracker sees every read, made by the lane that
// receives it.
#ifdef MT_EMULATOR
template <bool TRANS, typename T>
__device__ __forceinline__ void ldmatrix_x2(unsigned int r[2], const T* row) {
    static_assert(sizeof(T) == 2, "ldmatrix moves 16-bit values");
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
    const unsigned long long p = reinterpret_cast<unsigned long long>(row);
    if (lane < 16 && p % 16 != 0)
        ::mt_emu::fail("%s: ldmatrix row address %p is not 16-byte aligned", ::mt_emu::where(), static_cast<const void*>(row));
    const unsigned int mine[2] = {static_cast<unsigned int>(p), static_cast<unsigned int>(p >> 32)};
    const unsigned int* all = ::mt_emu::warp_gather("ldmatrix.m8n8.x2", MT_FULL_MASK, mine, 2);
    const int W = ::mt_emu::kGatherWords;
    auto row_of = [&](int i, int k) {   // matrix i's row k, as lane 8i + k gave it
        const unsigned int* w = all + W * (8 * i + k);
        return reinterpret_cast<const T*>(static_cast<unsigned long long>(w[0]) | (static_cast<unsigned long long>(w[1]) << 32));
    };
    for (int i = 0; i < 2; ++i) {
        const T lo = TRANS ? row_of(i, 2 * t)[g] : row_of(i, g)[2 * t];
        const T hi = TRANS ? row_of(i, 2 * t + 1)[g] : row_of(i, g)[2 * t + 1];
        r[i] = static_cast<unsigned int>(lo.bits) | (static_cast<unsigned int>(hi.bits) << 16);
    }
}
#else
template <bool TRANS, typename T>
__device__ __forceinline__ void ldmatrix_x2(unsigned int r[2], const T* row) {
    const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(row));
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}
#endif

// ---------------------------------------------------------------- copies behind the computation (cp.async)
// cp_async<BYTES>(dst, src, valid): copy BYTES (4 or 16, both addresses aligned to it) from global
// src to shared dst without passing through registers, or, with valid false, write BYTES zeros
// (src is then not read). The copies a thread issues between two cp_async_commit() form a group;
// cp_async_wait<N>() waits until at most the N newest of its groups are in flight. The block sees
// a copy after the wait and a __syncthreads. A kernel can so copy the next tile while it computes
// on this one (sm_80 and newer).
//
// On the emulator a copy is made at the wait, not at the issue (emulator.h's cp_async), so a
// destination read too early reads the old bytes, and the race check sees the write at the wait.
#ifdef MT_EMULATOR
template <int BYTES>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
    ::mt_emu::cp_async(dst, src, BYTES, valid ? BYTES : 0);
}
__device__ __forceinline__ void cp_async_commit() { ::mt_emu::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { ::mt_emu::cp_async_wait(N); }
#else
template <int BYTES>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
    static_assert(BYTES == 4 || BYTES == 16, "cp.async copies 4 or 16 bytes here");
    const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
    const int src_bytes = valid ? BYTES : 0;
    if (BYTES == 16)   // .cg: through L2 only (the tile is read once per block)
        asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.cg.shared.global [%0], [g], 16, %2; }"
                     :: "r"(address), "l"(src), "r"(src_bytes) : "memory");
    else
        asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.ca.shared.global [%0], [g], 4, %2; }"
                     :: "r"(address), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
#endif

// ---------------------------------------------------------------- blocks taking turns (a flag in global memory)
// Blocks that add into one float32 sum in global memory get the same sum at every run only if they
// add in a fixed order. await_turn(flag, turn): the block waits until *flag == turn (thread 0 reads
// it with acquire semantics, then a barrier); pass_turn(flag, turn): after a barrier (every thread's
// writes done) and a fence, thread 0 sets *flag = turn for the block whose turn is next. The sums
// written in earlier turns are read with load_l2 (ld.global.cg): an SM's L1 is not kept coherent
// with other SMs' writes. A block may only wait for blocks that started before it, or it could wait
// for one that never starts (waiting blocks filling every SM). CUDA promises no order in which blocks
// start, so a block that waits takes its work from start_order, not from blockIdx: the blocks of
// lower numbers have started, and each waits only for lower numbers still, so the waits end.
//
// The emulator runs blocks one at a time, in blockIdx order (x fastest) or, under
// emulator.block_order("reverse"), the other way round: when a block waits, the flag must already
// hold its turn, and otherwise it fails (on a GPU, it would wait for a block that starts later).
// Its race check (check="race") also fails a thread that touches global memory another block wrote
// unless it waited for a turn that the writer passed on after writing, and has not passed a turn on
// since (emulator.h's track_global).
//
// start_order(counter, slot): the block's number in the order the launch's blocks start, 0, 1, ...
// (*counter is 0 before the launch; thread 0 takes the number, `slot` is a __shared__ int that hands
// it to the block). Every thread of the block calls it.
//
// A wait is bounded: a wrong turn (a bug) would otherwise hang the launch, and the process with it.
// await_turn(flag, turn, stalls, a, b) gives up after MT_TURN_WAIT_NS nanoseconds of the GPU's
// global timer (at once on the emulator, where the turn can only come from a block that starts
// later), or at once when another wait has given up, and reports the first that did in
// stalls[0..4] (int[5], 0 until then): 1, the caller's a and b (which flag), the turn, and what the
// flag held. The block then goes on: what it adds is wrong, the host reads stalls and raises
// (minitensor/cuda/flash_attention.py's StalledTurns), and the later blocks' waits end.
#ifndef MT_TURN_WAIT_NS
#define MT_TURN_WAIT_NS 5000000000ull
#endif
__device__ __forceinline__ void report_stalled_turn(int* stalls, int a, int b, int turn, int held) {
    if (atomicCAS(stalls, 0, 1) != 0) return;   // the first report stays
    atomicExch(stalls + 1, a);
    atomicExch(stalls + 2, b);
    atomicExch(stalls + 3, turn);
    atomicExch(stalls + 4, held);
}
__device__ __forceinline__ int start_order(int* counter, int& slot) {
    if (threadIdx.x == 0) slot = atomicAdd(counter, 1);
    __syncthreads();
    return slot;
}
#ifdef MT_EMULATOR
__device__ __forceinline__ void await_turn(const int* flag, int turn, int* stalls, int a, int b) {
    if (threadIdx.x == 0) {
        const int held = ::mt_emu::turn_held(flag);
        if (held != turn) report_stalled_turn(stalls, a, b, turn, held);
    }
    __syncthreads();
    ::mt_emu::turn_awaited(flag);
}
__device__ __forceinline__ void pass_turn(int* flag, int turn) {
    ::mt_emu::turn_passed();
    __syncthreads();
    if (threadIdx.x == 0) ::mt_emu::turn_give(flag, turn);
}
__device__ __forceinline__ void load_l2(float v[2], const float* p) {
    v[0] = p[0];
    v[1] = p[1];
}
#else
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void await_turn(const int* flag, int turn, int* stalls, int a, int b) {
    if (threadIdx.x == 0) {
        const unsigned long long since = global_ns();
        int now, given_up;
        for (;;) {
            asm volatile("ld.global.acquire.gpu.b32 %0, [%1];" : "=r"(now) : "l"(flag) : "memory");
            if (now == turn) break;
            asm volatile("ld.global.relaxed.gpu.b32 %0, [%1];" : "=r"(given_up) : "l"(stalls) : "memory");
            if (given_up != 0 || global_ns() - since > MT_TURN_WAIT_NS) {
                report_stalled_turn(stalls, a, b, turn, now);
                break;
            }
        }
    }
    __syncthreads();
}
__device__ __forceinline__ void pass_turn(int* flag, int turn) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");   // the block's writes before the flag's
        asm volatile("st.global.relaxed.gpu.b32 [%0], %1;" :: "l"(flag), "r"(turn) : "memory");
    }
}
// two floats (8-byte aligned) through L2
__device__ __forceinline__ void load_l2(float v[2], const float* p) {
    asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(v[0]), "=f"(v[1]) : "l"(p) : "memory");
}
#endif

// ---------------------------------------------------------------- warpgroup products (wgmma, sm_90a)
// wgmma_64xNx16<T, N, B_T>(d, a, b, accumulate): D (64 x N, float) += A (64 x 16) B (16 x N) (D = A B
// where accumulate is false: d's values are not read) for one warpgroup
// (4 consecutive warps, the first a multiple of 4: 128 threads), through Hopper's wgmma.mma_async
// (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"): f16 or bf16 inputs, float
// sums, A from registers and B read by the tensor cores from shared memory through a descriptor.
// Warp w of the group holds rows [16w, 16w + 16) of A and D in the layout of mma.sync m16n8k16
// above: a[4] for the k-step, d[N / 8][4] with tile i holding columns [8i, 8i + 8). So a kernel
// written on mma.sync's fragments takes wgmma by swapping its products: one instruction covers
// 64 rows and N columns, and B no longer passes through the warps' registers (ldmatrix).
//
// B lies in shared memory as "core matrices" of 8 rows x 16 bytes (128 contiguous bytes), with no
// swizzle. A descriptor (wg_desc) holds B's start address and two distances in bytes between core
// matrices: LBO (leading) between neighbours along K, SBO (stride) between neighbours along N.
// With B_T, B is K-major (the rows of a core matrix are B's columns, 8 values of K each):
//   B[k][n] at 16 (n % 8) + SBO (n / 8) + LBO (k / 8) + 2 (k % 8),
// else MN-major, read transposed (.trans; the rows of a core matrix are B's rows):
//   B[k][n] at 16 (k % 8) + LBO (k / 8) + SBO (n / 8) + 2 (n % 8)
// (the canonical no-swizzle layouts of CUTLASS's make_gmma_desc, cute/atom/mma_traits_sm90_gmma.hpp).
//
// The product is asynchronous: wg_fence() before the first product of a batch (after the threads
// wrote their A registers and accumulators), wg_commit() to close a group, wg_wait<N>() until at
// most N groups are in flight, then wg_settle(d) so that no read of d is moved above the wait.
// Shared memory written by the threads (cp.async included) must be fenced for the tensor cores'
// proxy (fence_async_shared(), then a barrier) before a product reads it.
//
// On the emulator: each warp meets once per product to gather its A fragments (as for mma.sync),
// each lane reads its columns of B through the descriptor at the issue (emulator.h's wg_b_at; the
// race tracker sees the reads), and the sums reach d only at the wait (emulator.h's wg_issue): a
// read of d before it sees the old values. At the wait, d, the A registers and the B values read
// must be as they were at the issue; a product fails where a thread of the block has cp.async
// writes it did not fence_async_shared(); and at each barrier and at the block's end, the 4 warps
// of every warpgroup must have issued the same number of products.
#ifdef MT_EMULATOR
#define MT_HAS_WGMMA 1
struct WgDesc {
    const unsigned char* base;
    unsigned int lbo, sbo;
    __device__ __forceinline__ WgDesc plus(int bytes) const { return WgDesc{base + bytes, lbo, sbo}; }
};
__device__ __forceinline__ WgDesc wg_desc(const void* s, unsigned int lbo, unsigned int sbo) {
    if ((reinterpret_cast<unsigned long long>(s) | lbo | sbo) % 16 != 0)
        ::mt_emu::fail("%s: a wgmma descriptor's address (%p), LBO (%u) and SBO (%u) must be multiples of 16",
                       ::mt_emu::where(), s, lbo, sbo);
    return WgDesc{static_cast<const unsigned char*>(s), lbo, sbo};
}
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void fence_async_shared() { ::mt_emu::wg_fence_shared(); }
__device__ __forceinline__ void wg_commit() { ::mt_emu::wg_commit(); }
template <int N>
__device__ __forceinline__ void wg_wait() { ::mt_emu::wg_wait(N); }
template <int NT>
__device__ __forceinline__ void wg_settle(float (*)[4]) {}

template <typename T, int N, bool B_T>
__device__ __forceinline__ void wgmma_64xNx16(float (*d)[4], const unsigned int a[4], WgDesc b, bool accumulate) {
    static_assert(sizeof(T) == 2 && (N == 32 || N == 64), "wgmma here: f16 or bf16, N 32 or 64");
    if ((blockDim.x * blockDim.y * blockDim.z) % 128 != 0)
        ::mt_emu::fail("%s: wgmma in a block of %u threads, not whole warpgroups of 128", ::mt_emu::where(),
                       blockDim.x * blockDim.y * blockDim.z);
    const int lane = threadIdx.x % MT_WARP, g = lane / 4, t = lane % 4;
    const unsigned int* all = ::mt_emu::warp_gather("wgmma.mma_async", MT_FULL_MASK, a, 4);
    const int W = ::mt_emu::kGatherWords;
    float arow[2][16];   // A's rows g and g + 8 of the warp's 16, as mma_16x8x16 gathers them
    for (int src = 0; src < 4; ++src)
        for (int r = 0; r < 4; ++r) {
            const unsigned int v = all[W * (4 * g + src) + r];
            arow[r % 2][2 * src + (r / 2) * 8] = half_at<T>(v, 0);
            arow[r % 2][2 * src + (r / 2) * 8 + 1] = half_at<T>(v, 1);
        }
    auto b_at = [&](int k, int n) {   // read here, in the kernel's code, so that the race tracker sees it
        return widen(*reinterpret_cast<const T*>(::mt_emu::wg_b_at(b.base, b.lbo, b.sbo, B_T, k, n)));
    };
    float* dst = &d[0][0];
    const float* c = ::mt_emu::wg_accumulator(dst, N / 2);
    float out[N / 2];
    for (int i = 0; i < N / 8; ++i)
        for (int e = 0; e < 4; ++e) {
            float acc = accumulate ? c[4 * i + e] : 0.f;
            for (int k = 0; k < 16; ++k) acc += arow[e / 2][k] * b_at(k, 8 * i + 2 * t + e % 2);
            out[4 * i + e] = acc;
        }
    ::mt_emu::wg_issue(dst, out, N / 2, a, b.base, b.lbo, b.sbo, B_T, t);
}
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)   // sm_90a: NVRTC's -arch=sm_90a
#define MT_HAS_WGMMA 1
struct WgDesc {
    unsigned long long bits;   // address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45; 62-63: 0, no swizzle
    __device__ __forceinline__ WgDesc plus(int bytes) const {   // the start address moved on (in 16 bytes)
        return WgDesc{bits + static_cast<unsigned long long>(bytes >> 4)};
    }
};
__device__ __forceinline__ WgDesc wg_desc(const void* s, unsigned int lbo, unsigned int sbo) {
    const unsigned long long a = static_cast<unsigned int>(__cvta_generic_to_shared(s));
    return WgDesc{((a >> 4) & 0x3fffull) | ((static_cast<unsigned long long>(lbo >> 4) & 0x3fffull) << 16)
                  | ((static_cast<unsigned long long>(sbo >> 4) & 0x3fffull) << 32)};
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
template <int NT>   // every later read of d depends on this empty asm, which cannot move above the wait
__device__ __forceinline__ void wg_settle(float (*d)[4]) {
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e]) :: "memory");
}

#define MT_WG_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define MT_WG_N32(TYPE)                                                                                       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"                                                  \
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " "                               \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "                   \
                 "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"                                              \
                 : MT_WG_D4(0), MT_WG_D4(1), MT_WG_D4(2), MT_WG_D4(3)                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b.bits), "r"(accumulate ? 1 : 0), "n"(TRANS_B)  \
                 : "memory")
#define MT_WG_N64(TYPE)                                                                                       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                  \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                               \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                    \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "          \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                              \
                 : MT_WG_D4(0), MT_WG_D4(1), MT_WG_D4(2), MT_WG_D4(3), MT_WG_D4(4), MT_WG_D4(5), MT_WG_D4(6),  \
                   MT_WG_D4(7)                                                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b.bits), "r"(accumulate ? 1 : 0), "n"(TRANS_B)  \
                 : "memory")
template <typename T, int N, bool B_T>
__device__ __forceinline__ void wgmma_64xNx16(float (*d)[4], const unsigned int a[4], WgDesc b, bool accumulate);
#define MT_WG_PRODUCT(T, N, TYPE)                                                                             \
    template <> __device__ __forceinline__ void wgmma_64xNx16<T, N, true>(float (*d)[4], const unsigned int a[4], \
                                                                           WgDesc b, bool accumulate) {       \
        constexpr int TRANS_B = 0;                                                                           \
        MT_WG_N##N(TYPE);                                                                                    \
    }                                                                                                        \
    template <> __device__ __forceinline__ void wgmma_64xNx16<T, N, false>(float (*d)[4], const unsigned int a[4], \
                                                                            WgDesc b, bool accumulate) {      \
        constexpr int TRANS_B = 1;                                                                           \
        MT_WG_N##N(TYPE);                                                                                    \
    }
MT_WG_PRODUCT(bf16, 32, "bf16")
MT_WG_PRODUCT(bf16, 64, "bf16")
MT_WG_PRODUCT(f16, 32, "f16")
MT_WG_PRODUCT(f16, 64, "f16")
#endif
#ifndef MT_HAS_WGMMA
// Other targets have no wgmma: these declarations (with no definitions) let a kernel template name
// them in a branch that only its sm_90a instantiations take; any other use fails to link.
struct WgDesc {
    unsigned long long bits;
    __device__ WgDesc plus(int bytes) const;
};
__device__ WgDesc wg_desc(const void* s, unsigned int lbo, unsigned int sbo);
__device__ void wg_fence();
__device__ void fence_async_shared();
__device__ void wg_commit();
template <int N>
__device__ void wg_wait();
template <int NT>
__device__ void wg_settle(float (*d)[4]);
template <typename T, int N, bool B_T>
__device__ void wgmma_64xNx16(float (*d)[4], const unsigned int a[4], WgDesc b, bool accumulate);
#endif
