// dca_state: save a llama.cpp state with one set of options, load it with another.
//
// The same source compiles against the unpatched upstream build and the DCA build: all model and
// context options come from common_params_parse (-m, -c, -b, -ub, -fa, -ctk/-ctv and, on the DCA
// build, --dca / --dca-chunk-size / --dca-local-window pass through unchanged).
//
// usage: dca_state MODE FILE N_PROMPT N_GEN -- <common llama.cpp args>
//
// The prompt is N_PROMPT deterministic tokens of sequence 0. Every mode decodes the first N_PROMPT-1
// of them in calls of -b tokens, the last one alone, then N_GEN greedy tokens one by one; the
// save and load modes split that work at the last prompt token, so a load that restores the state
// exactly prints what `run` prints.
//
// MODE:
//   run        the whole work in one process (the reference)
//   save-full  decode N_PROMPT-1 tokens, llama_state_save_file(FILE) (the whole context)
//   save-seq   decode N_PROMPT-1 tokens, llama_state_seq_save_file(FILE, seq 0) (llama-server's
//              /slots save)
//   save-mem   decode N_PROMPT-1 tokens, llama_state_seq_get_data(seq 0) written raw to FILE
//              (llama-server's in-memory prompt cache)
//   load-full, load-seq, load-mem
//              restore FILE with the matching call, then decode the rest of the work
//
// stdout: "tokens: T1 T2 ..." (the N_GEN generated tokens) and "logit sums: S1 S2 ..." (a weighted sum
// of each logits row they were taken from, full precision) for run and the load modes, "saved N"
// (bytes) for the save modes. Exit codes: 0 ok, 3 the load was refused (the library's reason is in
// its log on stderr), 1 any other failure, 2 bad usage.

#include "dca_tool.h"
#include "log.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int EXIT_REFUSED = 3;

struct refused : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::vector<llama_token> prompt_tokens(int n, int n_vocab) {
    std::vector<llama_token> toks(n);
    uint32_t x = 12345;
    for (int i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        toks[i] = (llama_token) ((x >> 8) % (uint32_t) n_vocab);
    }
    return toks;
}

// decode toks[first, first+n) of sequence 0 at positions first.. in llama_decode calls of at most n_batch tokens
// (llama_decode splits each into ubatches of -ub tokens); the logits of the last token are kept
void decode_range(llama_context * ctx, const std::vector<llama_token> & toks, int first, int n) {
    const int n_batch = (int) llama_n_batch(ctx);
    for (int b = first; b < first + n; b += n_batch) {
        const int m = std::min(n_batch, first + n - b);
        llama_batch batch = llama_batch_init(m, 0, 1);
        for (int i = 0; i < m; ++i) {
            batch.token[i]     = toks[b + i];
            batch.pos[i]       = b + i;
            batch.n_seq_id[i]  = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i]    = b + i == first + n - 1;
        }
        batch.n_tokens = m;
        const int rc = llama_decode(ctx, batch);
        llama_batch_free(batch);
        if (rc != 0) {
            throw std::runtime_error("llama_decode failed with code " + std::to_string(rc));
        }
    }
}

// the last prompt token, then n_gen greedy tokens; prints them and a checksum of every logits row they came from
void finish(llama_context * ctx, std::vector<llama_token> toks, int n_gen, int n_vocab) {
    const int n_prompt = (int) toks.size();
    decode_range(ctx, toks, n_prompt - 1, 1);
    std::string tokens = "tokens:";
    std::string sums   = "logit sums:";
    for (int k = 0; k < n_gen; ++k) {
        const float * row = llama_get_logits_ith(ctx, -1);
        const llama_token t = (llama_token) (std::max_element(row, row + n_vocab) - row);
        double sum = 0.0;
        for (int i = 0; i < n_vocab; ++i) {
            sum += (double) row[i] * (double) ((i % 7) + 1);
        }
        char buf[64];
        std::snprintf(buf, sizeof(buf), " %.17g", sum);
        sums   += buf;
        tokens += " " + std::to_string(t);
        toks.push_back(t);
        decode_range(ctx, toks, (int) toks.size() - 1, 1);
    }
    std::printf("%s\n%s\n", tokens.c_str(), sums.c_str());
}

