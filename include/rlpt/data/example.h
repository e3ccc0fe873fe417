#pragma once
// One prompt of a dataset, as the dataloader hands it to the trainer. Torch-free.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace rlpt::data {

struct Example {
    std::string prompt;                   // prompt text (template/suffix already applied), UTF-8
    std::string ground_truth;             // what the reward scorer compares against
    std::optional<std::string> response;  // the SFT target, when the data has one
    std::string data_source;              // selects the scorer (reward/registry.h)
    nlohmann::json extra;                 // pass-through fields for the scorer (an object; may be empty)
    int64_t index = 0;                    // 0-based position in the file / generated split
};

}  // namespace rlpt::data
