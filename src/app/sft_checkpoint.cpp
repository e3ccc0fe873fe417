#include "sft_checkpoint.h"

#include <filesystem>

#include "controller_state.h"
#include "run_dir.h"
#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/core/log.h"
#include "rlpt/roles/actor.h"

namespace rlpt::app {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kSftStateVersion = 1;

std::string config_hash_hex(const Config& c) { return fmt::format("{:016x}", config_hash(c)); }
}  // namespace

void save_sft_checkpoint(protocol::Controller& ctl, const RunContext& run, int64_t step,
                         const data::EpochSampler& sampler) {
    const auto save_roles = [&](const std::string& dir) {
        return ctl.call_all<roles::ActorMethod::kSave>(Batch(0), {dir});
    };
    write_run_checkpoint(
        run, step, save_roles,
        [&](ckpt::H5Writer& w) {
            w.set_string_attr("controller/mode", "sft");
            w.set_int_attr("controller/state_version", kSftStateVersion);
            w.set_int_attr("controller/step", step);
            write_sampler_state(w, sampler.state());
        },
        "sft checkpoint");
}

int64_t resume_sft(protocol::Controller& ctl, const RunContext& run, data::EpochSampler& sampler) {
    const Config& c = *run.config;
    const std::optional<ckpt::CheckpointInfo> info = checkpoint_to_resume(c, run.run_dir);
    if (!info) return 0;
    const std::string& dir = info->dir;
    const ckpt::Manifest& man = info->manifest;
    ckpt::H5Reader r((fs::path(dir) / "controller.h5").string());
    const std::string written_by = r.has_attr("controller/mode") ? r.string_attr("controller/mode") : "rl";
    RLPT_CHECK_KIND(ConfigError, written_by == "sft",
                    "cannot resume an sft run from {}: it is a checkpoint of a trainer.mode={} run", dir, written_by);
    RLPT_CHECK_KIND(IoError, r.int_attr("controller/state_version") == kSftStateVersion,
                    "{}: sft state version {} is not {}", dir, r.int_attr("controller/state_version"),
                    kSftStateVersion);
    auto it = man.roles.find("actor");
    const int n_actor = static_cast<int>(ctl.layout("actor").world_ranks.size());
    if (it != man.roles.end() && static_cast<int>(it->second.size()) != n_actor) {
        RLPT_LOG_INFO("resuming {} written with {} actor rank(s) on {}: each rank reads its ranges of the saved shards "
                      "(any DP size, ZeRO stage and tensor parallelism)",
                      dir, it->second.size(), n_actor);
    }
    if (man.config_hash != config_hash_hex(c)) {
        RLPT_LOG_WARN("resuming from {} which was written with a different config (changed keys take effect from "
                      "here on)",
                      dir);
    }
    const data::SamplerState st = read_sampler_state(r);
    sampler.set_state(st);
    ctl.call<roles::ActorMethod::kLoad>(Batch(0), {dir});
    const int64_t step = r.int_attr("controller/step");
    RLPT_LOG_INFO("sft: resumed from {} (step {}, epoch {})", dir, step, st.epoch);
    return step;
}

}  // namespace rlpt::app
