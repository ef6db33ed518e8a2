// fa_lse_probe: run ggml flash attention once on the CPU backend and dump the results.
//
// Built by tests/evals/dca/test_fa_lse.py against a given llama.cpp tree (see tests/evals/dca/conftest.py).
// Without -DPROBE_LSE it uses only ggml_flash_attn_ext, so it also compiles against an unpatched
// tree; with -DPROBE_LSE it can also run ggml_flash_attn_ext_lse (0078-dca).
//
// usage: fa_lse_probe IN OUT
//
// IN (little endian):
//   char[8] "FALSEPB1"
//   int32[16]: op (0 = ggml_flash_attn_ext, 1 = ggml_flash_attn_ext_lse, 2 = ggml_flash_attn_ext_lse over the
//              keys [0, n_kv/2) and [n_kv/2, n_kv) merged by ggml_flash_attn_ext_lse_merge, a sink set added to
//              the first half only; 3 = op 2 with the sinks added to both halves, which the merge must refuse:
//              an abort), n_threads, Dk, Dv, n_kv, n_batch,
//              H, H_kv, ne3, kv_type (ggml_type: 0 F32, 1 F16, 8 Q8_0), has_mask, n_sink_sets, use_ref, 0, 0, 0
//   float[4]:  scale, max_bias, logit_softcap, 0
//   f32 q[ne3][H][n_batch][Dk], f32 k[ne3][H_kv][n_kv][Dk], f32 v[ne3][H_kv][n_kv][Dv]
//   if has_mask: f16 mask[ne3][n_batch][n_kv]
//   f32 sinks[n_sink_sets][H]
// OUT:
//   f32 O[ne3][n_batch][H][Dv]                      (the op's result as is, no sinks)
//   if op >= 1: f32 LSE[ne3][n_batch][H]
//   for each sink set: f32 O[ne3][n_batch][H][Dv]   (same op with ggml_flash_attn_ext_add_sinks)
//                      and if op >= 1: f32 LSE[ne3][n_batch][H]
//   f32 k and v as the kernel saw them (after conversion to kv_type and back)
//
// Exit status: 0 ok, 2 usage / IO error, 3 bad input.

#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_NAME "fa_lse_probe"
#include "probe_io.h"

enum { N_INTS = 16, N_FLOATS = 4 };

struct probe_params {
    int32_t op, n_threads, dk, dv, n_kv, n_batch, n_head, n_head_kv, ne3, kv_type, has_mask, n_sink_sets, use_ref;
    float scale, max_bias, softcap;
};

static struct probe_params read_params(FILE * f) {
    int32_t ints[N_INTS];
    float floats[N_FLOATS];
    expect_magic(f, "FALSEPB1");
    read_exact(f, ints, sizeof(ints));
    read_exact(f, floats, sizeof(floats));
    struct probe_params p = {
        ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7], ints[8], ints[9], ints[10], ints[11], ints[12],
        floats[0], floats[1], floats[2],
    };
    if (p.op < 0 || p.op > 3) {
        die(3, "op must be 0, 1, 2 or 3");
    }
#ifndef PROBE_LSE
    if (p.op != 0) {
        die(3, "op 1/2 (ggml_flash_attn_ext_lse[_merge]) requested but the probe was built without -DPROBE_LSE");
    }
#endif
    if (p.op >= 2 && ints[4] < 2) {
        die(3, "op 2/3 need n_kv >= 2");
    }
    if (p.n_threads < 1 || p.dk < 1 || p.dv < 1 || p.n_kv < 1 || p.n_batch < 1 || p.n_head < 1 || p.n_head_kv < 1 ||
        p.ne3 < 1 || p.n_head % p.n_head_kv != 0 || p.n_sink_sets < 0) {
        die(3, "bad shape");
    }
    if (p.kv_type != GGML_TYPE_F32 && p.kv_type != GGML_TYPE_F16 && p.kv_type != GGML_TYPE_Q8_0) {
        die(3, "kv_type must be F32, F16 or Q8_0");
    }
    return p;
}

// Read n f32 values from f and store them into t (F32, F16 or quantized, contiguous).
static void load_converted(FILE * f, struct ggml_tensor * t) {
    const int64_t n = ggml_nelements(t);
    float * tmp = malloc((size_t) n * sizeof(float));
    if (!tmp) {
        die(2, "out of memory");
    }
    read_exact(f, tmp, (size_t) n * sizeof(float));
    ggml_quantize_chunk(t->type, tmp, t->data, 0, ggml_nrows(t), t->ne[0], NULL);
    free(tmp);
}

