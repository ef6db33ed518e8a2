// host emulation of the CUDA features sparse-vs.cu uses: blocks run one after another, each thread of a block is a
// std::thread; __shared__ is a static (one block at a time), __syncthreads a block barrier, warp intrinsics a warp
// barrier around an exchange buffer, atomics under one mutex
#pragma once
#include <algorithm>
#include <condition_variable>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include "ggml.h"
#include "ggml-impl.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __CUDA_ARCH__ 900
#define GGML_CUDA_CC_VOLTA 700

struct dim3 { unsigned int x, y, z; dim3(unsigned int x = 1, unsigned int y = 1, unsigned int z = 1) : x(x), y(y), z(z) {} };
struct emu_idx { unsigned int x, y, z; };
inline thread_local emu_idx threadIdx;
inline emu_idx blockIdx;
inline dim3 blockDim, gridDim;
// a blocking barrier (no spinning: up to 512 sleeping threads on a shared machine)
struct emu_barrier {
    std::mutex mu;
    std::condition_variable cv;
    int expected, count;
    uint64_t gen = 0;
    explicit emu_barrier(int n) : expected(n), count(n) {}
    void arrive_and_wait() {
        std::unique_lock<std::mutex> l(mu);
        const uint64_t g = gen;
        if (--count == 0) { gen++; count = expected; cv.notify_all(); }
        else cv.wait(l, [&] { return gen != g; });
    }
    void arrive_and_drop() {
        std::unique_lock<std::mutex> l(mu);
        expected--;
        if (--count == 0) { gen++; count = expected; cv.notify_all(); }
    }
};
inline std::unique_ptr<emu_barrier> emu_block_bar;
inline std::vector<std::unique_ptr<emu_barrier>> emu_warp_bar;
inline uint64_t emu_xbuf[64][32];
inline std::mutex emu_atomic_mu;

inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }

struct half { uint16_t x; };
inline float __half2float(half h) { return ggml_fp16_to_fp32(h.x); }
struct uint4 { unsigned int x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return { a, b, c, d }; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline int __popc(unsigned int v) { return __builtin_popcount(v); }
inline int __ffs(unsigned int v) { return __builtin_ffs((int) v); }
template <typename T> inline T min(T a, T b) { return a < b ? a : b; }
template <typename T> inline T max(T a, T b) { return a > b ? a : b; }

inline void emu_check16(const void * p) {
    if (((uintptr_t) p) & 15u) { fprintf(stderr, "emu: misaligned 16-byte access at %p\n", p); abort(); }
}
inline uint4 emu_ld16(const void * p) { emu_check16(p); uint4 v; memcpy(&v, p, 16); return v; }
inline void emu_st16(void * p, uint4 v) { emu_check16(p); memcpy(p, &v, 16); }

template <typename T> inline T atomicAdd(T * p, T v) { std::lock_guard<std::mutex> g(emu_atomic_mu); T o = *p; *p = o + v; return o; }

template <typename F> inline uint64_t emu_warp_exchange(uint64_t mine, F && read) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    emu_xbuf[w][lane] = mine;
    emu_warp_bar[w]->arrive_and_wait();
    const uint64_t r = read(emu_xbuf[w], lane);
    emu_warp_bar[w]->arrive_and_wait();
    return r;
}
template <typename T> inline T __shfl_xor_sync(unsigned int, T v, int off, int = 32) {
    uint64_t u = 0; memcpy(&u, &v, sizeof(T));
    const uint64_t r = emu_warp_exchange(u, [&](uint64_t * buf, int lane) { return buf[lane ^ off]; });
    T o; memcpy(&o, &r, sizeof(T)); return o;
}
inline unsigned int __ballot_sync(unsigned int, bool p) {
    return (unsigned int) emu_warp_exchange(p ? 1 : 0, [](uint64_t * buf, int) {
        uint64_t m = 0; for (int l = 0; l < 32; ++l) m |= (buf[l] ? 1ull : 0ull) << l; return m; });
}
inline unsigned int __match_any_sync(unsigned int, unsigned int v) {
    return (unsigned int) emu_warp_exchange(v, [](uint64_t * buf, int lane) {
        uint64_t m = 0; for (int l = 0; l < 32; ++l) m |= (buf[l] == buf[lane] ? 1ull : 0ull) << l; return m; });
}

template <typename... P, typename... A> void emu_launch(void (*k)(P...), dim3 g, dim3 b, A... a) {
    gridDim = g; blockDim = b;
    if (b.x % 32 != 0 || b.y != 1 || b.z != 1) { fprintf(stderr, "emu: block %u\n", b.x); abort(); }
    for (unsigned int z = 0; z < g.z; ++z) for (unsigned int y = 0; y < g.y; ++y) for (unsigned int x = 0; x < g.x; ++x) {
        blockIdx = { x, y, z };
        emu_block_bar = std::make_unique<emu_barrier>(b.x);
        emu_warp_bar.clear();
        for (unsigned int w = 0; w < b.x/32; ++w) emu_warp_bar.push_back(std::make_unique<emu_barrier>(32));
        std::vector<std::thread> th;
        for (unsigned int t = 0; t < b.x; ++t) {
            th.emplace_back([&, t]() {
                threadIdx = { t, 0, 0 };
                k(static_cast<P>(a)...);
                // a thread that leaves drops out of the barriers it would meet later
                emu_block_bar->arrive_and_drop();
                emu_warp_bar[t/32]->arrive_and_drop();
            });
        }
        for (auto & t : th) t.join();
    }
}

// host side
typedef int cudaStream_t;
struct emu_pool {};
struct ggml_backend_cuda_context { emu_pool p; emu_pool & pool() { return p; } cudaStream_t stream() { return 0; } };
template <typename T> struct ggml_cuda_pool_alloc {
    T * ptr;
    ggml_cuda_pool_alloc(emu_pool &, size_t n) { ptr = (T *) malloc(std::max<size_t>(1, n*sizeof(T))); memset(ptr, 0xAB, std::max<size_t>(1, n*sizeof(T))); }
    ~ggml_cuda_pool_alloc() { free(ptr); }
    T * get() { return ptr; }
};
#define CUDA_CHECK(x) (void)(x)
inline int cudaGetLastError() { return 0; }
inline int cudaMemsetAsync(void * p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
