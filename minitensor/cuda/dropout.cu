// Inverted dropout with its mask drawn inside the kernel, forward and backward alike.
//
//   y_i = keep_i ? x_i / (1 - p) : 0,      keep_i = (r_i >> 8) >= threshold
//
// r_i is word i % 4 of Philox4x32-10 (Salmon et al., 2011, "Parallel random numbers: as easy
// as 1, 2, 3") at counter (offset + i / 4) and key (seed): a counter-based generator, so the
// same seed and offset give the same mask on any device, in any order of threads, and the
// backward recomputes the forward's mask instead of reading a saved one (the same kernel on
// the gradient). The top 24 bits of r_i are a uniform integer u in [0, 2^24), and the host
// passes threshold = ceil(p * 2^24): the entry is kept with probability 1 - p to within 2^-24,
// and the comparison is exact integer arithmetic on every device.
//
// Thread mapping: one thread per counter, that is per 4 consecutive entries (one Philox call
// gives 4 words), in a grid-stride loop; n need not be a multiple of 4 (the last counter's
// extra words are unused). Edge cases: p = 0 keeps everything (threshold 0); p = 1 is not
// launched (the launcher writes zeros); x and y may be the same array (in place).
// T is the storage type (float, f16, bf16, double); the scaling runs in Acc<T>::type.
// Philox4x32-10 itself is in common.cuh (the fused LayerNorm draws its dropout with it too).
#include "common.cuh"

// The four words for counter (lo, hi, 0, 0): exposed for the known-answer test.
__global__ void philox_words(const unsigned int* __restrict__ counters, unsigned int* __restrict__ out,
                             long long n, unsigned int k0, unsigned int k1) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int c[4] = {counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]};
    philox4x32_10(c, k0, k1);
    for (int w = 0; w < 4; ++w) out[4 * i + w] = c[w];
}

template <typename T>
__global__ void dropout_apply(const T* x, T* y, long long n, unsigned int threshold, double scale,
                              const unsigned long long* __restrict__ seed_word, unsigned long long offset) {
    typedef typename Acc<T>::type A;
    const unsigned long long seed = *seed_word;   // in memory: a CUDA graph's replay reads the update's own
    const long long counters = (n + 3) / 4;
    const A s = static_cast<A>(scale);
    for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < counters;
         q += static_cast<long long>(gridDim.x) * blockDim.x) {
        unsigned int c[4];
        philox_at(c, offset + static_cast<unsigned long long>(q), seed);
        for (int w = 0; w < 4; ++w) {
            const long long i = 4 * q + w;
            if (i < n) y[i] = (c[w] >> 8) >= threshold ? narrow<T>(widen(x[i]) * s) : narrow<T>(A(0));
        }
    }
}
