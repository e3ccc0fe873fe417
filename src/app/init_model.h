#pragma once
// `rlpt init-model --out DIR (--chars-from FILE... | --tokenizer PATH) [--arch A] [sizes]`: writes
// a randomly initialised model as a Hugging Face folder (config.json, model.safetensors,
// tokenizer.json + tokenizer_config.json) with the built-in model's default sizes, so a task with
// its own characters or tokenizer can start from scratch. --arch llama (the default; the
// built-in model's architecture) or qwen3 (Qwen3ForCausalLM: q/k norms, no biases, tied
// embeddings, rope_theta 1e6); qwen3_moe is named but refused until it exists (the table
// kInitArchs in init_model.cpp is where an architecture is added). --head-dim defaults to
// hidden / heads. The same seed, architecture and sizes give identical weights. Private to src/app.

namespace rlpt::app {

// Returns the exit code: 0, 2 for bad usage, 1 for an I/O error.
int init_model_command(int argc, char** argv);

}  // namespace rlpt::app
