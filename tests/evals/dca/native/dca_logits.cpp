// dca_logits: decode token sequences with llama.cpp and dump every logit row (float32).
//
// The same source compiles against the unpatched upstream build and the DCA build: all model and
// context options come from common_params_parse (so -m, -c, -b, -ub, -fa, -ctk/-ctv, -np, -kvu,
// -t and, on the DCA build, --dca / --dca-chunk-size / --dca-local-window pass through unchanged).
//
// usage: dca_logits PLAN OUT -- <common llama.cpp args>
//
// PLAN is a text file, one directive per line (blank lines and lines starting with # are ignored):
//   seq T0 T1 T2 ...     token ids of the next sequence (sequence ids 0, 1, ... in file order)
//   call S:N [S:N ...]   one llama_decode call holding the next N tokens of sequence S, for each
//                        S:N in order (llama_decode splits it into ubatches of -ub tokens)
//   gen S N              greedy generation: N single-token llama_decode calls on sequence S, each
//                        feeding back the argmax of the previous logits row
//   rm S P               llama_memory_seq_rm(S, P, -1): drop positions >= P of sequence S from the
//                        cache (as llama-server does to reuse a cached prompt); the next tokens of S
//                        are decoded at positions P, P+1, ...
//   causal 0|1           llama_set_causal_attn: the following calls attend non-causally (0) or
//                        causally (1), as mtmd does around an image chunk
// Every prompt token must be consumed by the "call" lines before the end of the plan.
//
// OUT receives, for each sequence in order, one float32 row of n_vocab logits per token position
// (prompt tokens, then generated ones). OUT.tokens receives one line per sequence: all its token ids.

#include "dca_tool.h"
#include "log.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct seq_state {
    std::vector<llama_token> tokens;       // prompt tokens, then generated tokens
    size_t n_prompt = 0;
    size_t n_done = 0;                     // tokens already decoded
    llama_pos next_pos = 0;                // position of the next decoded token (n_done until an rm)
    std::vector<std::vector<float>> rows;  // logits per decoded position
};

struct piece {
    int seq;
    int n;
};

struct plan_step {
    bool is_gen = false;
    bool is_rm  = false;        // rm: pieces[0] = (seq, first removed position)
    int  causal = -1;           // causal: 0 or 1 (no pieces)
    std::vector<piece> pieces;  // call: pieces; gen: one piece (seq, count)
};

struct plan {
    std::vector<std::vector<llama_token>> seqs;
    std::vector<plan_step> steps;
};

piece parse_piece(const std::string & word) {
    const size_t colon = word.find(':');
    if (colon == std::string::npos) {
        throw std::runtime_error("bad call piece '" + word + "' (expected SEQ:N)");
    }
    return {std::stoi(word.substr(0, colon)), std::stoi(word.substr(colon + 1))};
}

plan read_plan(const char * path) {
    std::ifstream in(path);
    if (!in) {
        throw std::runtime_error(std::string("cannot open plan ") + path);
    }
    plan p;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string kind;
        if (!(ls >> kind) || kind[0] == '#') {
            continue;
        }
        if (kind == "seq") {
            std::vector<llama_token> toks;
            llama_token t;
            while (ls >> t) {
                toks.push_back(t);
            }
            p.seqs.push_back(toks);
        } else if (kind == "call") {
            plan_step step;
            std::string word;
            while (ls >> word) {
                step.pieces.push_back(parse_piece(word));
            }
            p.steps.push_back(step);
        } else if (kind == "causal") {
            plan_step step;
            if (!(ls >> step.causal) || (step.causal != 0 && step.causal != 1)) {
                throw std::runtime_error("causal takes 0 or 1");
            }
            p.steps.push_back(step);
        } else if (kind == "gen" || kind == "rm") {
            plan_step step;  // one (sequence, count or position) piece
            step.is_gen = kind == "gen";
            step.is_rm  = kind == "rm";
            piece pc{};
            ls >> pc.seq >> pc.n;
            step.pieces.push_back(pc);
            p.steps.push_back(step);
        } else {
            throw std::runtime_error("unknown plan directive '" + kind + "'");
        }
    }
    return p;
}

void check_seq(const std::vector<seq_state> & seqs, int s) {
    if (s < 0 || (size_t) s >= seqs.size()) {
        throw std::runtime_error("plan refers to unknown sequence " + std::to_string(s));
    }
}

// decode `batch` and append each token's logits row to its sequence, in batch order
void decode_and_collect(llama_context * ctx, const llama_batch & batch, const std::vector<int> & owner,
                        std::vector<seq_state> & seqs, int n_vocab) {
    const int rc = llama_decode(ctx, batch);
    if (rc != 0) {
        throw std::runtime_error("llama_decode failed with code " + std::to_string(rc));
    }
    for (int i = 0; i < batch.n_tokens; ++i) {
        const float * row = llama_get_logits_ith(ctx, i);
        if (row == nullptr) {
            throw std::runtime_error("no logits for batch row " + std::to_string(i));
        }
        seqs[owner[i]].rows.emplace_back(row, row + n_vocab);
    }
}

void add_token(llama_batch & batch, std::vector<int> & owner, seq_state & st, int s) {
    const int i = batch.n_tokens++;
    batch.token[i] = st.tokens[st.n_done];
    batch.pos[i] = st.next_pos++;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = s;
    batch.logits[i] = 1;
    owner.push_back(s);
    st.n_done++;
}

