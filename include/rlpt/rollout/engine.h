#pragma once
// The rollout engine (DESIGN §4): autoregressive generation with continuous batching over a KV
// cache of sequence slots, for any sequence source (rollout/sequence_source.h: what runs, turn
// by turn; the engine decides how).
//
//   Slots: the KV cache (model::KVCache, slot use) holds S sequences, each in its own region of
//   (longest prompt + response budget - 1) positions (SequenceSource::bounds), S =
//   min(max_num_seqs, number of sequences, max_num_batched_tokens / that region), allocated once
//   per run. Sequences wait in the source's order; whenever slots are free, the next ones are
//   prefilled straight into them (one right-padded forward) and join the decode batch, so it
//   stays full until the queue is empty. A finished sequence just frees its slot: no cache
//   compaction, no reallocation. Each decode step attends every row to its own slot's length
//   (kernels::decode_attention_slots on the CPU).
//   Shared prefixes: sequences of a run whose first tokens are identical (the n samples of a
//   GRPO/RLOO group arrive as repeated prompts) are prefilled once; the others copy those
//   positions from a slot holding them (KVCache::copy_slot) and start from the same last hidden
//   state. Detection is by content within the run (no group ids needed); a sequence whose every
//   copy has left its slot before another is admitted is prefilled again.
//   Parking: a sequence whose turn ended may keep its slot and K/V (SequenceSource::end_turn)
//   while the other slots decode; when the source has its continuation, only the new tokens (the
//   turn's last token, never fed yet, and the appended ones) are prefilled after what the slot
//   holds (KVCache extend), so a conversation is never prefilled again. The engine blocks in
//   SequenceSource::collect only when no slot can decode and none can be filled. Tensor-parallel
//   (model.tp()): every rank of the block must make the same batching decisions, so the engine
//   collects every parked sequence before each decode step (lockstep).
//   Stopping: a turn ends on EOS, on any stop token id, on a stop string (stop_strings.h), or
//   at TurnSpec::max_tokens tokens, decided for every row by one function (engine.cpp
//   finish_reason): EOS wins over a stop id, then stop ids, then stop strings, then the length.
//   Sampling: temperature / top-k / top-p or greedy (sampler.h).
//   Routes (SamplingParams::record_routes, mixture-of-experts models): the cache keeps the experts
//   of every position it holds beside its K/V (KVCache::enable_routes; copied with shared
//   prefixes, kept across parked turns), and each Turn carries its slot's routes so far.
//
// Batching: a decode step's rows are the unparked sequences in slots, in the order they joined
// (those already decoding, then the ones just prefilled, then those copying a prefix, then the
// resumed). One forward prefills the sequences admitted together; one forward prefills the
// continuations of one collect() result.
// Randomness: token c of a turn is drawn with uniform_draw(spec.seed, c) (sampler.h), the seed
// coming from the source: the tokens depend neither on batch composition, slot count nor
// schedule. Log-probs are computed from K/V each position got in its own prefill or decode step,
// so they agree with a forward over the whole sequence to rounding, not bit for bit.
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sequence_source.h"

namespace rlpt::rollout {

// Runs every sequence of `source` to its end on `model` (SequenceSource's call order), under
// NoGradGuard. params: the sampling rule, stop ids and strings, pad_id (max_new_tokens is not
// read: each turn's budget is TurnSpec::max_tokens), validated by the caller
// (validate_sampling_params); limits as validate_batch_limits accepts them (continuous = false:
// new sequences are admitted only when every slot is free; share_prefixes = false: every
// sequence prefills its first tokens). ValueError naming rollout.max_num_batched_tokens when the
// budget cannot hold one slot; InternalError when the source breaks its contract.
void run_engine(model::CausalLM& model, SequenceSource& source, const SamplingParams& params,
                const BatchLimits& limits);

}  // namespace rlpt::rollout
