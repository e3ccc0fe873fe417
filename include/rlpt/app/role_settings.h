#pragma once
// Settings resolved once (DESIGN §2): the run plan's other half. The run's Config is read by
// src/app and src/config only; every layer below receives what it needs, resolved here on the
// controller:
//   the protocol   its two timeouts (protocol_settings), when app::run_job builds WorkerHost and
//                  Controller;
//   each role      its settings struct (roles::ActorSettings, CriticSettings, ReferenceSettings,
//                  RewardModelSettings, RolloutSettings: include/rlpt/roles/), sent with its kInit: run_mode gives
//                  them to the Controller before any kInit (give_role_settings), and the role keeps
//                  them. A setting the role needs but the config lacks is a ConfigError here, before
//                  any role builds anything.
// A new role's settings: its struct in its header and one row in this file's table.
#include <map>
#include <string>
#include <vector>

#include "rlpt/batch/batch.h"
#include "rlpt/comm/placement.h"
#include "rlpt/config/config.h"
#include "rlpt/protocol/runtime.h"

namespace rlpt::tokenizer {
class Tokenizer;
}

namespace rlpt::app {

// trainer.call_timeout_s and trainer.stall_warn_s.
protocol::ProtocolSettings protocol_settings(const Config& c);

// The settings of each of `roles` that has settings, encoded as its kInit's "settings." fields (protocol::settings_batch). ConfigError
// naming the key when one is missing (reward_model.model_path).
std::map<std::string, Batch> resolve_role_settings(const Config& c, const std::vector<std::string>& roles);

// resolve_role_settings for every role `ctl` places, given to it (Controller::set_role_settings).
// Before the first kInit.
void give_role_settings(protocol::Controller& ctl, const Config& c);

// The rollout's kInit input with the run's tokenizer (roles::RolloutMethod::kInit): `args`, the
// token texts (one row per id) and rollout.stages' appends encoded (RolloutInitArgs); the
// controller adds the settings. ConfigError naming rollout.stages when the stages' max_tokens
// plus their appended tokens exceed data.max_response_length.
Batch rollout_init_batch(const protocol::InitArgs& args, const Config& c, const tokenizer::Tokenizer& tok);

// ref.zero_stage resolved: -1 follows the actor (3 when actor.optim.zero_stage is 3, else 0).
int64_t reference_zero_stage(const Config& c);

// comm::zero_shard_group_size for every placed role that shards ZeRO state under `c` (the actor
// with actor.optim or, in SFT mode, sft.optim; the critic; a sharded reference with actor.optim's
// fsdp_size): throws the first ConfigError. Called where the placement is computed, on every rank.
void check_zero_shard_groups(const Config& c, const comm::Placement& p);

}  // namespace rlpt::app
