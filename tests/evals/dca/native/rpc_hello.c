// rpc_hello: connect to one ggml-rpc-server through the ggml RPC client of the tree it is built
// against, and print the server's device memory.
//
// Built by tests/dca/test_dca_rpc.py against the unpatched upstream tree: it is the upstream RPC
// client (the HELLO handshake lives in libggml-rpc), without the llama.cpp libraries. A server
// whose protocol version the client does not accept ends it in ggml's abort with the client's
// "RPC server version mismatch" line on stderr.
//
// usage: rpc_hello HOST:PORT
// Exit status: 0 connected (prints "connected free=N total=N"), 2 usage; an abort otherwise.

#include "ggml-rpc.h"

#include <stdio.h>

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]);
        return 2;
    }
    size_t free_mem = 0;
    size_t total_mem = 0;
    ggml_backend_rpc_get_device_memory(argv[1], 0, &free_mem, &total_mem);
    printf("connected free=%zu total=%zu\n", free_mem, total_mem);
    return 0;
}
