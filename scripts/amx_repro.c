/* Minimal AMX repro, independent of ggml: does this machine run AMX tile instructions?
 *
 *   cc -O1 -mamx-tile -mamx-int8 scripts/amx_repro.c -o amx_repro && ./amx_repro
 *
 * Each step is printed before it runs, so a SIGILL / general-protection fault names the
 * instruction that the CPU, kernel or hypervisor refuses:
 *   1. CPUID: AMX-TILE / AMX-INT8 reported (leaf 7), the tile palette (leaf 0x1D);
 *   2. XCR0: the OS enabled the tile state (bits 17, 18);
 *   3. arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): the kernel lets this process use it;
 *   4. ldtilecfg with palette 1 (16 rows x 64 bytes), the configuration ggml's AMX kernels load;
 *   5. tileloadd / tdpbssd / tilestored of a 16x64 int8 product, checked against plain C.
 * If all five pass and llama.cpp still dies in ggml_backend_amx_mul_mat, the fault is in
 * ggml's AMX kernels (amx/mmq.cpp), not in the machine's AMX support.
 * Exit 0: AMX works, or the CPU does not report AMX (said so); 1: a wrong product.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

struct tile_config {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static void step(const char * what) {
    printf("%s\n", what);
    fflush(stdout);
}

static int cpu_reports_amx(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
    printf("cpuid.7: amx-tile=%d amx-int8=%d amx-bf16=%d\n", tile, int8, (d >> 22) & 1);
    if (!tile || !int8) return 0;
    if (__get_cpuid_count(0x1d, 1, &a, &b, &c, &d)) {
        printf("cpuid.1d.1 (palette 1): total_tile_bytes=%u bytes_per_tile=%u bytes_per_row=%u "
               "max_names=%u max_rows=%u\n", a & 0xffff, a >> 16, b & 0xffff, b >> 16, c & 0xffff);
    }
    return 1;
}

int main(void) {
    if (!cpu_reports_amx()) {
        printf("this CPU does not report AMX-TILE and AMX-INT8: nothing to test\n");
        return 0;
    }
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    printf("xcr0=%#x: tilecfg=%u tiledata=%u\n", lo, (lo >> 17) & 1, (lo >> 18) & 1);
    step("arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)");
    long rc = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    printf("  -> %ld\n", rc);
    struct tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 3; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    step("ldtilecfg (palette 1, tiles 0-2: 16 rows x 64 bytes)");
    _tile_loadconfig(&cfg);
    static int8_t a[16][64], b[16][64];
    static int32_t c[16][16], want[16][16];
    for (int i = 0; i < 16; i++) {
        for (int k = 0; k < 64; k++) {
            a[i][k] = (int8_t) (i * 7 + k * 3 - 50);
            b[i][k] = (int8_t) (k * 5 - i * 11 + 17);
        }
    }
    /* tdpbssd: C[m][n] += sum_k A[m][4k+j] * B[k][4n+j] (B in VNNI layout: 16 rows of 64) */
    for (int m = 0; m < 16; m++) {
        for (int n = 0; n < 16; n++) {
            int32_t s = 0;
            for (int k = 0; k < 16; k++) {
                for (int j = 0; j < 4; j++) s += a[m][4 * k + j] * b[k][4 * n + j];
            }
            want[m][n] = s;
        }
    }
    step("tilezero / tileloadd");
    _tile_zero(0);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    step("tdpbssd");
    _tile_dpbssd(0, 1, 2);
    step("tilestored / tilerelease");
    _tile_stored(0, c, 64);
    _tile_release();
    int ok = memcmp(c, want, sizeof c) == 0;
    printf("int8 tile product: %s\n", ok ? "correct" : "WRONG");
    return ok ? 0 : 1;
}
