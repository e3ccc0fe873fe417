#include "rlpt/algo/seqlen_balancing.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <unordered_map>
#include <utility>

#include "rlpt/core/error.h"

namespace rlpt::algo {

namespace {

using Item = std::pair<int64_t, int64_t>;  // (index, value)

struct KkSet {
    int64_t sum = 0;
    std::vector<Item> items;
};

// verl's Set.__lt__: (sum, #items, items) lexicographically.
bool set_less(const KkSet& a, const KkSet& b) {
    if (a.sum != b.sum) return a.sum < b.sum;
    if (a.items.size() != b.items.size()) return a.items.size() < b.items.size();
    return a.items < b.items;
}

struct KkState {
    std::vector<KkSet> sets;  // kept in descending set order

    void sort_desc() {
        std::stable_sort(sets.begin(), sets.end(), [](const KkSet& a, const KkSet& b) { return set_less(b, a); });
    }
    int64_t spread() const { return sets.front().sum - sets.back().sum; }
};

// True when `a` must be merged before `b` (verl's State.__lt__ in a min-heap).
bool pops_before(const KkState& a, const KkState& b) {
    if (a.spread() != b.spread()) return a.spread() > b.spread();
    return set_less(b.sets.front(), a.sets.front());
}

void check_values(const std::vector<int64_t>& values, int64_t k, bool equal_size, const char* where) {
    RLPT_CHECK(k >= 1, "{}: the number of partitions must be >= 1, got {}", where, k);
    for (size_t i = 0; i < values.size(); ++i)
        RLPT_CHECK(values[i] >= 0, "{}: values must be >= 0, got {} at index {}", where, values[i], i);
    RLPT_CHECK(!equal_size || values.size() % static_cast<size_t>(k) == 0,
               "{}: equal_size needs the number of items ({}) to be a multiple of k ({})", where, values.size(), k);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t calculate_workload(int64_t seqlen) {
    RLPT_CHECK(seqlen >= 0, "calculate_workload: sequence length must be >= 0, got {}", seqlen);
    return 24576 * seqlen + seqlen * seqlen;
}

std::vector<int64_t> calculate_workloads(const std::vector<int64_t>& seqlens) {
    std::vector<int64_t> out;
    out.reserve(seqlens.size());
    for (auto l : seqlens) out.push_back(calculate_workload(l));
    return out;
}

Partitions karmarkar_karp(const std::vector<int64_t>& values, int64_t k, bool equal_size) {
    check_values(values, k, equal_size, "karmarkar_karp");
    const size_t ku = static_cast<size_t>(k);
    std::vector<std::pair<int64_t, int64_t>> sorted;  // (value, index)
    for (size_t i = 0; i < values.size(); ++i) sorted.emplace_back(values[i], static_cast<int64_t>(i));
    std::sort(sorted.begin(), sorted.end());

    std::vector<KkState> states;
    auto add_state = [&](size_t begin, size_t count) {
        KkState s;
        s.sets.resize(ku);
        for (size_t j = 0; j < count; ++j) {
            const auto& [val, idx] = sorted[begin + j];
            s.sets[j].items.emplace_back(idx, val);
            s.sets[j].sum += val;
        }
        s.sort_desc();
        states.push_back(std::move(s));
    };
    if (equal_size) {
        for (size_t off = 0; off < sorted.size(); off += ku) add_state(off, ku);
    } else {
        for (size_t off = 0; off < sorted.size(); ++off) add_state(off, 1);
    }
    if (states.empty()) return Partitions(ku);

    // Heap of state ids; the top is the state that pops first.
    auto cmp = [&](size_t a, size_t b) { return pops_before(states[b], states[a]); };
    std::priority_queue<size_t, std::vector<size_t>, decltype(cmp)> heap(cmp);
    for (size_t i = 0; i < states.size(); ++i) heap.push(i);
    while (heap.size() > 1) {
        size_t a = heap.top();
        heap.pop();
        size_t b = heap.top();
        heap.pop();
        auto& sa = states[a];
        auto& sb = states[b];
        for (size_t i = 0; i < ku; ++i) {
            auto& dst = sa.sets[i];
            auto& src = sb.sets[ku - 1 - i];
            dst.items.insert(dst.items.end(), src.items.begin(), src.items.end());
            dst.sum += src.sum;
        }
        sb.sets.clear();
        sa.sort_desc();
        heap.push(a);
    }
    const auto& final_state = states[heap.top()];
    Partitions out;
    for (const auto& s : final_state.sets) {
        std::vector<int64_t> part;
        for (const auto& it : s.items) part.push_back(it.first);
        out.push_back(std::move(part));
    }
    if (equal_size) {
        for (const auto& p : out)
            RLPT_CHECK(p.size() * ku == values.size(),
                       "karmarkar_karp: equal_size produced a part of {} items ({} / {})", p.size(), values.size(), k);
    }
    return out;
}

Partitions greedy_partition(const std::vector<int64_t>& values, int64_t k, bool equal_size) {
    check_values(values, k, equal_size, "greedy_partition");
    const int64_t bias = equal_size ? std::accumulate(values.begin(), values.end(), int64_t{0}) + 1 : 0;
    Partitions out(static_cast<size_t>(k));
    std::vector<int64_t> sums(static_cast<size_t>(k), 0);
    for (size_t i = 0; i < values.size(); ++i) {
        size_t best = 0;
        for (size_t j = 1; j < sums.size(); ++j)
            if (sums[j] < sums[best]) best = j;
        out[best].push_back(static_cast<int64_t>(i));
        sums[best] += values[i] + bias;
    }
    return out;
}

Partitions get_seqlen_balanced_partitions(const std::vector<int64_t>& values, int64_t k, bool equal_size) {
    RLPT_CHECK(k >= 1 && static_cast<int64_t>(values.size()) >= k,
               "get_seqlen_balanced_partitions: need at least k = {} items, got {}", k, values.size());
    Partitions parts = karmarkar_karp(values, k, equal_size);
    RLPT_CHECK(static_cast<int64_t>(parts.size()) == k, "get_seqlen_balanced_partitions: got {} parts, expected {}",
               parts.size(), k);
    std::vector<char> seen(values.size(), 0);
    for (size_t i = 0; i < parts.size(); ++i) {
        RLPT_CHECK(!parts[i].empty(), "get_seqlen_balanced_partitions: partition {} of {} is empty", i, k);
        std::sort(parts[i].begin(), parts[i].end());
        for (auto idx : parts[i]) {
            RLPT_ASSERT(idx >= 0 && static_cast<size_t>(idx) < seen.size() && !seen[idx]);
            seen[idx] = 1;
        }
    }
    RLPT_ASSERT(std::all_of(seen.begin(), seen.end(), [](char c) { return c != 0; }));
    return parts;
}

Partitions get_group_balanced_partitions(const std::vector<int64_t>& seqlens, const std::vector<int64_t>& uids,
                                         int64_t k) {
    RLPT_CHECK(seqlens.size() == uids.size(), "get_group_balanced_partitions: {} sequence lengths but {} uids",
               seqlens.size(), uids.size());
    std::unordered_map<int64_t, size_t> group_of;
    std::vector<std::vector<int64_t>> members;
    std::vector<int64_t> workloads;
    for (size_t i = 0; i < seqlens.size(); ++i) {
        auto [it, inserted] = group_of.emplace(uids[i], members.size());
        if (inserted) {
            members.emplace_back();
            workloads.push_back(0);
        }
        members[it->second].push_back(static_cast<int64_t>(i));
        workloads[it->second] += calculate_workload(seqlens[i]);
    }
    RLPT_CHECK(k >= 1 && members.size() % static_cast<size_t>(k) == 0 && members.size() >= static_cast<size_t>(k),
               "get_group_balanced_partitions: the number of uid groups ({}) must be a positive multiple of "
               "k = {}",
               members.size(), k);
    Partitions out;
    for (const auto& gp : get_seqlen_balanced_partitions(workloads, k, /*equal_size=*/true)) {
        std::vector<int64_t> part;
        for (auto g : gp) part.insert(part.end(), members[g].begin(), members[g].end());
        std::sort(part.begin(), part.end());
        out.push_back(std::move(part));
    }
    return out;
}

int64_t local_num_micro_batches(const std::vector<int64_t>& seqlens, int64_t max_token_len, int64_t force_group_size) {
    RLPT_CHECK(max_token_len > 0, "micro-batching: max_token_len must be > 0, got {}", max_token_len);
    RLPT_CHECK(force_group_size >= 1, "micro-batching: force_group_size must be >= 1, got {}", force_group_size);
    const int64_t n = static_cast<int64_t>(seqlens.size());
    RLPT_CHECK(n > 0, "micro-batching: the batch is empty");
    RLPT_CHECK(n % force_group_size == 0, "micro-batching: batch size {} is not a multiple of force_group_size {}", n,
               force_group_size);
    int64_t total = 0;
    for (auto l : seqlens) {
        RLPT_CHECK(l >= 0, "micro-batching: sequence lengths must be >= 0, got {}", l);
        total += l;
    }
    return std::max<int64_t>(1, std::min(n / force_group_size, ceil_div(total, max_token_len)));
}

Partitions rearrange_micro_batches(const std::vector<int64_t>& seqlens, const MicroBatchOptions& opts) {
    const int64_t g = opts.force_group_size;
    int64_t num = local_num_micro_batches(seqlens, opts.max_token_len, g);
    const int64_t longest = *std::max_element(seqlens.begin(), seqlens.end());
    RLPT_CHECK(longest <= opts.max_token_len && opts.padded_width <= opts.max_token_len,
               "micro-batching: max_token_len {} is smaller than a single sequence ({} tokens, padded width {})",
               opts.max_token_len, longest, opts.padded_width);
    RLPT_CHECK(opts.num_batches_divided_by >= 1, "micro-batching: num_batches_divided_by must be >= 1, got {}",
               opts.num_batches_divided_by);
    num = std::max(num, opts.min_num_micro_batches);
    num = ceil_div(num, opts.num_batches_divided_by) * opts.num_batches_divided_by;
    const int64_t n_groups = static_cast<int64_t>(seqlens.size()) / g;
    RLPT_CHECK(num <= n_groups,
               "micro-batching: {} micro-batches requested (after the minimum {} and rounding to a multiple of "
               "{}) but only {} samples/groups are available",
               num, opts.min_num_micro_batches, opts.num_batches_divided_by, n_groups);

    const auto workloads = calculate_workloads(seqlens);
    std::vector<int64_t> group_workloads(static_cast<size_t>(n_groups), 0);
    for (size_t i = 0; i < workloads.size(); ++i) group_workloads[i / static_cast<size_t>(g)] += workloads[i];
    Partitions parts;
    for (const auto& gp : get_seqlen_balanced_partitions(group_workloads, num, /*equal_size=*/false)) {
        std::vector<int64_t> part;
        for (auto grp : gp)
            for (int64_t j = 0; j < g; ++j) part.push_back(grp * g + j);
        parts.push_back(std::move(part));
    }
    if (opts.balance_order) {
        auto sum_of = [&](const std::vector<int64_t>& p) {
            int64_t s = 0;
            for (auto i : p) s += workloads[i];
            return s;
        };
        std::stable_sort(parts.begin(), parts.end(), [&](const auto& a, const auto& b) {
            return std::make_pair(sum_of(a), a.front()) > std::make_pair(sum_of(b), b.front());
        });
        Partitions ordered;
        for (int64_t i = ((static_cast<int64_t>(parts.size()) - 1) / 2) * 2; i >= 0; i -= 2)
            ordered.push_back(parts[i]);
        for (size_t i = 1; i < parts.size(); i += 2) ordered.push_back(parts[i]);
        parts = std::move(ordered);
    }
    return parts;
}

std::vector<int64_t> balance_batch_order(const std::vector<int64_t>& seqlens, int64_t dp_size, int64_t minibatch_size) {
    RLPT_CHECK(dp_size >= 1, "balance_batch_order: dp_size must be >= 1, got {}", dp_size);
    const int64_t n = static_cast<int64_t>(seqlens.size());
    const int64_t mb = minibatch_size > 0 ? minibatch_size : n;
    RLPT_CHECK(mb > 0 && n % mb == 0, "balance_batch_order: batch size {} is not a multiple of the mini-batch size {}",
               n, mb);
    RLPT_CHECK(mb % dp_size == 0, "balance_batch_order: (mini-)batch size {} is not a multiple of dp_size {}", mb,
               dp_size);
    const auto workloads = calculate_workloads(seqlens);
    std::vector<std::vector<int64_t>> per_rank(static_cast<size_t>(dp_size));
    for (int64_t off = 0; off < n; off += mb) {
        std::vector<int64_t> chunk(workloads.begin() + off, workloads.begin() + off + mb);
        auto parts = get_seqlen_balanced_partitions(chunk, dp_size, /*equal_size=*/true);
        for (size_t r = 0; r < parts.size(); ++r) {
            auto& p = parts[r];
            for (auto& i : p) i += off;
            std::sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
                return std::make_pair(workloads[a], a) < std::make_pair(workloads[b], b);
            });
            const int64_t len = static_cast<int64_t>(p.size());
            for (int64_t i = 0; i < len; i += 2) per_rank[r].push_back(p[i]);
            for (int64_t i = len % 2 == 0 ? len - 1 : len - 2; i >= 1; i -= 2) per_rank[r].push_back(p[i]);
        }
    }
    std::vector<int64_t> order;
    for (const auto& r : per_rank) order.insert(order.end(), r.begin(), r.end());
    return order;
}

std::vector<int64_t> get_reverse_idx(const std::vector<int64_t>& perm) {
    std::vector<int64_t> out(perm.size(), -1);
    for (size_t i = 0; i < perm.size(); ++i) {
        const int64_t p = perm[i];
        RLPT_CHECK(p >= 0 && static_cast<size_t>(p) < perm.size() && out[p] < 0,
                   "get_reverse_idx: not a permutation of 0..{} (entry {} = {})", perm.size() - 1, i, p);
        out[p] = static_cast<int64_t>(i);
    }
    return out;
}

std::map<std::string, double> seqlen_unbalance_metrics(const std::vector<int64_t>& seqlens,
                                                       const Partitions& partitions, const std::string& prefix) {
    const size_t k = partitions.size();
    RLPT_CHECK(k > 0 && seqlens.size() >= k, "seqlen_unbalance_metrics: need 1..{} partitions, got {}", seqlens.size(),
               k);
    const size_t chunk = seqlens.size() / k;
    double lo = 0, hi = 0, total = 0;
    bool first = true;
    for (size_t off = 0; off < seqlens.size(); off += chunk) {
        double s = 0;
        for (size_t i = off; i < std::min(seqlens.size(), off + chunk); ++i) s += static_cast<double>(seqlens[i]);
        lo = first ? s : std::min(lo, s);
        hi = first ? s : std::max(hi, s);
        first = false;
        total += s;
    }
    double blo = 0, bhi = 0;
    for (size_t p = 0; p < k; ++p) {
        double s = 0;
        for (auto i : partitions[p]) {
            RLPT_CHECK(i >= 0 && static_cast<size_t>(i) < seqlens.size(),
                       "seqlen_unbalance_metrics: index {} out of range", i);
            s += static_cast<double>(seqlens[i]);
        }
        blo = p == 0 ? s : std::min(blo, s);
        bhi = p == 0 ? s : std::max(bhi, s);
    }
    return {{prefix + "/min", lo},           {prefix + "/max", hi},           {prefix + "/minmax_diff", hi - lo},
            {prefix + "/balanced_min", blo}, {prefix + "/balanced_max", bhi}, {prefix + "/mean", total / k}};
}

}  // namespace rlpt::algo
