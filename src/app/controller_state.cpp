#include "controller_state.h"

#include <filesystem>

#include "run_dir.h"
#include "rlpt/ckpt/checkpoint_dir.h"
#include "rlpt/core/log.h"

namespace rlpt::app {

void write_sampler_state(ckpt::H5Writer& w, const data::SamplerState& st) {
    w.set_int_attr("controller/sampler_epoch", st.epoch);
    w.set_int_attr("controller/sampler_position", st.position);
    w.set_int_attr("controller/sampler_dataset_size", st.dataset_size);
    w.set_int_attr("controller/sampler_seed", static_cast<int64_t>(st.seed));
}

data::SamplerState read_sampler_state(const ckpt::H5Reader& r) {
    data::SamplerState st;
    st.epoch = r.int_attr("controller/sampler_epoch");
    st.position = r.int_attr("controller/sampler_position");
    st.dataset_size = r.int_attr("controller/sampler_dataset_size");
    st.seed = static_cast<uint64_t>(r.int_attr("controller/sampler_seed"));
    return st;
}

void write_run_checkpoint(const RunContext& run, int64_t step,
                          const std::function<std::vector<Batch>(const std::string& dir)>& save_roles,
                          const std::function<void(ckpt::H5Writer&)>& write_controller, const std::string& what) {
    const Config& c = *run.config;
    const std::string root = checkpoint_root(run.run_dir);
    const std::string dir = ckpt::create_step_dir(root, step);
    ckpt::Manifest manifest;
    manifest.step = step;
    manifest.config_hash = fmt::format("{:016x}", config_hash(c));
    manifest.world_size = run.topology->world_size();
    for (const auto& r : run.topology->placement().roles) manifest.roles[r.role] = r.world_ranks;
    for (const Batch& b : save_roles(dir)) {
        ckpt::ManifestFile f;
        f.name = b.strings("file")[0];
        f.digest.size = static_cast<uint64_t>(b.ints("bytes")[0]);
        f.digest.crc32 = static_cast<uint32_t>(b.ints("crc32")[0]);
        manifest.files.push_back(f);
    }
    ckpt::H5Writer w((std::filesystem::path(dir) / "controller.h5").string());
    write_controller(w);
    manifest.files.push_back({"controller.h5", w.commit()});
    ckpt::write_complete_marker(dir, manifest);
    auto removed = ckpt::prune_checkpoints(root, static_cast<int>(c.trainer.max_checkpoints), step);
    RLPT_LOG_INFO("{} step {} written to {} ({} files){}", what, step, dir, manifest.files.size(),
                  removed.empty() ? "" : fmt::format("; removed {} older", removed.size()));
}

}  // namespace rlpt::app
