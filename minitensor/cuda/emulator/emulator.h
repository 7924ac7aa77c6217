// The CUDA that this folder's kernels use, on the CPU: the other half of emulator.py.
//
// emulator.py compiles one translation unit per kernel instantiation with the host C++
// compiler: this header, then the kernel's .cu text (common.cuh pasted, exactly what NVRTC
// compiles) inside an anonymous namespace, then a few generated lines that export the
// instantiation's parameter types and a launch function. Inside the header:
//
//   * the CUDA keywords (__global__, __shared__, ...) and built-ins (threadIdx, blockIdx,
//     blockDim, gridDim), static and dynamic shared memory;
//   * a scheduler that runs one block at a time, each CUDA thread on a fiber of its own
//     (ucontext), switching at __syncthreads and at warp operations, so barriers and
//     shuffles behave as on hardware; a block whose threads can no longer all meet
//     (a thread that exited, or waits somewhere else) is reported, never hung on;
//   * __shfl_sync and its _up/_down/_xor forms, __syncwarp, __ballot/__all/__any_sync,
//     atomicAdd, atomicCAS, atomicExch, the float intrinsics, and the f16 conversions that
//     round as PTX cvt does;
//   * cp.async copies, queued at the issue and made at the wait (see cp_async below);
//   * warpgroup products (wgmma.mma_async): computed at the issue, written to the thread's
//     registers at the wait, their operands checked unchanged meanwhile (see wg_issue below);
//   * with MT_EMU_RACE (check="race"): a shared-memory race tracker fed by the compiler's
//     ThreadSanitizer instrumentation (-fsanitize=thread emits a call before every load and
//     store; the calls land in the __tsan_* functions below, not in ThreadSanitizer), and a
//     check that blocks touching global memory another block of the launch wrote take turns
//     (common.cuh's await_turn and pass_turn; see track_global below);
//   * with MT_EMU_RUNNER (check="memory"): a main() that runs one launch in a subprocess
//     built with AddressSanitizer, so an out-of-bounds access is reported with its thread.
//
// It exists for correctness and for learning, not for speed: every CUDA thread is a fiber.
#pragma once

#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <type_traits>
#include <ucontext.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>

#define MT_EMULATOR 1

// ---------------------------------------------------------------- CUDA keywords
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// One copy per block, shared by the block's threads: blocks run one at a time, so a static
// local is exactly that. The kernel text sits in an anonymous namespace, which makes these
// local statics of internal linkage (not template COMDAT data): AddressSanitizer puts
// redzones around each one, and emulator.py finds them in the library's symbol table and
// passes their addresses in, to fill them with NaN bytes before every block and to watch
// them for races.
#define __shared__ static __attribute__((aligned(16)))

#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
#endif

// functions of the runtime itself carry no race-tracking instrumentation
#define MT_RT __attribute__((no_sanitize_thread))

