#pragma once
// `rlpt init-model --out DIR (--chars-from FILE... | --tokenizer PATH) [sizes]`: writes a
// randomly initialised Llama-family model as a Hugging Face folder (config.json,
// model.safetensors, tokenizer.json + tokenizer_config.json) with the built-in model's default
// sizes, so a task with its own characters or tokenizer can start from scratch. The same seed
// and sizes give identical weights. Private to src/app.

namespace rlpt::app {

// Returns the exit code: 0, 2 for bad usage, 1 for an I/O error.
int init_model_command(int argc, char** argv);

}  // namespace rlpt::app
