// Device: a minimal CUPTI activity tracer, injected into any CUDA process (no nsys on the device image).
//
//   gcc -O2 -shared -fPIC -o $W/libcupti_prof.so evals/device/cupti_prof.c -I$CUDA/include -L$LIBDIR -lcupti
//       -Wl,-rpath,$LIBDIR   (CUDA = /usr/local/cuda, LIBDIR = the folder holding libcupti.so; dca_profile.sh does it)
//   CUDA_INJECTION64_PATH=$W/libcupti_prof.so CUPTI_PROF_OUT=trace.csv llama-bench ...
//
// The CUDA driver calls InitializeInjection() at cuInit. Every kernel, memcpy and memset on the GPU is written, at
// exit, as one CSV line: kind,start_ns,end_ns,bytes,name (kind k = kernel, m = memcpy with its copy kind, s = memset).
// evals/device/cupti_summary.py turns the trace into per-step (ubatch / token) tables.
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_SIZE (8u << 20)

static FILE * g_out = NULL;

static void CUPTIAPI buffer_requested(uint8_t ** buffer, size_t * size, size_t * max_num_records) {
    *buffer          = (uint8_t *) aligned_alloc(8, BUF_SIZE);
    *size            = BUF_SIZE;
    *max_num_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t * buffer, size_t size, size_t valid_size) {
    (void) ctx; (void) stream_id; (void) size;
    CUpti_Activity * record = NULL;
    while (g_out && cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
        switch (record->kind) {
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
            case CUPTI_ACTIVITY_KIND_KERNEL: {
                const CUpti_ActivityKernel10 * k = (const CUpti_ActivityKernel10 *) record;
                // mangled names can hold commas inside template arguments: keep the name last on the line
                fprintf(g_out, "k,%llu,%llu,0,%s\n", (unsigned long long) k->start, (unsigned long long) k->end,
                        k->name ? k->name : "?");
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                const CUpti_ActivityMemcpy6 * m = (const CUpti_ActivityMemcpy6 *) record;
                fprintf(g_out, "m,%llu,%llu,%llu,copykind%u\n", (unsigned long long) m->start, (unsigned long long) m->end,
                        (unsigned long long) m->bytes, (unsigned) m->copyKind);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMSET: {
                const CUpti_ActivityMemset4 * m = (const CUpti_ActivityMemset4 *) record;
                fprintf(g_out, "s,%llu,%llu,%llu,memset\n", (unsigned long long) m->start, (unsigned long long) m->end,
                        (unsigned long long) m->bytes);
                break;
            }
            default:
                break;
        }
    }
    free(buffer);
}

static void at_exit(void) {
    cuptiActivityFlushAll(1);
    if (g_out) {
        fclose(g_out);
        g_out = NULL;
    }
}

int InitializeInjection(void) {
    const char * path = getenv("CUPTI_PROF_OUT");
    g_out = fopen(path ? path : "cupti-trace.csv", "w");
    if (!g_out) {
        return 0;
    }
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_prof: could not enable CUPTI activity tracing\n");
        return 0;
    }
    atexit(at_exit);
    return 1;
}