namespace mt_emu {

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

constexpr int kWarp = 32;
constexpr int kGatherWords = 8;   // the most 32-bit words a lane hands in to a warp gather
constexpr int kAsyncCopies = 128; // the most cp.async copies a thread may have in flight
constexpr int kWgResults = 8;     // the most accumulators a thread may have wgmma products in flight for
constexpr int kWgValues = 64;     // the most values one of them holds (m64n128: 64 a thread)
constexpr int kWgProducts = 8;    // the most products one of them has in flight (k-steps of one group)
constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 256 * 1024;

enum Wait { RUNNABLE = 0, AT_BARRIER = 1, AT_WARP = 2, EXITED = 3 };

// a cp.async copy in flight: made when its thread waits for its group (group: commits before it)
struct AsyncCopy {
    void* dst;
    const void* src;
    unsigned bytes, src_bytes, group;
};

// where wgmma's B[k][n] (16-bit values) lies in shared memory: core matrices with no swizzle, LBO
// between neighbours along K, SBO along N; K-major (b_t: a core matrix's rows are B's columns) or
// MN-major (its rows are B's rows). common.cuh's wgmma_64xNx16 documents the layout.
MT_RT inline const unsigned char* wg_b_at(const unsigned char* base, unsigned lbo, unsigned sbo, bool b_t, int k,
                                          int n) {
    return b_t ? base + 16 * (n % 8) + sbo * (n / 8) + lbo * (k / 8) + 2 * (k % 8)
               : base + 16 * (k % 8) + lbo * (k / 8) + sbo * (n / 8) + 2 * (n % 8);
}

// one product in flight: the A registers it read and a hash of the B values this lane read
// (columns 8i + 2t, 8i + 2t + 1 of n), to check at the wait that nothing changed them meanwhile
struct WgProduct {
    const unsigned* a;
    unsigned a_bits[4];
    const unsigned char* base;
    unsigned lbo, sbo;
    bool b_t;
    int n, t;
    unsigned long long b_hash;
};

// a wgmma accumulator in flight: `n` values of `dst`, written when its thread waits for its group;
// `before`: dst as the group's first product found it (the registers must not change until then)
struct WgResult {
    float* dst;
    int n;
    unsigned group;
    float v[kWgValues];
    float before[kWgValues];
    int products;
    WgProduct product[kWgProducts];
};

struct Thread {
    ucontext_t ctx;            // its first start (makecontext)...
    jmp_buf jump;              // ...and where it waits after that (see switch_to_scheduler)
    bool started;              // its fiber has run (see Fibers) and waits at `jump`
    uint3 idx;
    int id;                    // linear index in the block
    int state;                 // Wait
    int src;                   // the lane it reads (shuffles)
    unsigned long long result; // what the warp operation gave it
    unsigned gathered[kWarp * kGatherWords];  // what a warp gather gave it: lane l's words from l * kGatherWords
    int copies;                // cp.async copies in flight...
    unsigned groups;           // ...and the groups committed so far
    AsyncCopy copy[kAsyncCopies];
    int wg_results;            // wgmma accumulators in flight...
    unsigned wg_groups;        // ...and the groups committed so far
    unsigned long long wg_issued;   // wgmma products issued in this block
    bool unfenced;             // cp.async copies landed since its last fence.proxy.async
    unsigned turns_passed;     // pass_turn calls in this block...
    bool after_await;          // ...and whether an await_turn came after the last of them,
    unsigned awaited_block;    // the block that gave the turn it waited for last...
    unsigned awaited_passes;   // ...and that block's pass_turn calls then
    WgResult wg[kWgResults];
#if defined(__SANITIZE_ADDRESS__)
    void* fake_stack;
#endif
};

// The fibers of the in-process launches, one per thread a block may have: a stack each and the
// threads' records, made once a process (emulator.py asks the first library it loads, and passes
// them to every launch; launches run one at a time). Every kernel is a library with a runtime of
// its own, but a fiber serves them all: its loop (fiber_main) runs whatever `body` the launching
// library set, so a thread that exited waits where the next launch of any kernel resumes it,
// without a fresh context (two system calls a thread).
struct Fibers {
    char* stacks;
    Thread* threads;
    int count;
    void (*body)();            // the launching library's thread_body
};

struct Warp {
    int arrived;               // lanes waiting at the current warp operation
    unsigned mask;
    const char* op;
    unsigned long long gen;    // completed warp operations (the race tracker's intra-warp clock)
    unsigned long long bits[kWarp];
    unsigned table[kWarp][kGatherWords];   // the words of a gather, lane by lane
};

// the launch configuration emulator.py passes in (ctypes mirrors this layout)
struct Launch {
    unsigned grid[3];
    unsigned block[3];
    unsigned long long dynamic_shared;
    int track_races;
    int reverse_blocks;                   // start the blocks from the last (emulator.block_order)
    int nshared;                          // static __shared__ arrays of the kernel...
    const unsigned long long* shared;     // ...as (address, bytes) pairs
    Fibers* fibers;                       // from mt_emu_make_fibers, kept by the caller for every launch
                                          // (null: the launch makes its own, then frees them)
};

// what emulator.py learns about each kernel parameter (ctypes mirrors this layout)
enum Kind { K_OTHER = 0, K_POINTER = 1, K_FLOAT = 2, K_SIGNED = 3, K_UNSIGNED = 4, K_BOOL = 5, K_STRUCT = 6 };
struct ParamInfo {
    unsigned size;             // sizeof the parameter
    int kind;                  // Kind of the parameter
    unsigned pointee_size;     // for pointers: sizeof the pointee (0 for void)
    int pointee_kind;          // for pointers: Kind of the pointee
    int pointee_const;         // for pointers: 1 when the pointee is const
};

struct Cell;  // race tracker shadow entry (below)
struct GlobalWrite {  // the last write of a byte of global memory, or of a turn flag, in this launch
    unsigned block;            // by which block (linear index)
    unsigned passes;           // after how many of its writer's pass_turn calls
};

struct Runtime {
    const char* kernel = "";
    dim3 grid{1, 1, 1}, block{1, 1, 1};
    uint3 block_idx{0, 0, 0};
    int nthreads = 0;
    Thread* threads = nullptr;
    Warp* warps = nullptr;
    Thread* current = nullptr;
    ucontext_t scheduler;
    jmp_buf scheduler_jump;
    int barrier_arrived = 0;
    unsigned long long barrier_gen = 0;
    void (*entry)(void**) = nullptr;
    void** args = nullptr;
    unsigned char* dyn = nullptr;
    size_t dyn_size = 0;
    // errors
    bool failed = false;
    char* err = nullptr;
    size_t errlen = 0;
    // fiber stacks and the threads' records: the caller's (Launch::fibers), or made for one launch
    // (own_fibers)
    char* stacks = nullptr;
    int stack_count = 0;
    bool owns_fibers = false;
    Fibers* pool = nullptr;               // the shared fibers, since a launch brought them
    // signals (segmentation faults inside a kernel become errors)
    sigjmp_buf fault_jump;
    volatile sig_atomic_t in_kernel = 0;
    pthread_t launcher;                   // the thread running the launch
    struct sigaction previous[3];         // SIGSEGV, SIGBUS, SIGFPE handlers before the launch
    // AddressSanitizer's view of the main stack (check="memory")
    const void* main_bottom = nullptr;
    size_t main_size = 0;
    // static shared arrays (address, bytes), and the race tracker
    int nshared = 0;
    const unsigned long long* shared = nullptr;
    size_t shared_bytes = 0;
    bool track = false;
    Cell* shadow_static = nullptr;
    Cell* shadow_dyn = nullptr;
    bool in_tracker = false;                                 // inside the global tracker's own code
    unsigned block_linear = 0;                               // this block, x fastest
    std::unordered_map<uintptr_t, GlobalWrite> global_writes;   // bytes of global memory written
    std::unordered_map<uintptr_t, GlobalWrite> turns_given;     // each flag's last pass_turn: by whom, when
};
inline Runtime rt;

// ---------------------------------------------------------------- errors
MT_RT inline void vreport(const char* fmt, va_list ap) {
    if (rt.failed || rt.err == nullptr) return;  // keep the first error
    rt.failed = true;
    vsnprintf(rt.err, rt.errlen, fmt, ap);
}

MT_RT inline void report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
MT_RT inline void report(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
}

MT_RT inline void yield();

// An error inside a kernel: record it and leave the block for good (the scheduler sees
// rt.failed and stops; fibers hold no resources, so abandoning them is safe).
MT_RT [[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
MT_RT [[noreturn]] inline void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    for (;;) yield();
}

MT_RT inline const char* where() {
    static char buf[160];
    const Thread* t = rt.current;
    if (t == nullptr) {
        snprintf(buf, sizeof buf, "%s", rt.kernel);
    } else {
        snprintf(buf, sizeof buf, "%s, block (%u, %u, %u), thread (%u, %u, %u)", rt.kernel, rt.block_idx.x,
                 rt.block_idx.y, rt.block_idx.z, t->idx.x, t->idx.y, t->idx.z);
    }
    return buf;
}

// ---------------------------------------------------------------- fibers
// A fiber starts on its own stack from makecontext; after that the switches are _setjmp and
// _longjmp, which save no signal mask: swapcontext's system call for it took most of a launch's
// time (a kernel switches at every warp operation). emulator.py builds without _FORTIFY_SOURCE,
// whose _longjmp refuses a jump onto another stack. Under AddressSanitizer (check="memory") the
// switches stay swapcontext: its _longjmp would unpoison the fiber's live frames.
MT_RT inline __attribute__((noinline)) void switch_to_scheduler(Thread* t) {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(t->state == EXITED ? nullptr : &t->fake_stack, rt.main_bottom, rt.main_size);
    swapcontext(&t->ctx, &rt.scheduler);
    __sanitizer_finish_switch_fiber(t->fake_stack, &rt.main_bottom, &rt.main_size);
#else
    if (_setjmp(t->jump) == 0) _longjmp(rt.scheduler_jump, 1);
#endif
}

// The running thread gives the processor back to the scheduler.
MT_RT inline void yield() {
    if (rt.current == nullptr) abort();  // only fibers wait
    switch_to_scheduler(rt.current);
}

// A fiber runs its thread of one block after another, and of one launch after another: the
// scheduler resumes an exited thread for the next block (under AddressSanitizer each block's
// threads start afresh instead, and an exited one is never resumed).
//
// A thread of this library's launch, from its start to its exit, where it waits to be resumed.
MT_RT inline void thread_body() {
    Thread* t = rt.current;
    rt.entry(rt.args);
    if (t->copies) fail("%s: exits with %d cp.async copies never waited for", where(), t->copies);
    if (t->wg_results) fail("%s: exits with wgmma products never waited for", where());
    t->state = EXITED;
    yield();
}

// A shared fiber (Fibers) runs the body of whichever library resumes it; the library that made
// it may not be the one launching now, so the body is read from the pool, not from this `rt`.
MT_RT inline void fiber_main() {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, &rt.main_bottom, &rt.main_size);
#endif
    for (;;) (rt.pool ? rt.pool->body : thread_body)();
}

MT_RT inline char* stack_of(int i) { return rt.stacks + static_cast<size_t>(i) * (kStackBytes + 4096) + 4096; }

// n fiber stacks of kStackBytes, each above a guard page (null if they cannot be mapped)
MT_RT inline char* map_stacks(int n) {
    const size_t bytes = static_cast<size_t>(n) * (kStackBytes + 4096);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    char* base = static_cast<char*>(p);
    for (int i = 0; i < n; ++i) mprotect(base + static_cast<size_t>(i) * (kStackBytes + 4096), 4096, PROT_NONE);
    return base;
}

// the fibers every in-process launch shares (null if the stacks cannot be mapped)
MT_RT inline Fibers* make_fibers(int n) {
    char* stacks = map_stacks(n);
    Thread* threads = static_cast<Thread*>(calloc(n, sizeof(Thread)));
    Fibers* f = static_cast<Fibers*>(calloc(1, sizeof(Fibers)));
    if (!stacks || !threads || !f) {
        if (stacks) munmap(stacks, static_cast<size_t>(n) * (kStackBytes + 4096));
        free(threads);
        free(f);
        return nullptr;
    }
    *f = Fibers{stacks, threads, n, nullptr};
    return f;
}

// The fibers of a launch that brought none (the memory check's runner, a process a launch), made
// for that launch alone.
MT_RT inline bool own_fibers(int n) {
    rt.stacks = map_stacks(n);
    rt.threads = static_cast<Thread*>(calloc(n, sizeof(Thread)));
    rt.stack_count = rt.stacks ? n : 0;
    rt.owns_fibers = true;
    return rt.stacks && rt.threads;
}

MT_RT inline void release_fibers() {
    if (rt.owns_fibers) {
        if (rt.stacks) munmap(rt.stacks, static_cast<size_t>(rt.stack_count) * (kStackBytes + 4096));
        free(rt.threads);
    }
    rt.stacks = nullptr;
    rt.stack_count = 0;
    rt.threads = nullptr;
    rt.owns_fibers = false;
}

// The scheduler runs thread t until it next waits or exits.
MT_RT inline __attribute__((noinline)) void resume(Thread& t) {
#if defined(__SANITIZE_ADDRESS__)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, stack_of(t.id), kStackBytes);
    swapcontext(&rt.scheduler, &t.ctx);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    if (_setjmp(rt.scheduler_jump) == 0) {
        if (t.started) _longjmp(t.jump, 1);
        t.started = true;
        setcontext(&t.ctx);
    }
#endif
}

// ---------------------------------------------------------------- shared memory
MT_RT inline void* dynamic_shared() { return rt.dyn; }

// ---------------------------------------------------------------- race tracker
// One shadow cell per byte of shared memory: who last wrote it and who read it, in which
// barrier interval (epoch) and, for threads of one warp, after how many warp operations.
// Two threads touching the same byte in one interval, at least one writing, is a race
// unless they are lanes of one warp separated by a warp operation (__syncwarp, a shuffle).
struct Cell {
    unsigned long long w_epoch, r_epoch;   // barrier interval + 1 of the last write / read (0: none)
    unsigned long long w_wgen, r_wgen;     // that thread's warp-operation count then
    int writer, reader;                    // thread ids; reader -2: several readers
};

MT_RT inline bool ordered(int a, unsigned long long a_wgen, int b, unsigned long long b_wgen) {
    return a == b || (a / kWarp == b / kWarp && a_wgen != b_wgen);
}

// region >= 0: static shared array `region`; -1: dynamic shared memory
MT_RT inline void race(int region, size_t offset, int other, const char* other_did, bool write) {
    char name[64];
    if (region >= 0) snprintf(name, sizeof name, "static shared array %d", region);
    else snprintf(name, sizeof name, "dynamic shared memory");
    fail("shared-memory race in %s: it %s byte %zu of %s, which thread %d %s since the last __syncthreads "
         "(barrier %llu of the block); add a __syncthreads between the two accesses",
         where(), write ? "writes" : "reads", offset, name, other, other_did,
         static_cast<unsigned long long>(rt.barrier_gen));
}

// Global memory: blocks run one at a time here, but at once on a GPU, so a block that reads or
// writes a byte another block of the launch wrote is a race there, unless the two took turns
// (common.cuh): the thread touching the byte waited (await_turn) for a turn that the writer block
// passed on (pass_turn) after its write, and has not passed a turn on itself since. Only the block
// that gave the awaited turn counts (a turn handed along a chain of blocks is not followed), and
// only writes are recorded (a later block overwriting what an earlier one only read is not seen).
// Accesses to the fiber stacks (a thread's own variables) and those made inside the emulator
// (atomics, cp.async's copies) are not tracked. The containers' own code is instrumented too
// (templates compiled in this unit): while it runs, in_tracker turns the tracking off.
MT_RT [[noreturn]] inline void global_race(uintptr_t a, bool write, const GlobalWrite& w, const char* why) {
    rt.in_tracker = false;
    fail("global-memory race in %s: it %s byte %p, which block %u of this launch wrote, %s (on a GPU the blocks "
         "run at once: take turns)", where(), write ? "writes" : "reads", reinterpret_cast<void*>(a), w.block, why);
}

MT_RT inline void track_global(uintptr_t a, size_t n, bool write) {
    const uintptr_t stacks = reinterpret_cast<uintptr_t>(rt.stacks);
    if (rt.in_tracker || a - stacks < static_cast<size_t>(rt.stack_count) * (kStackBytes + 4096)) return;
    rt.in_tracker = true;
    Thread* t = rt.current;
    for (size_t i = 0; i < n && (write || !rt.global_writes.empty()); ++i) {
        auto it = rt.global_writes.find(a + i);
        if (it != rt.global_writes.end() && it->second.block != rt.block_linear) {
            const GlobalWrite w = it->second;
            if (!t->after_await) global_race(a + i, write, w, "with no await_turn since its own last pass_turn");
            if (t->awaited_block != w.block)
                global_race(a + i, write, w, "but the turn it waited for was passed on by another block");
            if (w.passes >= t->awaited_passes)
                global_race(a + i, write, w, "after passing on the turn this thread waited for");
        }
        if (write) rt.global_writes[a + i] = GlobalWrite{rt.block_linear, t->turns_passed};
    }
    rt.in_tracker = false;
}

// common.cuh's turns. The flag is read and written here, outside the kernel's instrumented code:
// like an atomic, it is how blocks synchronise, not a race. turn_held: what the flag holds (a wait
// whose turn is not there gives up, as no later block could pass it on); turn_give: thread 0 passes it on (and the tracker
// notes by whom, after how many passes); turn_awaited, turn_passed: what the race tracker knows of
// each thread (every thread of the block calls them).
MT_RT inline int turn_held(const int* flag) { return *flag; }
MT_RT inline void turn_give(int* flag, int turn) {
    if (rt.track) {
        rt.in_tracker = true;
        rt.turns_given[reinterpret_cast<uintptr_t>(flag)] = GlobalWrite{rt.block_linear, rt.current->turns_passed};
        rt.in_tracker = false;
    }
    *flag = turn;
}
MT_RT inline void turn_awaited(const int* flag) {
    Thread* t = rt.current;
    t->after_await = true;
    t->awaited_block = ~0u;   // none: the flag held its first turn
    t->awaited_passes = 0;
    if (!rt.track) return;
    rt.in_tracker = true;
    auto it = rt.turns_given.find(reinterpret_cast<uintptr_t>(flag));
    if (it != rt.turns_given.end()) {
        t->awaited_block = it->second.block;
        t->awaited_passes = it->second.passes;
    }
    rt.in_tracker = false;
}
MT_RT inline void turn_passed() {
    ++rt.current->turns_passed;
    rt.current->after_await = false;
}

MT_RT inline void track(const void* p, size_t n, bool write) {
    if (!rt.track || rt.current == nullptr || !rt.in_kernel) return;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    int region = -2;
    Cell* cells = nullptr;
    size_t offset = 0, size = 0, before = 0;
    for (int r = 0; r < rt.nshared && !cells; ++r) {
        const uintptr_t start = rt.shared[2 * r];
        const size_t bytes = rt.shared[2 * r + 1];
        if (a - start < bytes) {
            region = r;
            cells = rt.shadow_static + before;
            offset = a - start;
            size = bytes;
        }
        before += bytes;
    }
    if (!cells && rt.shadow_dyn && a - reinterpret_cast<uintptr_t>(rt.dyn) < rt.dyn_size) {
        region = -1;
        cells = rt.shadow_dyn;
        offset = a - reinterpret_cast<uintptr_t>(rt.dyn);
        size = rt.dyn_size;
    }
    if (!cells) return track_global(a, n, write);
    const int me = rt.current->id;
    const unsigned long long epoch = rt.barrier_gen + 1;
    const unsigned long long wgen = rt.warps[me / kWarp].gen;
    for (size_t i = 0; i < n && offset + i < size; ++i) {
        Cell& c = cells[offset + i];
        if (c.w_epoch == epoch && !ordered(c.writer, c.w_wgen, me, wgen))
            race(region, offset + i, c.writer, "wrote", write);
        if (write) {
            if (c.r_epoch == epoch && (c.reader == -2 || !ordered(c.reader, c.r_wgen, me, wgen)))
                race(region, offset + i, c.reader == -2 ? -1 : c.reader, c.reader == -2 ? "(and others) read" : "read",
                     write);
            c.w_epoch = epoch;
            c.writer = me;
            c.w_wgen = wgen;
        } else if (c.r_epoch != epoch) {
            c.r_epoch = epoch;
            c.reader = me;
            c.r_wgen = wgen;
        } else if (c.reader != me) {
            c.reader = -2;
        }
    }
}

// ---------------------------------------------------------------- asynchronous copies (cp.async)
// A copy is queued when issued and made when its thread waits for its group, so shared memory
// holds the old bytes until then: a read of the destination before the wait sees them, and
// another thread's read before the wait and a __syncthreads is a race (the write is tracked at
// the wait). The source is read at the wait too, by memcpy, which AddressSanitizer checks.
MT_RT inline void cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
    Thread* t = rt.current;
    if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % bytes != 0)
        fail("%s: cp.async of %u bytes from %p to %p, which are not both %u-byte aligned", where(), bytes, src, dst, bytes);
    if (t->copies == kAsyncCopies) fail("%s: more than %d cp.async copies in flight", where(), kAsyncCopies);
    t->copy[t->copies++] = AsyncCopy{dst, src, bytes, src_bytes, t->groups};
}

