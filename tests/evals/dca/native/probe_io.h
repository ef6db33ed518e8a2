// The byte I/O the C probes share (fa_lse_probe.c, sparse_vs_probe.c): define PROBE_NAME (the program's name in
// its error messages) before including. Every failure exits with code 2 and one line on stderr.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PROBE_NAME
#error "define PROBE_NAME before including probe_io.h"
#endif

static void die(int code, const char * msg) {
    fprintf(stderr, PROBE_NAME ": %s\n", msg);
    exit(code);
}

static void read_exact(FILE * f, void * dst, size_t n) {
    if (n != 0 && fread(dst, 1, n, f) != n) {
        die(2, "short read on input");
    }
}

static void write_exact(FILE * f, const void * src, size_t n) {
    if (n != 0 && fwrite(src, 1, n, f) != n) {
        die(2, "short write on output");
    }
}

// the input's first 8 bytes must be `magic` (the probe's format and version); exit 3 otherwise
static void expect_magic(FILE * f, const char magic[8]) {
    char got[8];
    read_exact(f, got, sizeof(got));
    if (memcmp(got, magic, 8) != 0) {
        die(3, "bad magic");
    }
}
