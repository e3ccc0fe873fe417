#pragma once
// Loads a user scorer shared library (the C ABI in rlpt/reward/user_scorer.h) and exposes
// it as a Scorer. Torch-free.

#include <memory>
#include <string>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

class UserScorer final : public Scorer {
  public:
    // dlopen()s `path` (RTLD_NOW | RTLD_LOCAL; a path without '/' is taken relative to the
    // working directory, never searched on the library path) and checks the ABI.
    // Throws:
    //   IoError     the file does not exist or dlopen fails (with dlerror's text);
    //   ConfigError a required symbol is missing, or the library's ABI version differs
    //               from RLPT_SCORER_ABI_VERSION (both versions named).
    static std::shared_ptr<UserScorer> load(const std::string& path);

    ~UserScorer() override;
    UserScorer(const UserScorer&) = delete;
    UserScorer& operator=(const UserScorer&) = delete;

    std::string name() const override;  // "user(<path>)"
    const std::string& path() const { return path_; }

    // Calls rlpt_score_v1. Throws ValueError naming the library, the sample index, the
    // data_source and the scorer's message when it returns non-zero, or when the score
    // (or a flagged acc) is not finite.
    ScoreResult score(const ScoreRequest& request) const override;

  private:
    UserScorer(std::string path, void* handle, void* score_fn);

    std::string path_;
    void* handle_;
    void* score_fn_;
};

}  // namespace rlpt::reward
