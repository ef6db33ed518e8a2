// sparse_vs_probe: one KV group's vertical-slash selection through ggml's ops on the CPU backend, and its results.
//
// Built by tests/evals/dca/test_sparse_vs.py against a tree with ggml_sparse_vs_acc / ggml_sparse_vs_mask. The graph
// is the one llama_sparse_select builds (src/llama-sparse.cpp): the last L = min(last_q, T) queries of the group,
// contiguous as [D, L, G]; their per-row log-sum-exp over the whole window from ggml_flash_attn_ext_lse; the scores
// ggml_mul_mat(keys of a chunk, queries) chunk by chunk, each added into the accumulator by ggml_sparse_vs_acc; then
// ggml_sparse_vs_mask. From the same accumulator, ggml_sparse_vs_select (the selection in compact form, as
// llama_sparse_select builds it) and two flash attentions with LSE over all T queries, each with n_kv_max = vertical +
// slash: one with the sparse mask as its mask, one with the window's own mask and the selection
// (ggml_flash_attn_ext_set_sparse_vs), which must agree.
//
// usage: sparse_vs_probe IN OUT [BACKEND]     (BACKEND: a ggml backend name such as CUDA0; default the CPU)
//
// IN (little endian):
//   char[8] "SPARSVS1"
//   int32[16]: n_threads, D, T, n_rows, G, n_kv, n_self, lo_k, lo_self, last_q, vertical, slash, has_mask,
//              kv_type (ggml_type: 0 F32, 1 F16, 8 Q8_0), chunk, 0
//   float[2]:  scale, 0
//   f32 q[G][T][D], f32 k[n_kv][D], f32 v[n_kv][D]
//   if has_mask: f16 mask[n_rows][n_kv]
//   f16 mask_self[n_rows][n_self]
// OUT:
//   f32 acc[n_kv + n_dg]            (vsum, then dsum; n_dg = max(1, lo_self + n_self - lo_k))
//   f32 mask[n_rows][n_kv]          (the sparse mask as f32: 0 or the mask's value where kept, -inf elsewhere)
//   f32 k[n_kv][D]                  (the keys as the ops saw them, after conversion to kv_type and back)
//   int32 n_sel, int32 sel[n_sel]   (ggml_sparse_vs_select: [W, 3], anchors, column bitmap, diagonal bitmap)
//   int32 n_o, f32 o_mask[n_o], f32 lse_mask[T*G], f32 o_sel[n_o], f32 lse_sel[T*G]
//                                   (the two flash attentions: O [T][G][D], LSE [T][G])
//
// Exit status: 0 ok, 2 usage / IO error, 3 bad input.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_NAME "sparse_vs_probe"
#include "probe_io.h"

enum { N_INTS = 16, N_FLOATS = 2 };

// host f32 values -> t (any type, contiguous) on its backend
static void set_converted(struct ggml_tensor * t, const float * src) {
    const size_t nbytes = ggml_nbytes(t);
    void * tmp = malloc(nbytes);
    if (!tmp) {
        die(2, "out of memory");
    }
    ggml_quantize_chunk(t->type, src, tmp, 0, ggml_nrows(t), t->ne[0], NULL);
    ggml_backend_tensor_set(t, tmp, 0, nbytes);
    free(tmp);
}

// t (F32, F16 or quantized, contiguous) from its backend to f as f32 values
static void dump_as_f32(FILE * f, const struct ggml_tensor * t) {
    const int64_t n = ggml_nelements(t);
    const size_t nbytes = ggml_nbytes(t);
    void * raw = malloc(nbytes);
    float * tmp = malloc((size_t) n * sizeof(float));
    if (!raw || !tmp) {
        die(2, "out of memory");
    }
    ggml_backend_tensor_get(t, raw, 0, nbytes);
    if (t->type == GGML_TYPE_F32) {
        memcpy(tmp, raw, nbytes);
    } else {
        ggml_get_type_traits(t->type)->to_float(raw, tmp, n);
    }
    write_exact(f, tmp, (size_t) n * sizeof(float));
    free(tmp);
    free(raw);
}

static void * read_alloc(FILE * f, size_t n) {
    void * p = malloc(n ? n : 1);
    if (!p) {
        die(2, "out of memory");
    }
    read_exact(f, p, n);
    return p;
}

