// dca_tool.h: the start-up and shutdown the DCA test tools (dca_logits, dca_state) share.
//
// A tool's own arguments come first, then "--" and the common llama.cpp arguments (-m, -c, -b, -ub,
// -fa, -ctk/-ctv, --dca ...), parsed by common_params_parse exactly as the llama.cpp tools parse them.

#pragma once

#include "arg.h"
#include "common.h"
#include "llama.h"

#include <cstdio>
#include <vector>

// a loaded model and its context (both null after a failed start)
struct dca_tool {
    llama_model   * model   = nullptr;
    llama_context * ctx     = nullptr;
    int             n_vocab = 0;
};

// parse argv[dashes..] (argv[dashes] is "--", which becomes the program name for the common parser), then load
// the model and create its context (with the eval callback `cb_eval`, when given, on it); 0 on success, else the
// exit code (2 bad arguments, 1 a failed load)
static int dca_tool_start(int argc, char ** argv, int dashes, dca_tool & tool,
                          ggml_backend_sched_eval_callback cb_eval = nullptr, void * cb_eval_user_data = nullptr) {
    std::vector<char *> cargv(argv + dashes, argv + argc);
    cargv[0] = argv[0];
    common_params params;
    if (!common_params_parse((int) cargv.size(), cargv.data(), params, LLAMA_EXAMPLE_PARALLEL)) {
        return 2;
    }
    common_init();
    llama_backend_init();

    tool.model = llama_model_load_from_file(params.model.path.c_str(), common_model_params_to_llama(params));
    if (tool.model == nullptr) {
        std::fprintf(stderr, "failed to load model %s\n", params.model.path.c_str());
        return 1;
    }
    llama_context_params cparams = common_context_params_to_llama(params);
    if (cb_eval != nullptr) {
        cparams.cb_eval           = cb_eval;
        cparams.cb_eval_user_data = cb_eval_user_data;
    }
    tool.ctx = llama_init_from_model(tool.model, cparams);
    if (tool.ctx == nullptr) {
        std::fprintf(stderr, "failed to create context\n");
        llama_model_free(tool.model);
        tool.model = nullptr;
        return 1;
    }
#ifdef COMMON_HAS_SPARSE_PREFILL
    // sparse prefill is a setting of the context (--sparse-*), applied as common_init_from_params does
    if (!common_set_sparse_prefill(tool.ctx, params)) {
        llama_free(tool.ctx);
        llama_model_free(tool.model);
        tool = dca_tool{};
        return 1;
    }
#endif
    tool.n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(tool.model));
    return 0;
}

// free what dca_tool_start made
static void dca_tool_stop(dca_tool & tool) {
    llama_free(tool.ctx);
    llama_model_free(tool.model);
    llama_backend_free();
    tool = dca_tool{};
}
