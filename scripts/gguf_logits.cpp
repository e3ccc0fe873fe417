// Logits of a GGUF model under llama.cpp, token by token through its KV cache (one llama_decode
// per token, as decode runs): the check that scripts/hf_to_gguf.py's file computes the same
// function as the Hugging Face checkpoint it came from. scripts/bench_decode.sh compiles it against
// the llama.cpp that scripts/fetch_llama_cpp.sh built and compares its output with
// scripts/reference_forward.py's on the same ids. Not part of rlpt's build.
//
// usage: gguf_logits MODEL.gguf OUT.bin ID [ID ...]
//   OUT.bin: little-endian float32 logits [T, V], row t = the logits after feeding ids[0..t].
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL.gguf OUT.bin ID [ID ...]\n", argv[0]);
        return 2;
    }
    llama_log_set(
        [](ggml_log_level level, const char* text, void*) {
            if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
        },
        nullptr);
    llama_backend_init();
    llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (model == nullptr) {
        std::fprintf(stderr, "gguf_logits: cannot load %s\n", argv[1]);
        return 1;
    }
    std::vector<llama_token> ids;
    for (int i = 3; i < argc; ++i) ids.push_back(static_cast<llama_token>(std::atoi(argv[i])));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(ids.size() + 16);
    cp.n_threads = cp.n_threads_batch = 1;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) {
        std::fprintf(stderr, "gguf_logits: cannot create a context\n");
        return 1;
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE* out = std::fopen(argv[2], "wb");
    if (out == nullptr) {
        std::fprintf(stderr, "gguf_logits: cannot write %s\n", argv[2]);
        return 1;
    }
    for (llama_token& id : ids) {
        if (llama_decode(ctx, llama_batch_get_one(&id, 1)) != 0) {
            std::fprintf(stderr, "gguf_logits: llama_decode failed\n");
            return 1;
        }
        std::fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), static_cast<size_t>(n_vocab), out);
    }
    std::fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
