// Many arrays cast to another dtype in one launch: the 16-bit copies of every weight that a
// mixed-precision step's products read (Micikevicius et al., 2018), made at once.
//
//   dst_p[j] = round(src_p[j])   for every entry j of every array p
//
// rounding to nearest, ties to even, as CuPy's astype rounds (narrow in common.cuh). The
// launcher passes one table of addresses, the sources' then the destinations', and `starts`
// (common.cuh, "many arrays in one launch"). Thread mapping: one entry per thread in a
// grid-stride loop over the arrays laid end to end; tensor_of finds the array. Edge cases:
// empty arrays are skipped; NaN stays NaN and inf stays inf. S and D are the storage types
// (float to f16 or bf16). On the CPU emulator the memory check cannot follow a table of
// addresses (see adam.cu).
#include "common.cuh"

template <typename S, typename D>
__global__ void cast_multi(const unsigned long long* __restrict__ table, const long long* __restrict__ starts,
                           int tensors, long long total) {
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = tensor_of(starts, tensors, i);
        const S* src = reinterpret_cast<const S*>(table[t]);
        D* dst = reinterpret_cast<D*>(table[tensors + t]);
        const long long j = i - starts[t];
        dst[j] = narrow<D>(static_cast<typename Acc<D>::type>(widen(src[j])));
    }
}
