#pragma once
// Parsing of algorithm.rollout_correction's option strings (ALGORITHMS §6.1, §6.2).
// Torch-free, so config validation (src/config) refuses a bad spec before any rank starts;
// the tensor math that uses the parsed specs is in rlpt/algo/rollout_correction.h.
// Every parser throws ValueError with a message naming the offending text.
#include <string>
#include <vector>

namespace rlpt::algo {

// rollout_is_threshold: a number U (TIS: w = min(w_raw, U)) or "L_U" (IcePop: w_raw outside
// [L, U] becomes 0). U > 0, L > 0, L <= U. `lower` is 1/U under TIS (used by the metrics only).
struct IsThreshold {
    double lower = 0.5;
    double upper = 2.0;
    bool icepop = false;
};
IsThreshold parse_rollout_is_threshold(const std::string& spec);

// One rejection-sampling option of algorithm.rollout_correction.rollout_rs (comma list).
enum class RsStat { kK1, kK2, kK3 };
enum class RsLevel { kToken, kSeqSum, kSeqMean, kSeqMax };
struct RsOption {
    std::string name;  // "token_k1", "seq_mean_k3", ...
    RsStat stat = RsStat::kK1;
    RsLevel level = RsLevel::kToken;
    double lower = 0;  // k1 only: the ratio bound L (the test is log L <= stat)
    double upper = 0;  // U (k1: log U >= stat; k2/k3: stat <= U)
};
// The 11 option names verl accepts, in its order.
const std::vector<std::string>& rollout_rs_option_names();
// rollout_rs: comma list (duplicates dropped, order kept); thresholds: one spec for all options
// or exactly one per option (comma list). k1 options take "L_U" or U (then L = 1/U); k2/k3
// options take one positive U. An empty `rs` gives no options (threshold ignored).
std::vector<RsOption> parse_rollout_rs(const std::string& rs, const std::string& thresholds);

}  // namespace rlpt::algo
