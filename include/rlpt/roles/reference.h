#pragma once
// The reference role: the frozen initial policy, for KL terms. Table in roles/reference.cpp.
#include <cstdint>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class ReferenceMethod : uint16_t {
    kPing = 0,        // one_to_all / all
    kInit,            // one_to_all / none. protocol::InitArgs
    kComputeLogProb,  // dp_split / concat: input_ids, attention_mask, position_ids, responses;
                      //   ReferenceLogProbArgs -> ref_log_prob [B, R] fp32
    kCount
};

struct ReferenceLogProbArgs {
    double temperature = 1.0;
    template <typename V>
    void visit(V& v) {
        v("temperature", temperature);
    }
};

const protocol::RoleSpec& reference_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::ReferenceMethod> {
    static constexpr const char* kName = "reference";
};