MT_RT inline void cp_async_commit() { ++rt.current->groups; }

// cp.async.wait_group n: every committed group but the newest n is complete
MT_RT inline void cp_async_wait(unsigned n) {
    Thread* t = rt.current;
    int kept = 0;
    for (int i = 0; i < t->copies; ++i) {
        const AsyncCopy c = t->copy[i];
        if (c.group + n < t->groups) {
            t->unfenced = true;
            track(c.dst, c.bytes, true);
            std::memcpy(c.dst, c.src, c.src_bytes);
            std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);   // zero fill
        } else {
            t->copy[kept++] = c;
        }
    }
    t->copies = kept;
}

// ---------------------------------------------------------------- warpgroup products (wgmma)
// wgmma.mma_async is asynchronous: its accumulator registers hold their old values until the
// thread waits for the product's group (wgmma.wait_group), and reading them before is a bug.
// common.cuh's model computes a product at the issue, from what wg_accumulator() gives it (the
// in-flight values where a product of the same accumulator is still in flight: products of one
// accumulator chain in order, as on hardware), and hands the result to wg_issue(); the values
// reach the registers at the wait. So a kernel that reads an accumulator before its wait reads
// the old values, and its result is wrong. Shared memory is read at the issue.
MT_RT inline WgResult* wg_in_flight(float* dst) {
    Thread* t = rt.current;
    for (int i = t->wg_results - 1; i >= 0; --i)
        if (t->wg[i].dst == dst) return &t->wg[i];
    return nullptr;
}

