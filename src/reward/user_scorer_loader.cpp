#include "rlpt/reward/user_scorer_loader.h"

#include <dlfcn.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/reward/user_scorer.h"

namespace rlpt::reward {

namespace {

constexpr std::size_t kPredCapacity = 4096;
constexpr std::size_t kErrorCapacity = 4096;

std::string dl_error_text() {
    const char* e = dlerror();
    return e ? std::string(e) : std::string("unknown dlopen error");
}

// A NUL-terminated buffer's text, bounded by its capacity even if the scorer forgot the NUL.
std::string bounded_c_string(const std::vector<char>& buf) {
    std::size_t n = 0;
    while (n < buf.size() && buf[n] != '\0') ++n;
    return std::string(buf.data(), n);
}

struct DlCloser {
    void operator()(void* handle) const { dlclose(handle); }
};

}  // namespace

std::shared_ptr<UserScorer> UserScorer::load(const std::string& path) {
    RLPT_CHECK_KIND(IoError, !path.empty(), "user scorer: empty library path");
    std::error_code ec;
    RLPT_CHECK_KIND(IoError, std::filesystem::is_regular_file(path, ec),
                    "user scorer library '{}' does not exist or is not a regular file", path);
    const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;

    dlerror();
    std::unique_ptr<void, DlCloser> handle(dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL));
    RLPT_CHECK_KIND(IoError, handle != nullptr, "user scorer: cannot load '{}': {}", path, dl_error_text());

    dlerror();
    void* version_sym = dlsym(handle.get(), RLPT_SCORER_ABI_VERSION_SYMBOL);
    RLPT_CHECK_KIND(ConfigError, version_sym != nullptr,
                    "user scorer '{}' does not export '{}' (declare it with RLPT_SCORER_EXPORT from "
                    "rlpt/reward/user_scorer.h): {}",
                    path, RLPT_SCORER_ABI_VERSION_SYMBOL, dl_error_text());
    const int version = reinterpret_cast<rlpt_scorer_abi_version_fn>(version_sym)();
    RLPT_CHECK_KIND(ConfigError, version == RLPT_SCORER_ABI_VERSION,
                    "user scorer '{}' was built for scorer ABI version {}, this rlpt supports version {}; "
                    "rebuild it against this rlpt's rlpt/reward/user_scorer.h",
                    path, version, RLPT_SCORER_ABI_VERSION);
    dlerror();
    void* score_sym = dlsym(handle.get(), RLPT_SCORE_V1_SYMBOL);
    RLPT_CHECK_KIND(ConfigError, score_sym != nullptr,
                    "user scorer '{}' does not export '{}' (declare it with RLPT_SCORER_EXPORT from "
                    "rlpt/reward/user_scorer.h): {}",
                    path, RLPT_SCORE_V1_SYMBOL, dl_error_text());
    return std::shared_ptr<UserScorer>(new UserScorer(path, handle.release(), score_sym));
}

UserScorer::UserScorer(std::string path, void* handle, void* score_fn)
    : path_(std::move(path)), handle_(handle), score_fn_(score_fn) {}

UserScorer::~UserScorer() {
    if (handle_ != nullptr) dlclose(handle_);
}

std::string UserScorer::name() const { return "user(" + path_ + ")"; }

ScoreResult UserScorer::score(const ScoreRequest& request) const {
    // std::string copies guarantee the NUL terminator the ABI promises.
    const std::string data_source(request.data_source);
    const std::string solution(request.solution);
    const std::string ground_truth(request.ground_truth);
    const std::string extra = request.extra_info != nullptr && !request.extra_info->is_null()
                                  ? request.extra_info->dump()
                                  : std::string("{}");

    rlpt_score_input in{};
    in.data_source = data_source.c_str();
    in.data_source_len = data_source.size();
    in.solution = solution.c_str();
    in.solution_len = solution.size();
    in.ground_truth = ground_truth.c_str();
    in.ground_truth_len = ground_truth.size();
    in.extra_info_json = extra.c_str();
    in.extra_info_json_len = extra.size();
    in.index = request.index;

    std::vector<char> pred(kPredCapacity, '\0');
    std::vector<char> error(kErrorCapacity, '\0');
    rlpt_score_output out{};
    out.pred = pred.data();
    out.pred_capacity = pred.size();
    out.error_message = error.data();
    out.error_message_capacity = error.size();

    const int rc = reinterpret_cast<rlpt_score_v1_fn>(score_fn_)(&in, &out);
    if (rc != 0) {
        std::string message = bounded_c_string(error);
        RLPT_THROW(ValueError, "user scorer '{}' failed on sample {} (data_source '{}'), code {}: {}", path_,
                   request.index, request.data_source, rc, message.empty() ? "(no message)" : message);
    }
    RLPT_CHECK(std::isfinite(out.score),
               "user scorer '{}' returned a non-finite score {} for sample {} "
               "(data_source '{}')",
               path_, out.score, request.index, request.data_source);
    ScoreResult r;
    r.score = out.score;
    if (out.flags & RLPT_SCORE_HAS_ACC) {
        RLPT_CHECK(std::isfinite(out.acc),
                   "user scorer '{}' returned a non-finite acc {} for sample {} "
                   "(data_source '{}')",
                   path_, out.acc, request.index, request.data_source);
        r.acc = out.acc;
    }
    r.pred = bounded_c_string(pred);
    return r;
}

}  // namespace rlpt::reward