// owns one llama_batch: freed on every path out of a call, errors included
struct owned_batch {
    llama_batch batch;
    explicit owned_batch(int n_tokens) : batch(llama_batch_init(std::max(n_tokens, 1), 0, 1)) {}
    ~owned_batch() { llama_batch_free(batch); }
    owned_batch(const owned_batch &) = delete;
    owned_batch & operator=(const owned_batch &) = delete;
};

void run_call(llama_context * ctx, const plan_step & step, std::vector<seq_state> & seqs, int n_vocab) {
    int total = 0;
    for (const piece & pc : step.pieces) {
        check_seq(seqs, pc.seq);
        total += pc.n;
    }
    owned_batch ob(total);
    std::vector<int> owner;
    for (const piece & pc : step.pieces) {
        seq_state & st = seqs[pc.seq];
        if (st.n_done + pc.n > st.n_prompt) {
            throw std::runtime_error("call takes more tokens than sequence " + std::to_string(pc.seq) + " has");
        }
        for (int k = 0; k < pc.n; ++k) {
            add_token(ob.batch, owner, st, pc.seq);
        }
    }
    decode_and_collect(ctx, ob.batch, owner, seqs, n_vocab);
}

llama_token argmax(const std::vector<float> & row) {
    return (llama_token) (std::max_element(row.begin(), row.end()) - row.begin());
}

void run_gen(llama_context * ctx, const plan_step & step, std::vector<seq_state> & seqs, int n_vocab) {
    const piece pc = step.pieces.at(0);
    check_seq(seqs, pc.seq);
    seq_state & st = seqs[pc.seq];
    if (st.n_done != st.tokens.size() || st.rows.empty()) {
        throw std::runtime_error("gen needs sequence " + std::to_string(pc.seq) + " fully decoded first");
    }
    for (int k = 0; k < pc.n; ++k) {
        st.tokens.push_back(argmax(st.rows.back()));
        owned_batch ob(1);
        std::vector<int> owner;
        add_token(ob.batch, owner, st, pc.seq);
        decode_and_collect(ctx, ob.batch, owner, seqs, n_vocab);
    }
}

void run_rm(llama_context * ctx, const plan_step & step, std::vector<seq_state> & seqs) {
    const piece pc = step.pieces.at(0);
    check_seq(seqs, pc.seq);
    seq_state & st = seqs[pc.seq];
    if (pc.n < 0 || pc.n > st.next_pos) {
        throw std::runtime_error("rm position " + std::to_string(pc.n) + " outside sequence " + std::to_string(pc.seq));
    }
    if (!llama_memory_seq_rm(llama_get_memory(ctx), pc.seq, pc.n, -1)) {
        throw std::runtime_error("llama_memory_seq_rm failed");
    }
    st.next_pos = pc.n;
}

void write_outputs(const std::string & out, const std::vector<seq_state> & seqs) {
    FILE * f = std::fopen(out.c_str(), "wb");
    if (f == nullptr) {
        throw std::runtime_error("cannot write " + out);
    }
    for (const seq_state & st : seqs) {
        for (const auto & row : st.rows) {
            std::fwrite(row.data(), sizeof(float), row.size(), f);
        }
    }
    std::fclose(f);
    std::ofstream toks(out + ".tokens");
    for (const seq_state & st : seqs) {
        for (size_t i = 0; i < st.tokens.size(); ++i) {
            toks << (i ? " " : "") << st.tokens[i];
        }
        toks << "\n";
    }
}

int run(int argc, char ** argv) {
    if (argc < 4 || std::strcmp(argv[3], "--") != 0) {
        std::fprintf(stderr, "usage: %s PLAN OUT -- <common llama.cpp args>\n", argv[0]);
        return 2;
    }
    const plan p = read_plan(argv[1]);
    const std::string out = argv[2];

    dca_tool tool;
    if (const int err = dca_tool_start(argc, argv, 3, tool)) {
        return err;
    }
    llama_context * ctx     = tool.ctx;
    const int       n_vocab = tool.n_vocab;

    std::vector<seq_state> seqs(p.seqs.size());
    for (size_t s = 0; s < p.seqs.size(); ++s) {
        seqs[s].tokens = p.seqs[s];
        seqs[s].n_prompt = p.seqs[s].size();
    }
    int rc = 0;
    try {
        for (const plan_step & step : p.steps) {
            if (step.causal >= 0) {
                llama_set_causal_attn(ctx, step.causal == 1);
            } else if (step.is_gen) {
                run_gen(ctx, step, seqs, n_vocab);
            } else if (step.is_rm) {
                run_rm(ctx, step, seqs);
            } else {
                run_call(ctx, step, seqs, n_vocab);
            }
        }
        for (size_t s = 0; s < seqs.size(); ++s) {
            if (seqs[s].n_done != seqs[s].tokens.size()) {
                throw std::runtime_error("plan leaves tokens of sequence " + std::to_string(s) + " undecoded");
            }
        }
        write_outputs(out, seqs);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "dca_logits: %s\n", e.what());
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
        std::fprintf(stderr, "dca_logits: %s\n", e.what());
    }
    common_log_flush(common_log_main());  // the common logger is asynchronous: keep its last errors
    return rc;
}