// what a product on `dst` (n values) accumulates onto: the latest in-flight result, or the registers
MT_RT inline const float* wg_accumulator(float* dst, int n) {
    if (n > kWgValues) fail("%s: a wgmma accumulator of %d values a thread, at most %d", where(), n, kWgValues);
    const WgResult* r = wg_in_flight(dst);
    return r ? r->v : dst;
}

// FNV-1a over the B values lane t reads: 16 k of columns 8i + 2t + e of n (what wgmma_64xNx16 reads)
MT_RT inline unsigned long long wg_b_hash(const WgProduct& p) {
    unsigned long long h = 1469598103934665603ull;
    for (int i = 0; i < p.n / 8; ++i)
        for (int e = 0; e < 2; ++e)
            for (int k = 0; k < 16; ++k) {
                const unsigned char* q = wg_b_at(p.base, p.lbo, p.sbo, p.b_t, k, 8 * i + 2 * p.t + e);
                for (int byte = 0; byte < 2; ++byte) h = (h ^ q[byte]) * 1099511628211ull;
            }
    return h;
}

// A product on `dst` was issued: its sums (`values`, n of them) reach dst at the wait for its group.
// Its operands are recorded (a: the A registers; B through base, lbo, sbo, b_t, as lane t reads
// it) and checked unchanged at that wait. The tensor cores' proxy must see this block's cp.async
// writes: every thread fenced them (fence.proxy.async) after they landed.
MT_RT inline void wg_issue(float* dst, const float* values, int n, const unsigned* a, const unsigned char* base,
                           unsigned lbo, unsigned sbo, bool b_t, int t) {
    Thread* me = rt.current;
    for (int i = 0; i < rt.nthreads; ++i)
        if (rt.threads[i].unfenced)
            fail("%s: wgmma reads shared memory that thread %d wrote by cp.async and did not fence for the "
                 "tensor cores (fence.proxy.async) before the barrier", where(), i);
    WgResult* r = wg_in_flight(dst);
    if (!r || r->group != me->wg_groups) {   // a new group's result: its own entry
        if (me->wg_results == kWgResults) fail("%s: more than %d wgmma accumulators in flight", where(), kWgResults);
        const WgResult* earlier = r;
        r = &me->wg[me->wg_results++];
        r->dst = dst;
        r->group = me->wg_groups;
        r->products = 0;
        std::memcpy(r->before, earlier ? earlier->before : dst, n * sizeof(float));
    }
    if (r->products == kWgProducts) fail("%s: more than %d wgmma products on one accumulator in a group", where(),
                                         kWgProducts);
    WgProduct& p = r->product[r->products++];
    p = WgProduct{a, {a[0], a[1], a[2], a[3]}, base, lbo, sbo, b_t, n * 2, t, 0};
    p.b_hash = wg_b_hash(p);
    r->n = n;
    std::memcpy(r->v, values, n * sizeof(float));
    ++me->wg_issued;
}

MT_RT inline void wg_commit() { ++rt.current->wg_groups; }

MT_RT inline void wg_fence_shared() { rt.current->unfenced = false; }

// wgmma.wait_group n: every committed group but the newest n is complete (in issue order, so a
// later result of one accumulator lands after an earlier one). Before its sums land, a finished
// product's operands are checked: the accumulator, the A registers and the B values it read must
// be as they were at the issue (the hardware may read them until now; a change is undefined).
MT_RT inline void wg_wait(unsigned n) {
    Thread* t = rt.current;
    int kept = 0;
    for (int i = 0; i < t->wg_results; ++i) {
        const WgResult& r = t->wg[i];
        if (r.group + n < t->wg_groups) {
            if (std::memcmp(r.dst, r.before, r.n * sizeof(float)) != 0)
                fail("%s: a wgmma accumulator was written while its product was in flight (before wgmma.wait_group)",
                     where());
            for (int j = 0; j < r.products; ++j) {
                const WgProduct& p = r.product[j];
                if (std::memcmp(p.a, p.a_bits, sizeof p.a_bits) != 0)
                    fail("%s: a wgmma's A registers were written while its product was in flight", where());
                if (wg_b_hash(p) != p.b_hash)
                    fail("%s: the shared memory a wgmma reads (B) changed while its product was in flight", where());
            }
            std::memcpy(r.dst, r.v, r.n * sizeof(float));
        } else {
            t->wg[kept++] = r;
        }
    }
    t->wg_results = kept;
}

