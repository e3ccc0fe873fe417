#pragma once
#include "config/binding.h"
#include "rlpt/config/config.h"

namespace rlpt::config_detail {
// Visits every key of the config in a fixed order.
void visit_config(Visitor& v, Config& c);
}  // namespace rlpt::config_detail
