// The default of rollout::SequenceSource (rlpt/rollout/sequence_source.h).
#include "rlpt/rollout/sequence_source.h"

#include "rlpt/core/error.h"

namespace rlpt::rollout {

std::vector<Continuation> SequenceSource::collect(double) {
    throw InternalError("rollout engine: a sequence was parked but its source cannot resume it (collect)");
}

}  // namespace rlpt::rollout
