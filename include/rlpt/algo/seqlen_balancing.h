#pragma once
// Sequence-length balancing (verl utils/seqlen_balancing.py, ALGORITHMS §4). Torch-free.
//
// Everything works on per-sample token counts (the attention-mask sum of each sample) and returns
// index lists into that list; moving the data is the caller's job. Balancing is done on
// WORKLOADS (calculate_workload), not raw lengths, as verl does.
// None of these functions communicate: the DP all-reduce of the micro-batch count is the
// caller's (see rearrange_micro_batches).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rlpt::algo {

using Partitions = std::vector<std::vector<int64_t>>;

// 24576·L + L² (FLOPs proxy of a 7B transformer). Throws ValueError for L < 0.
int64_t calculate_workload(int64_t seqlen);
std::vector<int64_t> calculate_workloads(const std::vector<int64_t>& seqlens);

// Karmarkar–Karp largest differencing into k sets, with verl's exact tie-breaking, so the result
// is the same as verl's for the same input:
//  * a set orders by (sum, #items, items as (idx, value) pairs, lexicographically);
//  * the state with the largest spread (largest minus smallest set sum) is merged first; on a
//    tie, the state whose largest set is larger goes first;
//  * init: items sorted by (value, idx); equal_size: each run of k consecutive sorted items is one
//    state with one item per set (needs n % k == 0), otherwise one state per item;
//  * merge: A.sets[i] += B.sets[k-1-i], sets re-sorted descending.
// Returns the final k sets in descending order, item indices in merge order. ValueError for
// k < 1, negative values, or equal_size with n % k != 0.
Partitions karmarkar_karp(const std::vector<int64_t>& values, int64_t k, bool equal_size);

// Each item (input order) goes to the partition with the smallest sum (lowest index on ties);
// equal_size adds a bias of Σ values + 1 to every item (needs n % k == 0).
Partitions greedy_partition(const std::vector<int64_t>& values, int64_t k, bool equal_size);

// karmarkar_karp + checks (n >= k, no empty partition, every index once) + indices sorted inside
// each partition; partition order stays KK's (largest sum first).
Partitions get_seqlen_balanced_partitions(const std::vector<int64_t>& values, int64_t k, bool equal_size);

// Samples sharing a uid stay together: groups (by label, first-appearance order) are balanced on
// their summed workloads with KK equal_size into k parts (needs #groups % k == 0). Indices sorted.
Partitions get_group_balanced_partitions(const std::vector<int64_t>& seqlens, const std::vector<int64_t>& uids,
                                         int64_t k);

struct MicroBatchOptions {
    int64_t max_token_len = 0;           // token budget per micro-batch (> 0)
    int64_t min_num_micro_batches = 0;   // raise the count to at least this (0: no minimum). Pass
                                         // the DP-wide MAX of local_num_micro_batches() here so all
                                         // ranks make the same number of micro-batches.
    int64_t num_batches_divided_by = 1;  // round the count up to a multiple (virtual pipeline)
    int64_t padded_width = 0;            // if > 0: the padded sequence width, must fit the budget
    int64_t force_group_size = 1;        // > 1: consecutive runs of this many samples stay together
    bool balance_order = true;           // use_dynamic_bsz_balance: small micro-batches at both ends
};

// min(#groups, ceil(Σ seqlens / max_token_len)), at least 1: the count before the DP all-reduce.
int64_t local_num_micro_batches(const std::vector<int64_t>& seqlens, int64_t max_token_len,
                                int64_t force_group_size = 1);

// Token-budget micro-batching (rearrange_micro_batches): count = max(local count,
// min_num_micro_batches) rounded up to num_batches_divided_by (ValueError if it exceeds the number
// of groups); workloads partitioned by KK with equal_size = false. With balance_order the
// partitions are sorted by (workload sum, first index) descending and reordered to
// p[0::2] reversed + p[1::2]. Note: KK only balances; a micro-batch may exceed max_token_len.
// Choice: an all-empty batch (Σ seqlens = 0) still gets one micro-batch (verl would ask KK for 0).
Partitions rearrange_micro_batches(const std::vector<int64_t>& seqlens, const MicroBatchOptions& opts);

// Trainer DP balancing (RayPPOTrainer._balance_batch): returns the permutation to apply to the
// batch (new row r = old row order[r]) so that an even split into dp_size chunks gives balanced
// workloads. Each DP part comes from KK equal_size; inside a part samples are sorted by
// (workload, idx) and ordered p[0::2] + reverse(p[1::2]).
// minibatch_size > 0 (keep_minibatch): each consecutive mini-batch is balanced on its own and rank
// j's chunk is the concatenation of its parts of every mini-batch. Choice: the inner ordering is
// applied per mini-batch part (verl sorts the concatenation, mixing mini-batches); batch size must
// be a multiple of minibatch_size and minibatch_size of dp_size (verl silently drops a tail).
std::vector<int64_t> balance_batch_order(const std::vector<int64_t>& seqlens, int64_t dp_size,
                                         int64_t minibatch_size = 0);

// Inverse permutation: out[perm[i]] = i. ValueError if perm is not a permutation of 0..n-1.
std::vector<int64_t> get_reverse_idx(const std::vector<int64_t>& perm);

// verl's log_seqlen_unbalance: {prefix}/min, /max, /minmax_diff over the contiguous chunks of
// size n/k before balancing; /balanced_min, /balanced_max over `partitions`; /mean = Σ/k.
std::map<std::string, double> seqlen_unbalance_metrics(const std::vector<int64_t>& seqlens,
                                                       const Partitions& partitions,
                                                       const std::string& prefix = "global_seqlen");

}  // namespace rlpt::algo
