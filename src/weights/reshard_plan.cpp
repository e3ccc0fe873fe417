// The shard-to-shard plan between two tensor-parallel layouts (rlpt/weights/reshard_plan.h).
#include "rlpt/weights/reshard_plan.h"

#include <algorithm>

#include "rlpt/core/error.h"
#include "rlpt/model/tensor_parallel.h"

namespace rlpt::weights {

using model::full_shape;
using model::shard_spec;
using model::ShardSpec;
using model::tp_layout;
using model::TpLayout;

namespace {

// The range of the full tensor along `dim` that a rank holds ([begin, end)) and where it starts
// in the rank's local tensor: a slice holds its real rows, a replicated tensor all of them.
struct Held {
    int64_t begin = 0, end = 0;
};
Held held(const ShardSpec& s, int64_t full) {
    if (s.dim < 0) return {0, full};
    return {s.start, s.start + s.real()};
}

}  // namespace

ReshardPlan reshard_plan(const torch::nn::Module& local, const model::TpLayout& local_layout,
                         const model::ModelArgs& args, int64_t tp_from, int64_t tp_to, int64_t n_blocks,
                         std::vector<std::string>* names) {
    std::vector<TpLayout> from, to;
    for (int64_t r = 0; r < tp_from; ++r) from.push_back(tp_layout(args, tp_from, r));
    for (int64_t r = 0; r < tp_to; ++r) to.push_back(tp_layout(args, tp_to, r));
    ReshardPlan plan;
    plan.n_senders = static_cast<int>(tp_from);
    if (names) names->clear();
    int tensor = 0;
    for (const auto& item : local.named_parameters(/*recurse=*/true)) {
        const std::string& name = item.key();
        if (names) names->push_back(name);
        const auto full = full_shape(shard_spec(name, local_layout), item.value().sizes().vec());
        plan.full_shapes.push_back(full);
        const ShardSpec s0 = shard_spec(name, from[0]), d0 = shard_spec(name, to[0]);
        RLPT_ASSERT(s0.dim < 0 || d0.dim < 0 || s0.dim == d0.dim);
        const int64_t dim = s0.dim >= 0 ? s0.dim : d0.dim;
        const int64_t full_len = dim >= 0 ? full[static_cast<size_t>(dim)] : 1;
        for (int64_t b = 0; b < n_blocks; ++b) {
            for (int64_t j = 0; j < tp_to; ++j) {
                const int64_t receiver = b * tp_to + j;
                const int dst = static_cast<int>(tp_from + receiver);
                if (dim < 0) {  // replicated on both sides: the whole tensor from one source
                    plan.pieces.push_back({tensor, static_cast<int>(receiver % tp_from), dst, -1, 0, 0, 0});
                    continue;
                }
                const Held want = held(shard_spec(name, to[static_cast<size_t>(j)]), full_len);
                for (int64_t pos = want.begin; pos < want.end;) {
                    bool found = false;
                    for (int64_t k = 0; k < tp_from && !found; ++k) {
                        const int64_t src = (receiver + k) % tp_from;
                        const Held have = held(shard_spec(name, from[static_cast<size_t>(src)]), full_len);
                        if (pos < have.begin || pos >= have.end) continue;
                        const int64_t end = std::min(want.end, have.end);
                        plan.pieces.push_back(
                            {tensor, static_cast<int>(src), dst, dim, pos - have.begin, pos - want.begin, end - pos});
                        pos = end;
                        found = true;
                    }
                    RLPT_CHECK_KIND(InternalError, found, "reshard_plan: no rank of tp {} holds row {} of '{}'",
                                    tp_from, pos, name);
                }
            }
        }
        ++tensor;
    }
    return plan;
}

}  // namespace rlpt::weights
