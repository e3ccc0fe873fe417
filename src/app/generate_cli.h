#pragma once
// `rlpt generate`: sample from a checkpoint folder in one process (no MPI), the first thing to
// run on a new model. Torch-free header.
//
//   rlpt generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3)
//                 [--greedy | --temperature T --top-p P --top-k K] [--max-new-tokens N] [--n K]
//                 [--seed S] [--chat-template none|qwen2|llama3] [--dtype float32|bfloat16]
//                 [--output text|json] [--ignore-eos] [--stop STR]... [--include-stop-str-in-output]
//                 [--beam-width W [--length-penalty P]] [--tool calculator [--max-turns K]]
//
// Defaults: temperature 1, top-p 1, top-k -1 (off), max-new-tokens 64, n 1, seed 0, chat template
// none, dtype float32, output text. --greedy may be combined with --temperature (it then only
// scales the reported log-probs), not with --top-p/--top-k.
// The prompt: --prompt is rendered with the chat template (one user message plus the generation
// prompt; "none" uses the text as is) and encoded with the folder's tokenizer, special-token
// text allowed. --prompt-ids are used as given (no template) and need no tokenizer; when the
// folder has a loadable tokenizer the output also shows text.
// Stopping: eos_id is the first of generation_config.json's eos_token_id (else config.json's,
// else the tokenizer's eos); the other ids of that list, the tokenizer's eos and the chat
// template's end-of-turn tokens are stop ids. --ignore-eos (an addition) disables all of them.
// --stop STR (repeatable; needs the folder's tokenizer) ends a sample whose text contains STR
// (finish reason "stop"): token_ids and log_probs keep every sampled token up to the one that
// completed STR; the shown text ends before STR, or after it with --include-stop-str-in-output
// (rollout/stop_strings.h).
// Sample i uses seed sample_seed(S, 0, i).
// --beam-width W runs beam search (rollout/beam_search.h) instead of sampling and shows all W
// beams, best first, each with its cumulative log-prob and ranking score (cumulative /
// length^P, --length-penalty P, default 1); not with --greedy, --n or --stop.
// --tool NAME (repeatable; built-in tools: calculator) runs the agent loop of rollout.generator
// tool_agent (agent/tool_agent.h) instead of plain sampling: a turn holding <tool_call> blocks is
// executed and the results appended as the chat template's tool turn, up to --max-new-tokens
// tokens in all (--max-turns caps the assistant turns). The shown text and token_ids are the whole
// conversation (tool tokens have log-prob 0); json adds "response_mask" (0 on tool tokens) and
// the loop's counts (tool_call_counts, num_turns, model_tokens, observation_tokens, ...).
// Output (stdout): text mode prints per sample the finish reason, text (when a tokenizer
// exists), token ids and per-token log-probs; json mode prints one object:
//   {"model", "dtype", "prompt_ids": [..], "prompt_text" (tokenizer only), "sampling": {..},
//    "samples": [{"index", "seed", "token_ids": [..], "log_probs": [..], "text" (tokenizer only),
//                 "finish_reason": "eos"|"stop"|"length"}]}
//   with --beam-width also "beam_search": {"beam_width", "length_penalty"}, and each sample (a
//   beam) has "cumulative_log_prob" and "score" instead of "seed".
// Exit codes: 0 done (also --help), 2 bad flags, a missing model folder or config.json, no
// tokenizer for --prompt, prompt ids outside the vocabulary; 1 any other failure (e.g. a
// corrupt checkpoint). Messages go to stderr, prefixed "rlpt generate: ".
namespace rlpt::app {

// argv[0] is "generate" (the subcommand name), flags follow.
int generate_command(int argc, char** argv);

}  // namespace rlpt::app