void save(llama_context * ctx, const std::string & mode, const std::string & file, const std::vector<llama_token> & done) {
    size_t n = 0;
    if (mode == "save-full") {
        n = llama_state_save_file(ctx, file.c_str(), done.data(), done.size()) ? 1 : 0;
    } else if (mode == "save-seq") {
        n = llama_state_seq_save_file(ctx, file.c_str(), 0, done.data(), done.size());
    } else {
        std::vector<uint8_t> buf(llama_state_seq_get_size(ctx, 0));
        n = llama_state_seq_get_data(ctx, buf.data(), buf.size(), 0);
        std::ofstream out(file, std::ios::binary);
        out.write((const char *) buf.data(), (std::streamsize) n);
        if (!out) {
            throw std::runtime_error("cannot write " + file);
        }
    }
    if (n == 0) {
        throw std::runtime_error(mode + " failed");
    }
    std::printf("saved %zu\n", n);
}

void load(llama_context * ctx, const std::string & mode, const std::string & file, size_t n_expected) {
    std::vector<llama_token> toks(n_expected + 1);
    size_t n_toks = 0;
    bool ok = false;
    if (mode == "load-full") {
        ok = llama_state_load_file(ctx, file.c_str(), toks.data(), toks.size(), &n_toks);
    } else if (mode == "load-seq") {
        ok = llama_state_seq_load_file(ctx, file.c_str(), 0, toks.data(), toks.size(), &n_toks) != 0;
    } else {
        std::ifstream in(file, std::ios::binary);
        const std::vector<uint8_t> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        ok = llama_state_seq_set_data(ctx, buf.data(), buf.size(), 0) != 0;
        n_toks = n_expected;
    }
    if (!ok) {
        throw refused(mode + " of " + file + " was refused");
    }
    if (n_toks != n_expected) {
        throw std::runtime_error("restored " + std::to_string(n_toks) + " tokens, expected " + std::to_string(n_expected));
    }
}

int run(int argc, char ** argv) {
    if (argc < 6 || std::strcmp(argv[5], "--") != 0) {
        std::fprintf(stderr, "usage: %s MODE FILE N_PROMPT N_GEN -- <common llama.cpp args>\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1];
    const std::string file = argv[2];
    const int n_prompt = std::stoi(argv[3]);
    const int n_gen    = std::stoi(argv[4]);
    static const char * modes[] = { "run", "save-full", "save-seq", "save-mem", "load-full", "load-seq", "load-mem" };
    if (std::none_of(std::begin(modes), std::end(modes), [&](const char * m) { return mode == m; }) || n_prompt < 2) {
        std::fprintf(stderr, "bad mode '%s' or N_PROMPT < 2\n", mode.c_str());
        return 2;
    }

    dca_tool tool;
    if (const int err = dca_tool_start(argc, argv, 5, tool)) {
        return err;
    }
    llama_context * ctx     = tool.ctx;
    const int       n_vocab = tool.n_vocab;
    const std::vector<llama_token> toks = prompt_tokens(n_prompt, n_vocab);
    const std::vector<llama_token> head(toks.begin(), toks.end() - 1);

    int rc = 0;
    try {
        if (mode.rfind("load-", 0) == 0) {
            load(ctx, mode, file, head.size());
        } else {
            decode_range(ctx, toks, 0, n_prompt - 1);
        }
        if (mode.rfind("save-", 0) == 0) {
            save(ctx, mode, file, head);
        } else {
            finish(ctx, toks, n_gen, n_vocab);
        }
    } catch (const refused & e) {
        std::fprintf(stderr, "dca_state: %s\n", e.what());
        rc = EXIT_REFUSED;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "dca_state: %s\n", e.what());
        rc = 1;
    }
    dca_tool_stop(tool);
    return rc;
}

}  // namespace

int main(int argc, char ** argv) {
    int rc = 1;
    try {
        rc = run(argc, argv);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "dca_state: %s\n", e.what());
    }
    std::fflush(stdout);
    common_log_flush(common_log_main());  // the common logger is asynchronous: keep its last errors
    return rc;
}