// wgmma is .aligned over a warpgroup: its 4 warps issue every product together. Checked where the
// block meets (each barrier, and its end): each thread of a warpgroup (128 consecutive threads)
// has issued as many products as the group's first, else the launch fails naming both. Returns
// whether they agree (the caller reports, from a thread or from the scheduler).
MT_RT inline bool warpgroups_agree(char* why, size_t size) {
    for (int i = 0; i < rt.nthreads; ++i) {
        const Thread& a = rt.threads[i / 128 * 128];
        const Thread& b = rt.threads[i];
        if (a.wg_issued != b.wg_issued) {
            snprintf(why, size, "%s, block (%u, %u, %u): thread %d issued %llu wgmma products and thread %d %llu: "
                     "the 4 warps of a warpgroup must issue each one together", rt.kernel, rt.block_idx.x,
                     rt.block_idx.y, rt.block_idx.z, b.id, b.wg_issued, a.id, a.wg_issued);
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------- barriers
MT_RT inline void syncthreads() {
    Thread* t = rt.current;
    if (++rt.barrier_arrived == rt.nthreads) {
        char why[320];
        if (!warpgroups_agree(why, sizeof why)) fail("%s", why);
        rt.barrier_arrived = 0;
        ++rt.barrier_gen;  // a new interval for the race tracker
        for (int i = 0; i < rt.nthreads; ++i)
            if (rt.threads[i].state == AT_BARRIER) rt.threads[i].state = RUNNABLE;
        return;
    }
    t->state = AT_BARRIER;
    yield();
}

// ---------------------------------------------------------------- warp operations
enum WarpOp { OP_SHFL, OP_VOTE, OP_SYNC, OP_GATHER };

MT_RT inline unsigned lanes_in_warp(int warp) {
    const int n = rt.nthreads - warp * kWarp;
    return n >= kWarp ? 0xffffffffu : ((1u << n) - 1u);
}

// Every lane named in `mask` meets here, hands in `bits`, and gets back the bits of lane
// `src` (a shuffle) or the ballot of the predicates (a vote); in a gather, it hands in `nwords`
// words and each lane gets a copy of every lane's (Thread::gathered). The last lane to arrive
// completes the operation for all.
MT_RT inline unsigned long long warp_meet(const char* op, WarpOp kind, unsigned mask, unsigned long long bits, int src,
                                          const unsigned* words = nullptr, int nwords = 0) {
    Thread* t = rt.current;
    const int lane = t->id % kWarp, w = t->id / kWarp;
    Warp& warp = rt.warps[w];
    if (!((mask >> lane) & 1u))
        fail("%s: %s with mask 0x%08x, which does not name the calling lane %d", where(), op, mask, lane);
    if (mask & ~lanes_in_warp(w))
        fail("%s: %s with mask 0x%08x names lanes that do not exist (the block has %d threads)", where(), op, mask,
             rt.nthreads);
    if (warp.arrived == 0) {
        warp.mask = mask;
        warp.op = op;
    } else if (warp.mask != mask || std::strcmp(warp.op, op) != 0) {
        fail("%s: lane %d calls %s with mask 0x%08x while other lanes of warp %d wait at %s with mask 0x%08x", where(),
             lane, op, mask, w, warp.op, warp.mask);
    }
    if (kind == OP_SHFL && !((mask >> src) & 1u))
        fail("%s: %s reads lane %d, which is not in the mask 0x%08x (its value is undefined)", where(), op, src, mask);
    warp.bits[lane] = bits;
    if (kind == OP_GATHER) std::memcpy(warp.table[lane], words, sizeof(unsigned) * nwords);
    t->src = src;
    if (++warp.arrived == __builtin_popcount(mask)) {
        unsigned ballot = 0;
        for (int l = 0; l < kWarp; ++l)
            if ((mask >> l) & 1u && warp.bits[l]) ballot |= 1u << l;
        for (int l = 0; l < kWarp; ++l) {
            if (!((mask >> l) & 1u)) continue;
            Thread& o = rt.threads[w * kWarp + l];
            o.result = kind == OP_SHFL ? warp.bits[o.src] : ballot;
            if (kind == OP_GATHER) std::memcpy(o.gathered, warp.table, sizeof(warp.table));
            if (o.state == AT_WARP) o.state = RUNNABLE;
        }
        warp.arrived = 0;
        ++warp.gen;
        return t->result;
    }
    t->state = AT_WARP;
    yield();
    return t->result;
}

// All lanes of `mask` hand in `n` (<= kGatherWords) words each, in one meeting; the answer holds
// lane l's words from index l * kGatherWords (valid until the caller's next gather). The model of
// a warp-wide instruction such as mma.sync is built on it.
MT_RT inline const unsigned* warp_gather(const char* op, unsigned mask, const unsigned* words, int n) {
    if (n > kGatherWords) fail("%s: %s gathers %d words a lane, at most %d", where(), op, n, kGatherWords);
    warp_meet(op, OP_GATHER, mask, 0, 0, words, n);
    return rt.current->gathered;
}

template <typename T>
MT_RT inline unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}

template <typename T>
MT_RT inline T from_bits(unsigned long long b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

MT_RT inline int lane_id() { return rt.current->id % kWarp; }

// the first lane of the calling lane's group of `width`
MT_RT inline int segment(int width) { return lane_id() & ~(width - 1); }

// ---------------------------------------------------------------- f16 conversions
// PTX cvt.f32.f16 (exact: every half is a float) and cvt.rn.f16.f32 (round to nearest,
// ties to even, subnormal halves kept, overflow to infinity, NaN to the canonical 0x7fff).
MT_RT inline float half_bits_to_float(unsigned short h) {
    const unsigned sign = (h & 0x8000u) << 16;
    const unsigned exp = (h >> 10) & 0x1fu;
    unsigned mant = h & 0x3ffu;
    unsigned bits;
    if (exp == 0x1f) {
        bits = mant ? 0x7fffffffu : (sign | 0x7f800000u);      // NaN (canonical) or infinity
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);     // normal: rebias 15 -> 127
    } else if (mant == 0) {
        bits = sign;                                          // signed zero
    } else {                                                  // subnormal half: normalise
        int e = -1;
        do {
            mant <<= 1;
            ++e;
        } while (!(mant & 0x400u));
        bits = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

MT_RT inline unsigned short float_to_half_bits_rn(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    const unsigned short sign = static_cast<unsigned short>((u >> 16) & 0x8000u);
    const unsigned abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return 0x7fff;                              // NaN: canonical
    if (abs >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // rounds to >= 65520: infinity
    const int e = static_cast<int>(abs >> 23) - 127;                   // unbiased exponent of the float
    if (e >= -14) {                                                    // a normal half
        const unsigned mant = abs & 0x7fffffu;
        unsigned h = (static_cast<unsigned>(e + 15) << 10) | (mant >> 13);
        const unsigned rest = mant & 0x1fffu;                          // the 13 bits that go
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;      // nearest, ties to even (may carry into exp)
        return static_cast<unsigned short>(sign | h);
    }
    if (e < -25) return sign;                                          // below half the smallest subnormal: zero
    // subnormal half: value = m * 2^-24 with m < 1024; the float is (1.mant) * 2^e
    const unsigned full = (abs & 0x7fffffu) | 0x800000u;               // 24-bit significand
    const int shift = -e - 1;                                          // 14 - 24 + (-e - 14) + 24 ... = -e - 1
    const unsigned m = full >> shift;
    const unsigned rest = full & ((1u << shift) - 1u), half = 1u << (shift - 1);
    unsigned h = m;
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<unsigned short>(sign | h);
}

}  // namespace mt_emu

// ---------------------------------------------------------------- CUDA built-ins
using mt_emu::dim3;
using mt_emu::uint3;

MT_RT inline uint3 mt_emu_thread_idx() { return mt_emu::rt.current->idx; }
#define threadIdx (mt_emu_thread_idx())
#define blockIdx (::mt_emu::rt.block_idx)
#define blockDim (::mt_emu::rt.block)
#define gridDim (::mt_emu::rt.grid)
#define warpSize 32

MT_RT inline void __syncthreads() { mt_emu::syncthreads(); }
MT_RT inline void __syncwarp(unsigned mask = 0xffffffffu) {
    mt_emu::warp_meet("__syncwarp", mt_emu::OP_SYNC, mask, 0, 0);
}
MT_RT inline void __threadfence() {}
MT_RT inline void __threadfence_block() {}

template <typename T>
MT_RT inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
    const int src = mt_emu::segment(width) + (src_lane & (width - 1));
    return mt_emu::from_bits<T>(mt_emu::warp_meet("__shfl_sync", mt_emu::OP_SHFL, mask, mt_emu::to_bits(var), src));
}
template <typename T>
MT_RT inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    const int lane = mt_emu::lane_id();
    const int src = (lane & (width - 1)) >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
    return mt_emu::from_bits<T>(mt_emu::warp_meet("__shfl_up_sync", mt_emu::OP_SHFL, mask, mt_emu::to_bits(var), src));
}
template <typename T>
MT_RT inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    const int lane = mt_emu::lane_id();
    const int src = (lane & (width - 1)) + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
    return mt_emu::from_bits<T>(
        mt_emu::warp_meet("__shfl_down_sync", mt_emu::OP_SHFL, mask, mt_emu::to_bits(var), src));
}
template <typename T>
MT_RT inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    const int lane = mt_emu::lane_id();
    int src = lane ^ lane_mask;
    if ((src & ~(width - 1)) > (lane & ~(width - 1)) || src >= 32) src = lane;  // a later group: own value
    return mt_emu::from_bits<T>(mt_emu::warp_meet("__shfl_xor_sync", mt_emu::OP_SHFL, mask, mt_emu::to_bits(var), src));
}
MT_RT inline unsigned __ballot_sync(unsigned mask, int predicate) {
    return static_cast<unsigned>(mt_emu::warp_meet("__ballot_sync", mt_emu::OP_VOTE, mask, predicate != 0, 0));
}
MT_RT inline int __all_sync(unsigned mask, int predicate) {
    return static_cast<unsigned>(mt_emu::warp_meet("__all_sync", mt_emu::OP_VOTE, mask, predicate != 0, 0)) == mask;
}
MT_RT inline int __any_sync(unsigned mask, int predicate) {
    return mt_emu::warp_meet("__any_sync", mt_emu::OP_VOTE, mask, predicate != 0, 0) != 0;
}

