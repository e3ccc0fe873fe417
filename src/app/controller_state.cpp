#include "controller_state.h"

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

}  // namespace rlpt::app
