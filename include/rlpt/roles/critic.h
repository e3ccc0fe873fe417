#pragma once
// The critic role: a value model trained on returns. Table in roles/critic.cpp.
#include <cstdint>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class CriticMethod : uint16_t {
    kPing = 0,       // one_to_all / all
    kInit,           // one_to_all / none. protocol::InitArgs (total_steps: training steps). From
                     //   critic.model_path, else the policy's weights + a zero value head
    kComputeValues,  // dp_split / concat: input_ids, attention_mask, position_ids, responses
                     //   -> values [B, R] fp32
    kUpdate,         // dp_split unpadded / concat (metrics): + values, returns, response_mask;
                     //   CriticUpdateArgs
    kSave,           // one_to_all / all: protocol::DirArgs -> file info per rank
    kLoad,           // one_to_all / none: protocol::DirArgs
    kCount
};

struct CriticUpdateArgs {
    int64_t num_mini_batches = 1;       // per epoch
    double global_mini_batch_rows = 0;  // rows of one mini-batch over all DP ranks
    template <typename V>
    void visit(V& v) {
        v("num_mini_batches", num_mini_batches);
        v("global_mini_batch_rows", global_mini_batch_rows);
    }
};

const protocol::RoleSpec& critic_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::CriticMethod> {
    static constexpr const char* kName = "critic";
};
