// Adam over every parameter in one launch (Kingma & Ba, 2015, as PyTorch implements it, with
// L2 weight decay):
//
//   g' = gs·g + wd·w,   m <- b1·m + (1-b1)·g',   v <- b2·v + (1-b2)·g'²,
//   w <- w - step_size · m / (sqrt(v)·inv_sqrt_c2 + eps)
//
// with step_size = lr / (1 - b1^t) and inv_sqrt_c2 = 1 / sqrt(1 - b2^t), computed once on
// the host: the same arithmetic as the NumPy path in optim.py. gs is the gradients' scale (a
// mean's 1/count, a loss scale's 1/S), applied here rather than in a pass of its own.
//
// step_size, inv_sqrt_c2 and gs change from one update to the next: they are read from device
// memory (`numbers`, in that order, sent with the table below), not taken as arguments, so that a
// CUDA graph that replays this launch uses the numbers the host wrote for the update at hand.
// `skip` (null, or one int on the device): where it holds nonzero, nothing is written, so the
// host need not read it to decide (fp16's overflow check, in a CUDA graph).
//
// The parameters are separate arrays of different sizes. The launcher passes one table of
// 64-bit device addresses, 4 rows of `tensors` entries (weights, gradients, first moments,
// second moments), and `starts` (common.cuh, "many arrays in one launch"). Thread mapping: one
// entry per thread in a grid-stride loop over the parameters laid end to end; a thread finds
// its parameter with tensor_of (about 8 steps for the base model's 253 parameters). Every
// entry is read and written by exactly one thread, so there are no races and the result does not depend on the
// launch shape. Edge cases: empty parameters (equal starts) are skipped by the search.
// T is the storage type (float, f16, bf16, double); the arithmetic runs in Acc<T>::type.
// On the CPU emulator it runs under the race check; the memory check runs a launch in another
// process on copies of the argument arrays, where the table's addresses mean nothing, so this
// kernel is checked against the NumPy Adam instead.
#include "common.cuh"

template <typename T>
__global__ void adam_multi(const unsigned long long* __restrict__ table, const long long* __restrict__ starts,
                           int tensors, long long total, double b1, double b2, double eps, double wd,
                           const double* __restrict__ numbers, const int* __restrict__ skip) {
    typedef typename Acc<T>::type A;
    if (skip != nullptr && *skip != 0) return;   // e.g. fp16's overflow, counted on the device: no update
    const A B1 = static_cast<A>(b1), B2 = static_cast<A>(b2), C1 = static_cast<A>(1 - b1), C2 = static_cast<A>(1 - b2);
    const A S = static_cast<A>(numbers[0]), R = static_cast<A>(numbers[1]), E = static_cast<A>(eps),
            WD = static_cast<A>(wd), GS = static_cast<A>(numbers[2]);
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int lo = tensor_of(starts, tensors, i);
        const long long j = i - starts[lo];
        T* w = reinterpret_cast<T*>(table[lo]);
        const T* g = reinterpret_cast<const T*>(table[tensors + lo]);
        T* m = reinterpret_cast<T*>(table[2 * tensors + lo]);
        T* v = reinterpret_cast<T*>(table[3 * tensors + lo]);
        const A wj = widen(w[j]);
        const A grad = widen(g[j]) * GS + WD * wj;
        const A mj = B1 * widen(m[j]) + C1 * grad;
        const A vj = B2 * widen(v[j]) + C2 * grad * grad;
        m[j] = narrow<T>(mj);
        v[j] = narrow<T>(vj);
        w[j] = narrow<T>(wj - S * mj / (sqrt(vj) * R + E));
    }
}
