// dca_qwen35: the Qwen3.5 (qwen35, qwen35moe) checks that need more than logits.
//
// usage:
//   dca_qwen35 tensor NAME TOKENS OUT -- <common llama.cpp args>
//       decode the token ids of the text file TOKENS (whitespace-separated) in one llama_decode call
//       (split into ubatches of -ub tokens) and write every value the graph node NAME (e.g. "l_out-0",
//       a layer's output) takes, float32, ubatch after ubatch, to OUT
//   dca_qwen35 embd KIND N -- <common llama.cpp args>
//       decode one batch of N input embeddings with M-RoPE positions (4 components per token, section-major
//       as mtmd gives them): KIND "text" puts every component at the token's index, "image" lays the tokens
//       out as an image (t = 0, h = row, w = column of a 4-wide grid, e = 0); prints "decode = RC" and exits 0
//       when llama_decode returned 0, 3 otherwise
//
// Exit codes: 0 success, 1 a failed load or run, 2 bad arguments, 3 llama_decode refused the embeddings batch.

#include "dca_tool.h"
#include "log.h"

#include "ggml-backend.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct tensor_dump {
    std::string        name;
    std::vector<float> values;
};

// eval callback: ask for the node named like the dump's, then copy its values (F32) from whichever backend
bool dump_cb(struct ggml_tensor * t, bool ask, void * user_data) {
    auto * dump = static_cast<tensor_dump *>(user_data);
    if (std::strcmp(t->name, dump->name.c_str()) != 0) {
        return ask ? false : true;
    }
    if (ask) {
        return true;
    }
    if (t->type != GGML_TYPE_F32) {
        throw std::runtime_error("node " + dump->name + " is not F32");
    }
    const size_t n = ggml_nelements(t);
    const size_t off = dump->values.size();
    dump->values.resize(off + n);
    ggml_backend_tensor_get(t, dump->values.data() + off, 0, n*sizeof(float));
    return true;
}

std::vector<llama_token> read_tokens(const char * path) {
    std::ifstream in(path);
    if (!in) {
        throw std::runtime_error(std::string("cannot open tokens file ") + path);
    }
    std::vector<llama_token> out;
    long long id;
    while (in >> id) {
        out.push_back((llama_token) id);
    }
    if (out.empty()) {
        throw std::runtime_error(std::string("no token ids in ") + path);
    }
    return out;
}

// dca_tool_start, with the eval callback dumping into `dump` when one is given
int start(int argc, char ** argv, int dashes, dca_tool & tool, tensor_dump * dump) {
    return dca_tool_start(argc, argv, dashes, tool, dump != nullptr ? dump_cb : nullptr, dump);
}

int run_tensor(int argc, char ** argv) {
    if (argc < 6 || std::strcmp(argv[5], "--") != 0) {
        std::fprintf(stderr, "usage: %s tensor NAME TOKENS OUT -- <common llama.cpp args>\n", argv[0]);
        return 2;
    }
    tensor_dump dump;
    dump.name = argv[2];
    std::vector<llama_token> tokens = read_tokens(argv[3]);

    dca_tool tool;
    if (const int err = start(argc, argv, 5, tool, &dump)) {
        return err;
    }
    llama_batch batch = llama_batch_get_one(tokens.data(), (int32_t) tokens.size());
    const int rc = llama_decode(tool.ctx, batch);
    dca_tool_stop(tool);
    if (rc != 0) {
        std::fprintf(stderr, "dca_qwen35: llama_decode returned %d\n", rc);
        return 1;
    }
    if (dump.values.empty()) {
        std::fprintf(stderr, "dca_qwen35: the graph has no node named %s\n", dump.name.c_str());
        return 1;
    }
    std::ofstream out(argv[4], std::ios::binary);
    out.write(reinterpret_cast<const char *>(dump.values.data()), (std::streamsize) (dump.values.size()*sizeof(float)));
    return out ? 0 : 1;
}

int run_embd(int argc, char ** argv) {
    if (argc < 5 || std::strcmp(argv[4], "--") != 0) {
        std::fprintf(stderr, "usage: %s embd text|image N -- <common llama.cpp args>\n", argv[0]);
        return 2;
    }
    const std::string kind = argv[2];
    const int n = std::stoi(argv[3]);
    if ((kind != "text" && kind != "image") || n <= 0) {
        std::fprintf(stderr, "embd: KIND must be text or image and N > 0\n");
        return 2;
    }

    dca_tool tool;
    if (const int err = start(argc, argv, 4, tool, nullptr)) {
        return err;
    }
    const int n_embd = llama_model_n_embd_inp(tool.model);

    std::vector<float>         embd((size_t) n*n_embd);
    std::vector<llama_pos>     pos((size_t) 4*n);
    std::vector<int32_t>       n_seq_id(n, 1);
    llama_seq_id               seq0 = 0;
    std::vector<llama_seq_id*> seq_id(n, &seq0);
    std::vector<int8_t>        logits(n, 0);
    logits[n - 1] = 1;
    for (size_t i = 0; i < embd.size(); ++i) {
        embd[i] = 0.01f*(float) ((i*7919) % 201) - 1.0f;
    }
    for (int i = 0; i < n; ++i) {
        const bool image = kind == "image";
        pos[0*n + i] = image ? 0     : i;
        pos[1*n + i] = image ? i / 4 : i;
        pos[2*n + i] = image ? i % 4 : i;
        pos[3*n + i] = image ? 0     : i;
    }
    llama_batch batch = {};
    batch.n_tokens = n;
    batch.embd     = embd.data();
    batch.pos      = pos.data();
    batch.n_seq_id = n_seq_id.data();
    batch.seq_id   = seq_id.data();
    batch.logits   = logits.data();

    const int rc = llama_decode(tool.ctx, batch);
    std::printf("decode = %d\n", rc);
    dca_tool_stop(tool);
    return rc == 0 ? 0 : 3;
}

}  // namespace

int main(int argc, char ** argv) {
    int rc = 1;
    try {
        if (argc >= 2 && std::strcmp(argv[1], "tensor") == 0) {
            rc = run_tensor(argc, argv);
        } else if (argc >= 2 && std::strcmp(argv[1], "embd") == 0) {
            rc = run_embd(argc, argv);
        } else {
            std::fprintf(stderr, "usage: %s tensor|embd ... -- <common llama.cpp args>\n", argv[0]);
            rc = 2;
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "dca_qwen35: %s\n", e.what());
    }
    common_log_flush(common_log_main());  // the common logger is asynchronous: keep its last errors
    return rc;
}
