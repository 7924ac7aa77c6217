// Loss scaling's unscale over every gradient in one launch (Micikevicius et al., 2018):
//
//   g <- g · factor  for every entry of every gradient,   nonfinite += 1 for each result that
//   is inf or NaN
//
// With factor 1 it only counts (no write): the check before an optimizer that applies the scale
// in its own pass.
// factor is extra / S for the loss scale S. The launcher passes a table of the gradients'
// device addresses and `starts` (common.cuh, "many arrays in one launch"). Thread mapping: one
// entry per thread in a grid-stride loop over the gradients laid end to end; tensor_of finds
// the gradient. A non-finite result adds 1 to the counter with atomicAdd, so the count is the
// same whatever the launch shape; the host reads it once to decide whether to skip the update.
// Edge cases: empty gradients are skipped; a value is non-finite when v - v is not 0 (NaN for
// both inf and NaN), which needs no isfinite in device code.
// T is the storage type (float, f16, bf16, double); the product runs in Acc<T>::type. On the
// CPU emulator the memory check cannot follow a table of addresses (see adam.cu).
#include "common.cuh"

template <typename T>
__global__ void unscale_multi(const unsigned long long* __restrict__ table, const long long* __restrict__ starts,
                              int tensors, long long total, double factor, int* __restrict__ nonfinite) {
    typedef typename Acc<T>::type A;
    const A f = static_cast<A>(factor);
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = tensor_of(starts, tensors, i);
        T* g = reinterpret_cast<T*>(table[t]);
        const long long j = i - starts[t];
        const A v = widen(g[j]) * f;
        if (f != A(1)) g[j] = narrow<T>(v);
        if (!(v - v == A(0))) atomicAdd(nonfinite, 1);
    }
}
