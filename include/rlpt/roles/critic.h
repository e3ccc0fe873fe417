#pragma once
// The critic role: a value model trained on returns. Table in roles/critic.cpp.
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class CriticMethod : uint16_t {
    kPing = 0,        // one_to_all / all
    kInit,            // one_to_all / none, collective. meta vocab_size, total_steps (training steps). From
                      //   critic.model_path, else the policy's weights + a zero value head
    kComputeValues,   // dp_split / concat: input_ids, attention_mask, position_ids, responses
                      //   -> values [B, R] fp32
    kUpdate,          // dp_split / concat (metrics), collective: + values, returns, response_mask;
                      //   meta num_mini_batches, global_mini_batch_rows
    kSave,            // one_to_all / all, collective: meta dir -> file info per rank
    kLoad,            // one_to_all / none, collective: meta dir
    kCount
};

const protocol::RoleSpec& critic_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::CriticMethod> {
    static constexpr const char* kName = "critic";
};
