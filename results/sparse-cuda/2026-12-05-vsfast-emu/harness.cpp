// runs the CUDA kernels of sparse-vs.cu (emulated on the host) against the CPU ops on test-backend-ops' cases
#include "shim.h"
#include "ggml-cpu.h"
#include <cstdio>
#include <cfloat>
#include <random>
#include <string>

void ggml_cuda_op_sparse_vs_acc(ggml_backend_cuda_context & ctx, ggml_tensor * dst);
void ggml_cuda_op_sparse_vs_mask(ggml_backend_cuda_context & ctx, ggml_tensor * dst);

struct shape { int64_t n_kv, T, n_rows, lo_k, lo_self, n_self; bool mask; int64_t mask_pad = 0; bool none = false; };
static shape plain(int64_t n_kv, int64_t T, int64_t n_rows, bool m) { return { n_kv, T, n_rows, 0, 0, n_kv, m }; }
static shape window(int64_t n_kv, int64_t T, int64_t n_rows, int64_t lo_k, bool m) { return { n_kv, T, n_rows, lo_k, lo_k + n_kv + 37, T + 5, m }; }
static shape padded(shape s, int64_t p) { s.mask_pad = p; return s; }
static shape none(shape s) { s.none = true; return s; }

static float hu(uint64_t a, uint64_t b, uint64_t salt) {
    uint64_t x = a*0x9E3779B97F4A7C15ull ^ (b + salt*0xD1B54A32D192ED03ull);
    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 27; x *= 0x94D049BB133111EBull; x ^= x >> 31;
    return (float) (x >> 40) * (1.0f/16777216.0f);
}

static void init_masks(const shape & s, ggml_tensor * ms, ggml_tensor * m) {
    auto cell = [&](int64_t t) { return s.lo_self + s.n_self - s.T + t; };
    ggml_fp16_t * d = (ggml_fp16_t *) ms->data;
    for (int64_t i = 0; i < ggml_nelements(ms); ++i) d[i] = ggml_fp32_to_fp16(-INFINITY);
    for (int64_t t = 0; t < s.T; ++t) for (int64_t j = 0; j <= cell(t) - s.lo_self; ++j) d[t*s.n_self + j] = ggml_fp32_to_fp16(0.0f);
    if (!m) return;
    const int64_t ne0 = m->ne[0];
    ggml_fp16_t * v = (ggml_fp16_t *) m->data;
    for (int64_t i = 0; i < ggml_nelements(m); ++i) v[i] = ggml_fp32_to_fp16(-INFINITY);
    for (int64_t t = 0; t < s.T; ++t) {
        if (t % 13 == 7 || s.none) continue;
        for (int64_t j = 0; j < s.n_kv; ++j) {
            const bool hole = ((j/37 + t/5) % 7 == 3) || hu(t, j, 1) < 0.05f;
            if (s.lo_k + j <= cell(t) && !hole) v[t*ne0 + j] = ggml_fp32_to_fp16(hu(t, j, 2) < 0.1f ? -2.0f*hu(t, j, 3) : 0.0f);
        }
        for (int64_t j = s.n_kv; j < ne0; ++j) v[t*ne0 + j] = ggml_fp32_to_fp16(0.0f);
    }
}

static ggml_context * new_ctx() {
    ggml_init_params p = { (size_t) 1 << 30, nullptr, false };
    return ggml_init(p);
}

static ggml_tensor * new_masks(ggml_context * ctx, const shape & s, ggml_tensor ** ms, ggml_tensor ** mbase) {
    *ms = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, s.n_self, s.n_rows, 1, 1);
    *mbase = nullptr;
    if (!s.mask) return nullptr;
    ggml_tensor * m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, s.n_kv + s.mask_pad, s.n_rows, 1, 1);
    *mbase = m;
    if (s.mask_pad) m = ggml_view_2d(ctx, m, s.n_kv, s.n_rows, m->nb[1], 0);
    return m;
}

static int n_fail = 0, n_ok = 0;