int main(int argc, char ** argv) {
    if (argc != 3 && argc != 4) {
        die(2, "usage: sparse_vs_probe IN OUT [BACKEND]");
    }
    FILE * in = fopen(argv[1], "rb");
    if (!in) {
        die(2, "cannot open input");
    }
    int32_t p[N_INTS];
    float fl[N_FLOATS];
    expect_magic(in, "SPARSVS1");
    read_exact(in, p, sizeof(p));
    read_exact(in, fl, sizeof(fl));
    const int n_threads = p[0];
    const int64_t D = p[1], T = p[2], n_rows = p[3], G = p[4], n_kv = p[5], n_self = p[6], lo_k = p[7], lo_self = p[8];
    const int64_t last_q = p[9], vertical = p[10], slash = p[11], has_mask = p[12], kv_type = p[13], chunk = p[14];
    const float scale = fl[0];
    if (n_threads < 1 || D < 1 || T < 1 || n_rows < T || G < 1 || n_kv < 1 || n_self < 1 || lo_k < 0 || lo_self < 0 ||
        last_q < 1 || last_q > T || vertical < 0 || slash < 0 || chunk < 1) {
        die(3, "bad shape");
    }
    if (kv_type != GGML_TYPE_F32 && kv_type != GGML_TYPE_F16 && kv_type != GGML_TYPE_Q8_0) {
        die(3, "kv_type must be F32, F16 or Q8_0");
    }

    float * q_h = read_alloc(in, (size_t) (G*T*D) * sizeof(float));
    float * k_h = read_alloc(in, (size_t) (n_kv*D) * sizeof(float));
    float * v_h = read_alloc(in, (size_t) (n_kv*D) * sizeof(float));
    ggml_fp16_t * mask_h = has_mask ? read_alloc(in, (size_t) (n_rows*n_kv) * sizeof(ggml_fp16_t)) : NULL;
    ggml_fp16_t * self_h = read_alloc(in, (size_t) (n_rows*n_self) * sizeof(ggml_fp16_t));
    fclose(in);

    // the backend: the CPU, or the one named (e.g. CUDA0)
    ggml_backend_t backend = argc == 4 ? ggml_backend_init_by_name(argv[3], NULL) : ggml_backend_cpu_init();
    if (!backend) {
        die(2, "cannot initialise the backend");
    }
    if (argc == 3) {
        ggml_backend_cpu_set_n_threads(backend, n_threads);
    }

    struct ggml_init_params ip_in = { 8*ggml_tensor_overhead(), NULL, true };
    struct ggml_context * ctx_in = ggml_init(ip_in);
    struct ggml_tensor * q = ggml_new_tensor_3d(ctx_in, GGML_TYPE_F32, D, T, G);
    struct ggml_tensor * k = ggml_new_tensor_2d(ctx_in, (enum ggml_type) kv_type, D, n_kv);
    struct ggml_tensor * v = ggml_new_tensor_2d(ctx_in, (enum ggml_type) kv_type, D, n_kv);
    struct ggml_tensor * mask = has_mask ? ggml_new_tensor_2d(ctx_in, GGML_TYPE_F16, n_kv, n_rows) : NULL;
    struct ggml_tensor * mask_self = ggml_new_tensor_2d(ctx_in, GGML_TYPE_F16, n_self, n_rows);
    ggml_backend_buffer_t buf_in = ggml_backend_alloc_ctx_tensors(ctx_in, backend);
    if (!buf_in) {
        die(2, "cannot allocate the inputs");
    }
    ggml_backend_tensor_set(q, q_h, 0, ggml_nbytes(q));
    set_converted(k, k_h);
    set_converted(v, v_h);
    if (mask) {
        ggml_backend_tensor_set(mask, mask_h, 0, ggml_nbytes(mask));
    }
    ggml_backend_tensor_set(mask_self, self_h, 0, ggml_nbytes(mask_self));

    // the graph of llama_sparse_select
    struct ggml_init_params ip = { 4096*ggml_tensor_overhead() + ggml_graph_overhead_custom(4096, false), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    const int64_t L = last_q < T ? last_q : T;
    struct ggml_tensor * ql = ggml_cont(ctx, ggml_view_3d(ctx, q, D, L, G, q->nb[1], q->nb[2], (size_t) (T - L)*q->nb[1]));
    struct ggml_tensor * ml = mask ? ggml_view_2d(ctx, mask, n_kv, L, mask->nb[1], (size_t) (T - L)*mask->nb[1]) : NULL;
    struct ggml_tensor * fa = ggml_flash_attn_ext_lse(ctx, ql, k, v, ml, scale, 0.0f, 0.0f);
    ggml_prec_set_acc(fa, GGML_PREC_F32);
    struct ggml_tensor * lse = ggml_flash_attn_ext_lse_view_lse(ctx, fa);
    struct ggml_tensor * acc = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_kv + ggml_sparse_vs_n_dg(mask_self, lo_k, lo_self));
    for (int64_t j0 = 0; j0 < n_kv; j0 += chunk) {
        const int64_t n_c = n_kv - j0 < chunk ? n_kv - j0 : chunk;
        struct ggml_tensor * kc = ggml_view_2d(ctx, k, D, n_c, k->nb[1], (size_t) j0*k->nb[1]);
        struct ggml_tensor * kq = ggml_mul_mat(ctx, kc, ql);
        ggml_prec_set_acc(kq, GGML_PREC_F32);
        acc = ggml_sparse_vs_acc(ctx, acc, kq, lse, mask, mask_self, n_kv, T, j0, lo_k, lo_self, scale);
    }
    struct ggml_tensor * out = ggml_sparse_vs_mask(ctx, acc, mask, mask_self, n_kv, T, lo_k, lo_self,
            (int32_t) vertical, (int32_t) slash, 30, 100);
    struct ggml_tensor * sel = ggml_sparse_vs_select(ctx, acc, mask, mask_self, n_kv, T, lo_k, lo_self,
            (int32_t) vertical, (int32_t) slash, 30, 100);
    const int32_t n_kv_max = (int32_t) (vertical + slash < n_kv ? vertical + slash : n_kv);
    struct ggml_tensor * fa_m = ggml_flash_attn_ext_lse(ctx, q, k, v, out, scale, 0.0f, 0.0f);
    struct ggml_tensor * fa_s = ggml_flash_attn_ext_lse(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
    ggml_prec_set_acc(fa_m, GGML_PREC_F32);
    ggml_prec_set_acc(fa_s, GGML_PREC_F32);
    ggml_flash_attn_ext_set_n_kv_max(fa_m, n_kv_max);
    ggml_flash_attn_ext_set_n_kv_max(fa_s, n_kv_max);
    ggml_flash_attn_ext_set_sparse_vs(fa_s, sel);
    struct ggml_tensor * o_m = ggml_flash_attn_ext_lse_view_o(ctx, fa_m);
    struct ggml_tensor * l_m = ggml_flash_attn_ext_lse_view_lse(ctx, fa_m);
    struct ggml_tensor * o_s = ggml_flash_attn_ext_lse_view_o(ctx, fa_s);
    struct ggml_tensor * l_s = ggml_flash_attn_ext_lse_view_lse(ctx, fa_s);
    ggml_set_output(acc);
    ggml_set_output(out);
    ggml_set_output(sel);
    ggml_set_output(fa_m);
    ggml_set_output(fa_s);

    struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 4096, false);
    ggml_build_forward_expand(gf, out);
    ggml_build_forward_expand(gf, sel);
    ggml_build_forward_expand(gf, o_m);
    ggml_build_forward_expand(gf, l_m);
    ggml_build_forward_expand(gf, o_s);
    ggml_build_forward_expand(gf, l_s);
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        if (!ggml_backend_supports_op(backend, ggml_graph_node(gf, i))) {
            fprintf(stderr, "sparse_vs_probe: %s does not run %s\n", ggml_backend_name(backend),
                    ggml_op_desc(ggml_graph_node(gf, i)));
            die(3, "unsupported op");
        }
    }
    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
    if (!ggml_gallocr_alloc_graph(galloc, gf)) {
        die(2, "cannot allocate the graph");
    }
    if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
        die(2, "graph compute failed");
    }

    FILE * fo = fopen(argv[2], "wb");
    if (!fo) {
        die(2, "cannot open output");
    }
    dump_as_f32(fo, acc);
    dump_as_f32(fo, out);
    dump_as_f32(fo, k);
    {
        const int32_t n_sel = (int32_t) ggml_nelements(sel);
        int32_t * raw = malloc(ggml_nbytes(sel));
        if (!raw) {
            die(2, "out of memory");
        }
        ggml_backend_tensor_get(sel, raw, 0, ggml_nbytes(sel));
        write_exact(fo, &n_sel, sizeof(n_sel));
        write_exact(fo, raw, ggml_nbytes(sel));
        free(raw);
    }
    const int32_t n_o = (int32_t) ggml_nelements(o_m);
    write_exact(fo, &n_o, sizeof(n_o));
    dump_as_f32(fo, o_m);
    dump_as_f32(fo, l_m);
    dump_as_f32(fo, o_s);
    dump_as_f32(fo, l_s);
    if (fclose(fo) != 0) {
        die(2, "cannot write output");
    }
    ggml_gallocr_free(galloc);
    ggml_free(ctx);
    ggml_backend_buffer_free(buf_in);
    ggml_free(ctx_in);
    ggml_backend_free(backend);
    free(q_h); free(k_h); free(v_h); free(mask_h); free(self_h);
    return 0;
}