// Blocks run one at a time and a thread runs until it waits, so a read-modify-write is atomic.
template <typename T>
MT_RT inline T atomicAdd(T* address, T value) {
    const T old = *address;
    *address = old + value;
    return old;
}
template <typename T>
MT_RT inline T atomicCAS(T* address, T compare, T value) {
    const T old = *address;
    if (old == compare) *address = value;
    return old;
}
template <typename T>
MT_RT inline T atomicExch(T* address, T value) {
    const T old = *address;
    *address = value;
    return old;
}

// bit casts
MT_RT inline float __int_as_float(int v) { return mt_emu::from_bits<float>(static_cast<unsigned>(v)); }
MT_RT inline float __uint_as_float(unsigned v) { return mt_emu::from_bits<float>(v); }
MT_RT inline int __float_as_int(float v) { return static_cast<int>(mt_emu::to_bits(v)); }
MT_RT inline unsigned __float_as_uint(float v) { return static_cast<unsigned>(mt_emu::to_bits(v)); }
MT_RT inline double __longlong_as_double(long long v) { return mt_emu::from_bits<double>(static_cast<unsigned long long>(v)); }
MT_RT inline long long __double_as_longlong(double v) { return static_cast<long long>(mt_emu::to_bits(v)); }

// The fast float intrinsics, built as the GPU builds them: __expf(x) = 2^(x·log2 e) and
// __logf(x) = log2(x)·ln 2 (ex2.approx / lg2.approx), rsqrtf = 1/√x (rsqrt.approx). The
// GPU's approximations are within 2 ulp of the correctly rounded values used here.
MT_RT inline float __expf(float x) { return std::exp2(x * 1.4426950408889634f); }
MT_RT inline float __logf(float x) { return std::log2(x) * 0.6931471805599453f; }
MT_RT inline float __fdividef(float a, float b) { return a / b; }
MT_RT inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
MT_RT inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
MT_RT inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
using std::exp;
using std::fmax;
using std::fmaxf;
using std::fmin;
using std::fminf;
using std::log;
using std::sqrt;

namespace mt_emu {

// ---------------------------------------------------------------- parameters
template <typename T>
constexpr int kind_of() {
    if constexpr (std::is_pointer_v<T>) return K_POINTER;
    else if constexpr (std::is_same_v<T, bool>) return K_BOOL;
    else if constexpr (std::is_floating_point_v<T>) return K_FLOAT;
    else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) return K_SIGNED;
    else if constexpr (std::is_integral_v<T>) return K_UNSIGNED;
    else if constexpr (std::is_class_v<T>) return K_STRUCT;
    else return K_OTHER;
}

template <typename T>
constexpr ParamInfo info_of() {
    ParamInfo p{static_cast<unsigned>(sizeof(T)), kind_of<T>(), 0, K_OTHER, 0};
    if constexpr (std::is_pointer_v<T>) {
        using E = std::remove_pointer_t<T>;
        if constexpr (!std::is_void_v<E>) p.pointee_size = static_cast<unsigned>(sizeof(E));
        p.pointee_kind = kind_of<std::remove_cv_t<E>>();
        p.pointee_const = std::is_const_v<E> ? 1 : 0;
    }
    return p;
}

template <typename... A>
MT_RT int param_count(void (*)(A...)) {
    return static_cast<int>(sizeof...(A));
}

template <typename... A>
MT_RT void param_info(void (*)(A...), ParamInfo* out) {
    int i = 0;
    ((out[i++] = info_of<A>()), ...);
    (void)out;
    (void)i;
}

// cuLaunchKernel's contract: args[i] points at the bytes of parameter i, sizeof(A_i) of them.
template <typename T>
MT_RT inline T unpack(void* p) {
    T v;
    std::memcpy(static_cast<void*>(&v), p, sizeof(T));
    return v;
}

template <typename... A, size_t... I>
MT_RT inline void call_with(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(unpack<A>(args[I])...);
}

template <typename F> struct Arity;
template <typename... A> struct Arity<void (*)(A...)> { static constexpr size_t value = sizeof...(A); };

// the fiber's entry point: unpack the arguments and call the kernel
template <auto F>
MT_RT void entry(void** args) {
    call_with(F, args, std::make_index_sequence<Arity<decltype(F)>::value>{});
}

// ---------------------------------------------------------------- the scheduler
MT_RT inline int signal_index(int sig) { return sig == SIGSEGV ? 0 : (sig == SIGBUS ? 1 : 2); }

// A fault in a kernel thread ends the launch with an error naming the thread; any other
// fault (another Python thread, the runtime itself) goes to the handler that was there
// before: it is restored, and the faulting instruction runs again under it.
MT_RT inline void fault_handler(int sig, siginfo_t* info, void*) {
    if (!rt.in_kernel || !pthread_equal(pthread_self(), rt.launcher)) {
        sigaction(sig, &rt.previous[signal_index(sig)], nullptr);
        return;
    }
    report("%s: %s at address %p (an access out of bounds? run it with check=\"memory\" to find out)", where(),
           sig == SIGFPE ? "arithmetic fault (integer division by zero?)" : "segmentation fault", info->si_addr);
    rt.in_kernel = 0;
    siglongjmp(rt.fault_jump, 1);
}

MT_RT inline void rangelist(char* out, size_t cap, const int* ids, int n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && ids[j + 1] == ids[j] + 1) ++j;
        const int w = j > i ? snprintf(out + used, cap - used, "%s%d-%d", used ? ", " : "", ids[i], ids[j])
                            : snprintf(out + used, cap - used, "%s%d", used ? ", " : "", ids[i]);
        if (w < 0 || used + w >= cap) return;
        used += w;
        i = j + 1;
    }
}

