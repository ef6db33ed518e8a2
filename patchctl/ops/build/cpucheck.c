/* The CPU self-check of a llama.cpp build (patchctl build runs it after a CPU cmake build).
 *
 * A quantized weight is multiplied with float activations once through each extra buffer
 * type of the CPU backend (AMX, CPU_REPACK, ...: the weight layouts llama.cpp picks for a
 * model's weights unless --no-repack is given) and once from a plain CPU buffer, and the two
 * results are compared. A case is announced on stdout before it runs, so when an instruction
 * path kills the process (SIGILL, SIGSEGV) the last "start" line names it.
 *
 * Output, one line each:  cpu <feature>=<0|1> ...
 *                         buft <name>
 *                         start <buft> <type> m=<rows>
 *                         ok|wrong|skip <buft> <type> m=<rows> err=<max relative error>
 *                         done
 * Exit 0 when every case ran (wrong results included: the caller judges), 2 on a setup error.
 * Built against the tree's own ggml headers and libraries; uses public ggml API only.
 */
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K = 256, N = 64 }; /* K: a multiple of every block size (QK_K); N: AMX's 2 x TILE_N */

static const enum ggml_type TYPES[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K,
    GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,
    GGML_TYPE_F16,
};
static const int ROWS[] = {1, 4, 32}; /* decode, a small batch, a prefill tile */

static float weights[N * K];
static float activations[32 * K];

static void fill(float * x, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float) ((seed >> 9) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* out[m x N] = W[type] x A through `buft` (NULL: a plain CPU buffer); 1 when the device
 * does not support the op with the weight in that buffer type, -1 on a setup error. */
static int mul_mat(ggml_backend_t cpu, ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft,
                   enum ggml_type type, int m, float * out) {
    struct ggml_init_params wp = {ggml_tensor_overhead() * 2, NULL, true};
    struct ggml_init_params gp = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true};
    struct ggml_context * wctx = ggml_init(wp);
    struct ggml_context * gctx = ggml_init(gp);
    struct ggml_tensor * w = ggml_new_tensor_2d(wctx, type, K, N);
    struct ggml_tensor * a = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, K, m);
    struct ggml_tensor * y = ggml_mul_mat(gctx, w, a);
    ggml_backend_buffer_type_t wbuft = buft ? buft : ggml_backend_cpu_buffer_type();
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, wbuft);
    ggml_backend_buffer_t gbuf = ggml_backend_alloc_ctx_tensors(gctx, cpu);
    int rc = -1;
    /* as llama.cpp places weights: only where the device supports the op with them there */
    if (wbuf != NULL && gbuf != NULL) {
        rc = 1;
        if (buft == NULL || ggml_backend_dev_supports_op(dev, y)) {
            ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
            size_t row = ggml_row_size(type, K);
            void * q = malloc(row * N);
            ggml_quantize_chunk(type, weights, q, 0, N, K, NULL);
            ggml_backend_tensor_set(w, q, 0, row * N);
            free(q);
            ggml_backend_tensor_set(a, activations, 0, sizeof(float) * K * m);
            struct ggml_cgraph * graph = ggml_new_graph(gctx);
            ggml_build_forward_expand(graph, y);
            rc = ggml_backend_graph_compute(cpu, graph) == GGML_STATUS_SUCCESS ? 0 : -1;
            ggml_backend_tensor_get(y, out, 0, sizeof(float) * N * m);
        }
    }
    if (gbuf != NULL) ggml_backend_buffer_free(gbuf);
    if (wbuf != NULL) ggml_backend_buffer_free(wbuf);
    ggml_free(gctx);
    ggml_free(wctx);
    return rc;
}

static double max_rel_err(const float * got, const float * want, int n) {
    double diff = 0.0, scale = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double) got[i] - (double) want[i]);
        if (!(d <= diff)) diff = d; /* NaN propagates */
        if (fabs((double) want[i]) > scale) scale = fabs((double) want[i]);
    }
    return scale > 0.0 ? diff / scale : diff;
}

static int check_buft(ggml_backend_t cpu, ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) {
    const char * name = ggml_backend_buft_name(buft);
    const char * fail = getenv("PATCHCTL_CPUCHECK_FAIL"); /* simulate a crashing path */
    static float want[32 * N], got[32 * N];
    for (size_t t = 0; t < sizeof(TYPES) / sizeof(TYPES[0]); t++) {
        const char * tname = ggml_type_name(TYPES[t]);
        for (size_t r = 0; r < sizeof(ROWS) / sizeof(ROWS[0]); r++) {
            int m = ROWS[r];
            if (mul_mat(cpu, dev, NULL, TYPES[t], m, want) != 0) return -1;
            printf("start %s %s m=%d\n", name, tname, m);
            fflush(stdout);
            if (fail != NULL && strcmp(fail, name) == 0) raise(SIGILL);
            int rc = mul_mat(cpu, dev, buft, TYPES[t], m, got);
            if (rc < 0) return -1;
            double err = rc == 0 ? max_rel_err(got, want, N * m) : 0.0;
            const char * verdict = rc == 1 ? "skip" : (err <= 1e-2 ? "ok" : "wrong");
            printf("%s %s %s m=%d err=%.3g\n", verdict, name, tname, m, err);
            fflush(stdout);
        }
    }
    return 0;
}

int main(void) {
    fill(weights, N * K, 1u);
    fill(activations, 32 * K, 2u);
    printf("cpu avx2=%d avx512=%d avx512_vnni=%d avx512_bf16=%d amx_int8=%d\n", ggml_cpu_has_avx2(),
           ggml_cpu_has_avx512(), ggml_cpu_has_avx512_vnni(), ggml_cpu_has_avx512_bf16(),
           ggml_cpu_has_amx_int8());
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu == NULL || dev == NULL) {
        fprintf(stderr, "cpucheck: no CPU backend\n");
        return 2;
    }
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    ggml_backend_dev_get_extra_bufts_t get_extra = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    ggml_backend_buffer_type_t * extra = get_extra ? get_extra(dev) : NULL;
    for (ggml_backend_buffer_type_t * b = extra; b != NULL && *b != NULL; b++) {
        printf("buft %s\n", ggml_backend_buft_name(*b));
    }
    fflush(stdout);
    for (ggml_backend_buffer_type_t * b = extra; b != NULL && *b != NULL; b++) {
        if (check_buft(cpu, dev, *b) != 0) {
            fprintf(stderr, "cpucheck: could not set up a case of %s\n", ggml_backend_buft_name(*b));
            return 2;
        }
    }
    ggml_backend_free(cpu);
    printf("done\n");
    return 0;
}