static void test_mask(shape s, int vertical, int slash, int levels = 16, bool ulp = false) {
    ggml_context * ctx = new_ctx();
    ggml_tensor * ms, * mb; ggml_tensor * m = new_masks(ctx, s, &ms, &mb);
    const int64_t n_dg = ggml_sparse_vs_n_dg(ms, s.lo_k, s.lo_self);
    ggml_tensor * acc = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, s.n_kv + n_dg);
    ggml_tensor * out = ggml_sparse_vs_mask(ctx, acc, m, ms, s.n_kv, s.T, s.lo_k, s.lo_self, vertical, slash, 30, 100);
    init_masks(s, ms, mb);
    std::mt19937 gen(0x5C); std::uniform_int_distribution<int> level(0, levels - 1);
    float * a = (float *) acc->data;
    for (int64_t i = 0; i < ggml_nelements(acc); ++i) a[i] = ulp ? 1.0f + level(gen)*FLT_EPSILON : level(gen)*0.25f;
    ggml_cgraph * gf = ggml_new_graph(ctx); ggml_build_forward_expand(gf, out);
    ggml_graph_compute_with_ctx(ctx, gf, 2);
    std::vector<uint16_t> ref((uint16_t *) out->data, (uint16_t *) out->data + ggml_nelements(out));
    memset(out->data, 0x55, ggml_nbytes(out));
    ggml_backend_cuda_context cctx;
    ggml_cuda_op_sparse_vs_mask(cctx, out);
    const bool ok = memcmp(ref.data(), out->data, ggml_nbytes(out)) == 0;
    int64_t nd = 0; for (size_t i = 0; i < ref.size(); ++i) nd += ref[i] != ((uint16_t *) out->data)[i];
    printf("%s MASK n_kv=%ld T=%ld n_rows=%ld lo_k=%ld mask=%d pad=%ld none=%d v=%d s=%d levels=%d ulp=%d diff=%ld\n",
        ok ? "OK  " : "FAIL", s.n_kv, s.T, s.n_rows, s.lo_k, s.mask, s.mask_pad, s.none, vertical, slash, levels, ulp, nd);
    (ok ? n_ok : n_fail)++;
    ggml_free(ctx);
}

static void test_acc(shape s, int64_t L, int64_t G, int64_t n_c) {
    ggml_context * ctx = new_ctx();
    ggml_tensor * ms, * mb; ggml_tensor * m = new_masks(ctx, s, &ms, &mb);
    const int64_t n_dg = ggml_sparse_vs_n_dg(ms, s.lo_k, s.lo_self);
    ggml_tensor * acc = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, s.n_kv + n_dg);
    ggml_tensor * lse = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, G, L, 1);
    std::vector<ggml_tensor *> nodes;
    ggml_tensor * out = acc;
    std::mt19937 gen(0x5B); std::normal_distribution<float> nd(0.0f, 1.0f); std::uniform_real_distribution<float> u(-16.0f, 16.0f);
    for (int64_t j0 = 0; j0 < s.n_kv; j0 += n_c) {
        ggml_tensor * kq = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, std::min(n_c, s.n_kv - j0), L, G, 1);
        for (int64_t i = 0; i < ggml_nelements(kq); ++i) ((float *) kq->data)[i] = u(gen);
        out = ggml_sparse_vs_acc(ctx, out, kq, lse, m, ms, s.n_kv, s.T, j0, s.lo_k, s.lo_self, 0.125f);
        nodes.push_back(out);
    }
    init_masks(s, ms, mb);
    for (int64_t i = 0; i < ggml_nelements(lse); ++i) ((float *) lse->data)[i] = i % 17 == 9 ? -INFINITY : logf((float) s.n_kv) + nd(gen);
    for (int64_t i = 0; i < ggml_nelements(acc); ++i) ((float *) acc->data)[i] = 100.0f + (i % 100);
    std::vector<float> init((float *) acc->data, (float *) acc->data + ggml_nelements(acc));
    ggml_cgraph * gf = ggml_new_graph(ctx); ggml_build_forward_expand(gf, out);
    ggml_graph_compute_with_ctx(ctx, gf, 2);
    std::vector<float> ref((float *) acc->data, (float *) acc->data + ggml_nelements(acc));
    memcpy(acc->data, init.data(), ggml_nbytes(acc));
    ggml_backend_cuda_context cctx;
    for (ggml_tensor * n : nodes) ggml_cuda_op_sparse_vs_acc(cctx, n);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) { const double d = ((float *) acc->data)[i] - ref[i]; num += d*d; den += (double) ref[i]*ref[i]; }
    const double nmse = den > 0 ? num/den : num;
    const bool ok = nmse <= 1e-6;
    printf("%s ACC n_kv=%ld T=%ld n_rows=%ld lo_k=%ld mask=%d pad=%ld L=%ld G=%ld n_c=%ld nmse=%.3g\n",
        ok ? "OK  " : "FAIL", s.n_kv, s.T, s.n_rows, s.lo_k, s.mask, s.mask_pad, L, G, n_c, nmse);
    (ok ? n_ok : n_fail)++;
    ggml_free(ctx);
}

