#include "ckpt/h5_handle.h"

#include <fmt/format.h>

#include "rlpt/core/error.h"

namespace rlpt::ckpt::detail {
namespace {

herr_t collect_error(unsigned n, const H5E_error2_t* e, void* data) {
    auto* out = static_cast<std::string*>(data);
    char minor[160] = "";
    H5Eget_msg(e->min_num, nullptr, minor, sizeof minor);
    if (n > 0) out->append("; ");
    out->append(
        fmt::format("{}(): {}", e->func_name != nullptr ? e->func_name : "?", e->desc != nullptr ? e->desc : ""));
    if (minor[0] != '\0') out->append(fmt::format(" [{}]", minor));
    return 0;
}

}  // namespace

void h5_silence_error_printing() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string h5_error_stack() {
    std::string out;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &out);
    H5Eclear2(H5E_DEFAULT);
    return out.empty() ? std::string("no HDF5 error message") : out;
}

void h5_fail(const char* call, const char* file, int line) {
    throw IoError(fmt::format("HDF5 call failed: {}", h5_error_stack()), file, line, call);
}

void H5Id::close() {
    if (id_ < 0 || closer_ == nullptr) return;
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    RLPT_H5_CHECK(closer_(id));
}

}  // namespace rlpt::ckpt::detail