// No thread can run and not all have exited: say who waits where, and who left.
MT_RT inline void report_deadlock() {
    static int ids[kMaxThreads];
    static char a[2048], b[2048], c[2048], msg[8192];
    size_t used = 0;
    auto add = [&](const char* fmt, auto... xs) {
        const int w = snprintf(msg + used, sizeof msg - used, fmt, xs...);
        if (w > 0 && used + w < sizeof msg) used += w;
    };
    add("deadlock in %s, block (%u, %u, %u) (%d threads):", rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z,
        rt.nthreads);
    int n = 0;
    for (int i = 0; i < rt.nthreads; ++i)
        if (rt.threads[i].state == AT_BARRIER) ids[n++] = i;
    if (n) {
        rangelist(a, sizeof a, ids, n);
        int m = 0;
        for (int i = 0; i < rt.nthreads; ++i)
            if (rt.threads[i].state != AT_BARRIER) ids[m++] = i;
        rangelist(b, sizeof b, ids, m);
        add(" threads %s wait at __syncthreads, which threads %s never reach;", a, b);
    }
    for (int w = 0; w * kWarp < rt.nthreads; ++w) {
        const Warp& warp = rt.warps[w];
        if (warp.arrived == 0) continue;
        int nw = 0, ne = 0, no = 0, other[kWarp], exited[kWarp], waiting[kWarp];
        for (int l = 0; l < kWarp && w * kWarp + l < rt.nthreads; ++l) {
            if (!((warp.mask >> l) & 1u)) continue;
            const Thread& t = rt.threads[w * kWarp + l];
            if (t.state == AT_WARP) waiting[nw++] = l;
            else if (t.state == EXITED) exited[ne++] = l;
            else other[no++] = l;
        }
        rangelist(a, sizeof a, waiting, nw);
        add(" in warp %d, lanes %s wait at %s (mask 0x%08x)", w, a, warp.op, warp.mask);
        if (ne) {
            rangelist(b, sizeof b, exited, ne);
            add(", but lanes %s exited without reaching it", b);
        }
        if (no) {
            rangelist(c, sizeof c, other, no);
            add("%s lanes %s wait at __syncthreads instead", ne ? " and" : ", but", c);
        }
        add(";");
    }
    if (used && msg[used - 1] == ';') msg[used - 1] = '.';
    report("%s", msg);
}

// Runs every block of the launch, one after the other. Returns 0, or 1 with rt.err set.
MT_RT inline int launch(void (*entry_fn)(void**), const char* name, const Launch* cfg, void** args, char* err,
                        size_t errlen) {
    rt.kernel = name;
    rt.err = err;
    rt.errlen = errlen;
    rt.failed = false;
    err[0] = 0;
    rt.grid = dim3{cfg->grid[0], cfg->grid[1], cfg->grid[2]};
    rt.block = dim3{cfg->block[0], cfg->block[1], cfg->block[2]};
    rt.nthreads = static_cast<int>(cfg->block[0] * cfg->block[1] * cfg->block[2]);
    rt.entry = entry_fn;
    rt.args = args;
    const int nwarps = (rt.nthreads + kWarp - 1) / kWarp;
    Fibers* const pool = cfg->fibers && cfg->fibers->count >= rt.nthreads ? cfg->fibers : nullptr;
    if (pool) {
        rt.pool = pool;
        pool->body = thread_body;
        rt.stacks = pool->stacks;
        rt.stack_count = pool->count;
        rt.threads = pool->threads;
    } else {
        rt.pool = nullptr;   // fibers of this launch alone, which run this library's own body
        if (!own_fibers(rt.nthreads)) {
            report("%s: could not map %d fiber stacks", name, rt.nthreads);
            release_fibers();
            return 1;
        }
    }
    for (int i = 0; i < rt.nthreads; ++i) {   // what a launch counts from zero
        Thread& t = rt.threads[i];
        t.copies = 0;
        t.groups = 0;
        t.wg_results = 0;
        t.wg_groups = 0;
    }
    rt.warps = static_cast<Warp*>(calloc(nwarps, sizeof(Warp)));
    rt.dyn_size = cfg->dynamic_shared;
    rt.dyn = rt.dyn_size ? static_cast<unsigned char*>(malloc(rt.dyn_size)) : nullptr;
    rt.nshared = cfg->nshared;
    rt.shared = cfg->shared;
    rt.shared_bytes = 0;
    for (int r = 0; r < rt.nshared; ++r) rt.shared_bytes += rt.shared[2 * r + 1];
    const size_t sbytes = rt.shared_bytes;
    rt.track = cfg->track_races != 0;
    rt.shadow_static = rt.track && sbytes ? static_cast<Cell*>(malloc(sbytes * sizeof(Cell))) : nullptr;
    rt.shadow_dyn = rt.track && rt.dyn_size ? static_cast<Cell*>(malloc(rt.dyn_size * sizeof(Cell))) : nullptr;
    rt.global_writes.clear();
    rt.turns_given.clear();
    rt.in_tracker = false;

    struct sigaction act;
    std::memset(&act, 0, sizeof act);
    act.sa_sigaction = fault_handler;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    static char altstack_mem[64 * 1024];
    stack_t alt, old_alt;
    alt.ss_sp = altstack_mem;
    alt.ss_size = sizeof altstack_mem;
    alt.ss_flags = 0;
#ifndef MT_EMU_RUNNER  // under AddressSanitizer its own handler reports the fault
    rt.launcher = pthread_self();
    sigaltstack(&alt, &old_alt);
    sigaction(SIGSEGV, &act, &rt.previous[0]);
    sigaction(SIGBUS, &act, &rt.previous[1]);
    sigaction(SIGFPE, &act, &rt.previous[2]);
#endif

    if (sigsetjmp(rt.fault_jump, 1) == 0) {
        const unsigned long long blocks = 1ull * rt.grid.x * rt.grid.y * rt.grid.z;
        for (unsigned long long started = 0; started < blocks && !rt.failed; ++started) {
            // blockIdx order, x fastest, or from the last block back
            const unsigned long long l = cfg->reverse_blocks ? blocks - 1 - started : started;
            rt.block_idx = uint3{static_cast<unsigned>(l % rt.grid.x),
                                 static_cast<unsigned>(l / rt.grid.x % rt.grid.y),
                                 static_cast<unsigned>(l / (1ull * rt.grid.x * rt.grid.y))};
            rt.block_linear = static_cast<unsigned>(l);
            rt.barrier_arrived = 0;
            rt.barrier_gen = 0;
            std::memset(static_cast<void*>(rt.warps), 0, nwarps * sizeof(Warp));
            for (int r = 0; r < rt.nshared; ++r)  // NaN in every float, as nobody wrote it
                std::memset(reinterpret_cast<void*>(rt.shared[2 * r]), 0xff, rt.shared[2 * r + 1]);
            if (rt.dyn_size) std::memset(rt.dyn, 0xff, rt.dyn_size);
            if (rt.shadow_static) std::memset(static_cast<void*>(rt.shadow_static), 0, sbytes * sizeof(Cell));
            if (rt.shadow_dyn) std::memset(static_cast<void*>(rt.shadow_dyn), 0, rt.dyn_size * sizeof(Cell));
            for (int i = 0; i < rt.nthreads; ++i) {
                Thread& t = rt.threads[i];
                t.id = i;
                t.idx = uint3{static_cast<unsigned>(i % rt.block.x),
                              static_cast<unsigned>((i / rt.block.x) % rt.block.y),
                              static_cast<unsigned>(i / (rt.block.x * rt.block.y))};
                t.state = RUNNABLE;
                t.wg_issued = 0;
                t.unfenced = false;
                t.turns_passed = 0;
                t.after_await = false;
                t.awaited_block = ~0u;
                t.awaited_passes = 0;
#if !defined(__SANITIZE_ADDRESS__)
                if (t.started) continue;   // its fiber waits where it exited the last block
#endif
                getcontext(&t.ctx);
                t.ctx.uc_stack.ss_sp = stack_of(i);
                t.ctx.uc_stack.ss_size = kStackBytes;
                t.ctx.uc_link = nullptr;
                makecontext(&t.ctx, fiber_main, 0);
            }
            int exited = 0;
            while (exited < rt.nthreads && !rt.failed) {
                bool ran = false;
                for (int i = 0; i < rt.nthreads && !rt.failed; ++i) {
                    Thread& t = rt.threads[i];
                    if (t.state != RUNNABLE) continue;
                    ran = true;
                    rt.current = &t;
                    rt.in_kernel = 1;
                    resume(t);
                    rt.in_kernel = 0;
                    rt.current = nullptr;
                    if (t.state == EXITED) ++exited;
                }
                if (!ran && exited < rt.nthreads && !rt.failed) report_deadlock();
            }
            char why[320];
            if (!rt.failed && !warpgroups_agree(why, sizeof why)) report("%s", why);
        }
    }
    rt.in_kernel = 0;
    rt.current = nullptr;
#ifndef MT_EMU_RUNNER
    sigaction(SIGSEGV, &rt.previous[0], nullptr);
    sigaction(SIGBUS, &rt.previous[1], nullptr);
    sigaction(SIGFPE, &rt.previous[2], nullptr);
    sigaltstack(&old_alt, nullptr);
#endif
    if (pool && rt.failed)   // threads stopped inside the kernel: their fibers start afresh next time
        for (int i = 0; i < rt.nthreads; ++i) rt.threads[i].started = false;
    release_fibers();
    free(rt.warps);
    free(rt.dyn);
    free(rt.shadow_static);
    free(rt.shadow_dyn);
    rt.warps = nullptr;
    rt.dyn = nullptr;
    rt.shadow_static = rt.shadow_dyn = nullptr;
    return rt.failed ? 1 : 0;
}

}  // namespace mt_emu