int main(int argc, char ** argv) {
    const std::string which = argc > 1 ? argv[1] : "all";
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (which == "quick") {
        test_mask(plain(20000, 64, 70, true), 5000, 9000, 1);
        test_mask(plain(13, 9, 9, true), 13, 21);
    }
    if (which == "align") {
        for (int64_t pad : { 1, 3, 8 }) test_mask(padded(plain(4099, 100, 104, true), pad), 700, 900);
        test_mask(plain(13, 9, 9, true), 13, 21);
        test_mask(plain(5, 5, 7, true), 3, 2);
        test_mask(plain(8195, 33, 40, true), 100, 100);
    }
    if (which == "all" || which == "acc") {
        for (bool mask : { true, false }) {
            for (int64_t G : { 1, 4 }) {
                test_acc(plain(1000, 100, 104, mask), 64, G, 384);
                test_acc(window(3000, 70, 72, 300, mask), 64, G, 700);
                test_acc(window(777, 16, 16, 5, mask), 16, G, 777);
            }
        }
        for (int64_t pad : { 1, 3 }) test_acc(padded(plain(4099, 100, 104, true), pad), 64, 3, 1000);
        test_acc(plain(5000, 100, 104, true), 61, 7, 1999);
        test_acc(window(2049, 30, 32, 100, false), 13, 5, 2049);
    }
    if (which == "all" || which == "mask") {
        for (bool mask : { true, false }) {
            test_mask(plain(1000, 100, 104, mask), 100, 150);
            test_mask(window(3000, 70, 72, 300, mask), 200, 64);
            test_mask(window(777, 16, 16, 5, mask), 10, 10);
            test_mask(plain(20000, 64, 70, mask), 5000, 9000, 1);
            test_mask(plain(20000, 64, 70, mask), 5000, 9000, 2);
            test_mask(plain(20000, 64, 70, mask), 5000, 9000, 16, true);
            test_mask(plain(20001, 64, 64, mask), 12345, 15000);
            test_mask(window(9003, 40, 45, 1000, mask), 4500, 100, 3);
            test_mask(plain(8195, 33, 40, mask), 0, 0);
            test_mask(plain(5, 5, 7, mask), 3, 2);
            test_mask(plain(13, 9, 9, mask), 13, 21);
            test_mask(window(7, 3, 4, 2, mask), 100, 100, 1);
        }
        test_mask(plain(10000, 32, 32, false), 10000, 10000, 1);
        test_mask(plain(10000, 32, 32, false), 9999, 9999, 2);
        test_mask(plain(10000, 32, 32, false), 1 << 30, 1 << 30);
        for (int64_t pad : { 1, 3, 8 }) test_mask(padded(plain(4099, 100, 104, true), pad), 700, 900);
        test_mask(none(plain(3000, 50, 64, true)), 100, 100);
        test_mask(none(window(3000, 50, 64, 7, true)), 10, 0);
    }
    printf("%d ok, %d failed\n", n_ok, n_fail);
    return n_fail ? 1 : 0;
}
