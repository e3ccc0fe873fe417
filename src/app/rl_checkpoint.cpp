// Checkpoints of an RL run: every role with state writes its own HDF5 file into
// <run_dir>/checkpoints/step_<N>/, the controller writes controller.h5 (step, data position,
// KL controller), and the COMPLETE manifest (file sizes + CRCs) is written last. A checkpoint
// without COMPLETE does not exist as far as resume is concerned.
#include <algorithm>
#include <filesystem>

#include "rl_trainer.h"
#include "controller_state.h"
#include "run_dir.h"
#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/core/log.h"
#include "rlpt/app/registry.h"

namespace rlpt::app {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kControllerStateVersion = 1;

std::string hash_hex(uint64_t h) { return fmt::format("{:016x}", h); }
}  // namespace

void RlTrainer::save_checkpoint() {
    if (rollout_.async()) rollout_.settle_prefetch();  // the next step's batch is part of the state
    const auto save_roles = [&](const std::string& dir) {
        const Batch m = protocol::with_args(Batch(0), protocol::DirArgs{dir});
        std::vector<Batch> rows;
        for (const auto& role : plan_.checkpointed_roles) {
            auto call = ctl_.submit_raw(ctl_.role_index(role), method_id(role, "save"), &m, nullptr);
            for (Batch& b : ctl_.wait_all(call)) rows.push_back(std::move(b));
        }
        return rows;
    };
    write_run_checkpoint(
        run_, step_, save_roles,
        [&](ckpt::H5Writer& w) {
            w.set_int_attr("controller/state_version", kControllerStateVersion);
            w.set_int_attr("controller/step", step_);
            write_sampler_state(w, sampler_.state());
            w.set_double_attr("controller/kl_coef", rewards_.kl_coef());
            if (rollout_.async()) rollout_.save(w);
        },
        "checkpoint");
    // A resumed run starts from the checkpointed weights on the rollout: so does this one.
    if (rollout_.async()) rollout_.sync_to_latest();
}

bool RlTrainer::try_resume() {
    const std::optional<ckpt::CheckpointInfo> info = checkpoint_to_resume(c_, run_.run_dir);
    if (!info) return false;
    const auto& man = info->manifest;
    if (man.config_hash != hash_hex(config_hash(c_))) {
        RLPT_LOG_WARN("resuming from {} which was written with a different config (changed keys take effect from "
                      "here on)",
                      info->dir);
    }
    for (const auto& role : plan_.checkpointed_roles) {
        auto it = man.roles.find(role);
        const comm::RoleLayout* now = run_.topology->placement().find(role);
        if (it != man.roles.end() && now && it->second.size() != now->world_ranks.size()) {
            RLPT_LOG_INFO(
                "resuming {} written with {} {} rank(s) on {}: each rank reads its ranges of the saved shards "
                "(any DP size, ZeRO stage and tensor parallelism)",
                info->dir, it->second.size(), role, now->world_ranks.size());
        }
    }
    ckpt::H5Reader r((fs::path(info->dir) / "controller.h5").string());
    RLPT_CHECK_KIND(IoError, r.int_attr("controller/state_version") == kControllerStateVersion,
                    "{}: controller state version {} is not {}", info->dir, r.int_attr("controller/state_version"),
                    kControllerStateVersion);
    const data::SamplerState st = read_sampler_state(r);
    sampler_.set_state(st);
    step_ = r.int_attr("controller/step");
    rollout_.load(r, std::max<int64_t>(0, step_ - c_.trainer.critic_warmup));
    rewards_.set_kl_coef(r.double_attr("controller/kl_coef"));
    const Batch m = protocol::with_args(Batch(0), protocol::DirArgs{info->dir});
    for (const auto& role : plan_.checkpointed_roles) {
        auto call = ctl_.submit_raw(ctl_.role_index(role), method_id(role, "load"), &m, nullptr);
        ctl_.wait(call);
    }
    rollout_.sync_weights();
    RLPT_LOG_INFO("resumed from {} (step {}, epoch {}, {} of {} prompts of that epoch used)", info->dir, step_,
                  st.epoch, st.position, st.dataset_size);
    return true;
}

}  // namespace rlpt::app