// Write t (F32, F16 or quantized, contiguous) to f as f32 values.
static void dump_as_f32(FILE * f, const struct ggml_tensor * t) {
    const int64_t n = ggml_nelements(t);
    float * tmp = malloc((size_t) n * sizeof(float));
    if (!tmp) {
        die(2, "out of memory");
    }
    if (t->type == GGML_TYPE_F32) {
        memcpy(tmp, t->data, (size_t) n * sizeof(float));
    } else {
        ggml_get_type_traits(t->type)->to_float(t->data, tmp, n);
    }
    write_exact(f, tmp, (size_t) n * sizeof(float));
    free(tmp);
}

struct inputs {
    struct ggml_tensor * q, * k, * v, * mask;
};

static struct inputs load_inputs(struct ggml_context * ctx, FILE * f, const struct probe_params * p) {
    struct inputs in;
    in.q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, p->dk, p->n_batch, p->n_head, p->ne3);
    in.k = ggml_new_tensor_4d(ctx, (enum ggml_type) p->kv_type, p->dk, p->n_kv, p->n_head_kv, p->ne3);
    in.v = ggml_new_tensor_4d(ctx, (enum ggml_type) p->kv_type, p->dv, p->n_kv, p->n_head_kv, p->ne3);
    in.mask = p->has_mask ? ggml_new_tensor_4d(ctx, GGML_TYPE_F16, p->n_kv, p->n_batch, 1, p->ne3) : NULL;
    read_exact(f, in.q->data, ggml_nbytes(in.q));
    load_converted(f, in.k);
    load_converted(f, in.v);
    if (in.mask) {
        read_exact(f, in.mask->data, ggml_nbytes(in.mask));
    }
    return in;
}

static void compute(struct ggml_context * ctx, struct ggml_tensor * out, const struct probe_params * p) {
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    struct ggml_cplan plan = ggml_graph_plan(gf, p->n_threads, NULL);
    plan.use_ref = p->use_ref != 0;
    uint8_t * work = plan.work_size ? malloc(plan.work_size) : NULL;
    if (plan.work_size && !work) {
        die(2, "out of memory");
    }
    plan.work_data = work;
    if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS) {
        die(2, "ggml_graph_compute failed");
    }
    free(work);
}

#ifdef PROBE_LSE
// keys [i0, i0 + n): views of K and V, a contiguous copy of the mask's columns (FA takes a contiguous mask)
static struct ggml_tensor * fa_lse_keys(struct ggml_context * ctx, const struct inputs * in, const struct probe_params * p,
                                        int64_t i0, int64_t n) {
    struct ggml_tensor * k = ggml_view_4d(ctx, in->k, in->k->ne[0], n, in->k->ne[2], in->k->ne[3],
                                          in->k->nb[1], in->k->nb[2], in->k->nb[3], (size_t) i0 * in->k->nb[1]);
    struct ggml_tensor * v = ggml_view_4d(ctx, in->v, in->v->ne[0], n, in->v->ne[2], in->v->ne[3],
                                          in->v->nb[1], in->v->nb[2], in->v->nb[3], (size_t) i0 * in->v->nb[1]);
    struct ggml_tensor * m = NULL;
    if (in->mask) {
        m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, n, in->mask->ne[1], in->mask->ne[2], in->mask->ne[3]);
        for (int64_t row = 0; row < ggml_nrows(m); ++row) {
            memcpy((char *) m->data + row * m->nb[1], (const char *) in->mask->data + row * in->mask->nb[1] + i0 * sizeof(ggml_fp16_t),
                   (size_t) n * sizeof(ggml_fp16_t));
        }
    }
    return ggml_flash_attn_ext_lse(ctx, in->q, k, v, m, p->scale, p->max_bias, p->softcap);
}
#endif