// ---------------------------------------------------------------- check="memory": one launch per process
// emulator.py writes the launch to a file: the buffers (each copied into a malloc of exactly
// its size, so AddressSanitizer guards both ends), the arguments, grid, block, dynamic
// shared memory and the blocks' order; this main() runs it and writes the buffers back. On a
// fault, ASan calls __asan_on_error first, which prints where in the grid it happened.
#ifdef MT_EMU_RUNNER
extern "C" {
void* __asan_get_report_address();
int __asan_get_report_access_type();
size_t __asan_get_report_access_size();
}
namespace mt_emu {
struct Region {
    unsigned char* base;
    unsigned long long size;
};
inline Region* regions = nullptr;
inline unsigned nregions = 0;

MT_RT inline bool read_exact(FILE* f, void* p, size_t n) { return n == 0 || fread(p, 1, n, f) == n; }

MT_RT inline int runner_main(int argc, char** argv, void (*entry_fn)(void**), const char* name) {
    if (argc != 3) {
        fprintf(stderr, "MT_EMU_ERROR: usage: %s REQUEST RESPONSE\n", argv[0]);
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    char magic[8];
    Launch cfg{};
    unsigned nargs = 0;
    if (!in || !read_exact(in, magic, 8) || std::memcmp(magic, "MTEMU02", 8) != 0 || !read_exact(in, cfg.grid, 12) ||
        !read_exact(in, cfg.block, 12) || !read_exact(in, &cfg.dynamic_shared, 8) ||
        !read_exact(in, &cfg.reverse_blocks, 4) || !read_exact(in, &nregions, 4)) {
        fprintf(stderr, "MT_EMU_ERROR: %s: unreadable launch request %s\n", name, argv[1]);
        return 2;
    }
    regions = static_cast<Region*>(calloc(nregions ? nregions : 1, sizeof(Region)));
    for (unsigned r = 0; r < nregions; ++r) {
        read_exact(in, &regions[r].size, 8);
        regions[r].base = static_cast<unsigned char*>(malloc(regions[r].size ? regions[r].size : 1));
        read_exact(in, regions[r].base, regions[r].size);
    }
    read_exact(in, &nargs, 4);
    void** args = static_cast<void**>(calloc(nargs ? nargs : 1, sizeof(void*)));
    for (unsigned i = 0; i < nargs; ++i) {
        unsigned char kind = 0;
        read_exact(in, &kind, 1);
        if (kind == 0) {  // bytes
            unsigned len = 0;
            read_exact(in, &len, 4);
            args[i] = malloc(len ? len : 1);
            read_exact(in, args[i], len);
        } else {          // a pointer into a region (or null)
            unsigned region = 0;
            unsigned long long offset = 0;
            read_exact(in, &region, 4);
            read_exact(in, &offset, 8);
            void** slot = static_cast<void**>(malloc(sizeof(void*)));
            *slot = region == 0xffffffffu ? nullptr : static_cast<void*>(regions[region].base + offset);
            args[i] = slot;
        }
    }
    fclose(in);
    static char err[8192];
    if (launch(entry_fn, name, &cfg, args, err, sizeof err) != 0) {
        fprintf(stderr, "MT_EMU_ERROR: %s\n", err);
        return 3;
    }
    FILE* out = fopen(argv[2], "wb");
    for (unsigned r = 0; r < nregions; ++r) fwrite(regions[r].base, 1, regions[r].size, out);
    fclose(out);
    return 0;
}
}  // namespace mt_emu

extern "C" __attribute__((visibility("default"))) MT_RT void __asan_on_error() {
    using namespace mt_emu;
    const uintptr_t a = reinterpret_cast<uintptr_t>(__asan_get_report_address());
    fprintf(stderr, "MT_EMU_FAULT kernel=%s", rt.kernel);
    if (rt.current)
        fprintf(stderr, " block=%u,%u,%u thread=%u,%u,%u", rt.block_idx.x, rt.block_idx.y, rt.block_idx.z,
                rt.current->idx.x, rt.current->idx.y, rt.current->idx.z);
    fprintf(stderr, " access=%s size=%zu", __asan_get_report_access_type() ? "write" : "read",
            __asan_get_report_access_size());
    long best = -1;
    long long best_off = 0, best_dist = 0;
    for (unsigned r = 0; r < nregions; ++r) {  // the nearest buffer: the access is just outside it
        const long long off = static_cast<long long>(a - reinterpret_cast<uintptr_t>(regions[r].base));
        const long long size = static_cast<long long>(regions[r].size);
        const long long dist = off < 0 ? -off : (off >= size ? off - size + 1 : 0);
        if (dist <= 4096 && (best < 0 || dist < best_dist)) {
            best = r;
            best_off = off;
            best_dist = dist;
        }
    }
    if (best >= 0) fprintf(stderr, " region=%ld offset=%lld", best, best_off);
    fprintf(stderr, "\n");
}
#endif

// ---------------------------------------------------------------- race tracker hooks
// -fsanitize=thread makes the compiler call these around every memory access of the
// kernel; we define them (and link no ThreadSanitizer runtime) to watch shared memory.
#ifdef MT_EMU_RACE
extern "C" {
MT_RT void __tsan_init() {}
MT_RT void __tsan_func_entry(void*) {}
MT_RT void __tsan_func_exit() {}
MT_RT void __tsan_ignore_thread_begin() {}
MT_RT void __tsan_ignore_thread_end() {}
MT_RT void __tsan_vptr_update(void**, void*) {}
MT_RT void __tsan_vptr_read(void**) {}
#define MT_EMU_TSAN_ACCESS(n)                                                               \
    MT_RT void __tsan_read##n(void* p) { mt_emu::track(p, n, false); }                      \
    MT_RT void __tsan_write##n(void* p) { mt_emu::track(p, n, true); }                      \
    MT_RT void __tsan_unaligned_read##n(void* p) { mt_emu::track(p, n, false); }            \
    MT_RT void __tsan_unaligned_write##n(void* p) { mt_emu::track(p, n, true); }            \
    MT_RT void __tsan_volatile_read##n(void* p) { mt_emu::track(p, n, false); }             \
    MT_RT void __tsan_volatile_write##n(void* p) { mt_emu::track(p, n, true); }             \
    MT_RT void __tsan_unaligned_volatile_read##n(void* p) { mt_emu::track(p, n, false); }   \
    MT_RT void __tsan_unaligned_volatile_write##n(void* p) { mt_emu::track(p, n, true); }
MT_EMU_TSAN_ACCESS(1)
MT_EMU_TSAN_ACCESS(2)
MT_EMU_TSAN_ACCESS(4)
MT_EMU_TSAN_ACCESS(8)
MT_EMU_TSAN_ACCESS(16)
MT_RT void __tsan_read_range(void* p, unsigned long n) { mt_emu::track(p, n, false); }
MT_RT void __tsan_write_range(void* p, unsigned long n) { mt_emu::track(p, n, true); }
}
#endif