// Build the requested op; returns the O tensor and sets *lse (op 1 and 2 only).
static struct ggml_tensor * build_fa(struct ggml_context * ctx, const struct inputs * in, const struct probe_params * p,
                                     struct ggml_tensor * sinks, struct ggml_tensor ** lse) {
    *lse = NULL;
#ifdef PROBE_LSE
    if (p->op == 1) {
        struct ggml_tensor * res = ggml_flash_attn_ext_lse(ctx, in->q, in->k, in->v, in->mask, p->scale, p->max_bias, p->softcap);
        if (sinks) {
            ggml_flash_attn_ext_add_sinks(res, sinks);
        }
        struct ggml_tensor * o = ggml_flash_attn_ext_lse_view_o(ctx, res);
        *lse = ggml_flash_attn_ext_lse_view_lse(ctx, res);
        // the contract: the LSE slab starts right after the ne3 O slabs
        if ((char *) (*lse)->data != (char *) res->data + (size_t) p->ne3 * res->nb[3] ||
            ggml_nelements(*lse) != (int64_t) p->ne3 * p->n_batch * p->n_head || !ggml_is_contiguous(*lse) ||
            ggml_nbytes(o) != (size_t) p->ne3 * res->nb[3] || o->data != res->data) {
            die(3, "ggml_flash_attn_ext_lse views do not match the documented layout");
        }
        compute(ctx, res, p);
        return o;
    }
    if (p->op == 2 || p->op == 3) {
        const int64_t half = p->n_kv / 2;
        struct ggml_tensor * a = fa_lse_keys(ctx, in, p, 0, half);
        struct ggml_tensor * b = fa_lse_keys(ctx, in, p, half, p->n_kv - half);
        if (sinks) {
            // the sinks belong to the softmax once: to one part of the merge (op 3: to both, refused)
            ggml_flash_attn_ext_add_sinks(a, sinks);
            if (p->op == 3) {
                ggml_flash_attn_ext_add_sinks(b, sinks);
            }
        }
        struct ggml_tensor * res = ggml_flash_attn_ext_lse_merge(ctx, a, b);
        *lse = ggml_flash_attn_ext_lse_view_lse(ctx, res);
        compute(ctx, res, p);
        return ggml_flash_attn_ext_lse_view_o(ctx, res);
    }
#endif
    struct ggml_tensor * o = ggml_flash_attn_ext(ctx, in->q, in->k, in->v, in->mask, p->scale, p->max_bias, p->softcap);
    if (sinks) {
        ggml_flash_attn_ext_add_sinks(o, sinks);
    }
    compute(ctx, o, p);
    return o;
}

static size_t context_size(const struct probe_params * p) {
    const size_t q = (size_t) p->dk * p->n_batch * p->n_head * p->ne3 * 4;
    const size_t kv = (size_t) (p->dk + p->dv) * p->n_kv * p->n_head_kv * p->ne3 * 4;
    const size_t o = (size_t) p->dv * p->n_head * p->n_batch * (p->ne3 + 1) * 4;
    const size_t mask = (size_t) p->n_kv * p->n_batch * p->ne3 * 2;
    // op 2: two more results and a copy of the mask
    return q + kv + 2 * mask + (size_t) (p->n_sink_sets + 3) * (o + (size_t) p->n_head * 4) + (16u << 20);
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        die(2, "usage: fa_lse_probe IN OUT");
    }
    FILE * fin = fopen(argv[1], "rb");
    if (!fin) {
        die(2, "cannot open input");
    }
    const struct probe_params p = read_params(fin);

    struct ggml_init_params ip = { context_size(&p), NULL, false };
    struct ggml_context * ctx = ggml_init(ip);
    if (!ctx) {
        die(2, "ggml_init failed");
    }
    const struct inputs in = load_inputs(ctx, fin, &p);
    struct ggml_tensor * sinks = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, p.n_head, p.n_sink_sets > 0 ? p.n_sink_sets : 1);
    read_exact(fin, sinks->data, (size_t) p.n_head * p.n_sink_sets * sizeof(float));
    fclose(fin);

    FILE * fout = fopen(argv[2], "wb");
    if (!fout) {
        die(2, "cannot open output");
    }
    struct ggml_tensor * lse = NULL;
    struct ggml_tensor * o = build_fa(ctx, &in, &p, NULL, &lse);
    write_exact(fout, o->data, ggml_nbytes(o));
    if (lse) {
        write_exact(fout, lse->data, ggml_nbytes(lse));
    }
    for (int32_t i = 0; i < p.n_sink_sets; ++i) {
        struct ggml_tensor * row = ggml_view_1d(ctx, sinks, p.n_head, (size_t) i * sinks->nb[1]);
        struct ggml_tensor * lse_s = NULL;
        struct ggml_tensor * os = build_fa(ctx, &in, &p, row, &lse_s);
        write_exact(fout, os->data, ggml_nbytes(os));
        if (lse_s) {
            write_exact(fout, lse_s->data, ggml_nbytes(lse_s));
        }
    }
    dump_as_f32(fout, in.k);
    dump_as_f32(fout, in.v);
    if (fclose(fout) != 0) {
        die(2, "cannot close output");
    }
    ggml_free(ctx);
    return 0;
}
