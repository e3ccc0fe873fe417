// The weight sync's protocol and plan walk, shared by every transport (sync_skeleton.h).
#include "sync_skeleton.h"

#include "rlpt/core/error.h"

namespace rlpt::weights::detail {

SyncSkeleton::SyncSkeleton(std::unique_ptr<SyncTransport> transport, const WeightSyncOptions& options)
    : WeightSync(options), transport_(std::move(transport)) {}

SyncSkeleton::~SyncSkeleton() {
    if (broken_) {
        // A broadcast that failed half-way may still own these; leaking them is safer than
        // letting a late write land in freed memory.
        transport_->leak_buffers();
        header_.release();
    }
}

void SyncSkeleton::fail(const std::string& why) noexcept {
    broken_ = true;
    broken_reason_ = why;
    transport_->abort();
}

void SyncSkeleton::do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors,
                           uint64_t& version, WeightSyncStats& stats) {
    RLPT_CHECK_KIND(CommError, !broken_, "weight sync ({}) is unusable after an earlier failure mid-transfer: {}",
                    transport_->name(), broken_reason_);
    const comm::Communicator& comm = transport_->comm();
    const comm::Deadline deadline = comm::Deadline::after_seconds(options().timeout_s);
    const Layout layout = describe_layout(names, tensors);
    const std::string refusal = transport_->refuse(tensors);
    WireHeader& header = *header_;
    header = comm.rank() == 0 ? root_header(layout, version, options()) : WireHeader();
    std::string mismatch;
    try {
        mismatch = agree_on_layout(comm, header, layout, refusal, deadline);
    } catch (const Error& e) {
        fail(e.what());
        rethrow_with_context(fmt::format("weight sync ({}): agreeing on the header with the root", transport_->name()),
                             e);
    } catch (const std::exception& e) {
        fail(e.what());
        throw;
    }
    if (!mismatch.empty()) throw CommError(mismatch, __FILE__, __LINE__);  // clean: nothing sent
    try {
        transport_->prepare(deadline);
        const SyncPlan plan = make_plan(layout.nbytes, static_cast<int64_t>(header.bucket_bytes),
                                        static_cast<int64_t>(header.inplace_min_bytes));
        walk(plan, tensors, layout.nbytes, deadline, stats);
    } catch (const std::exception& e) {
        fail(e.what());
        throw;
    }
    version = header.version;
    stats.version = header.version;
    stats.n_tensors = static_cast<int64_t>(header.n_tensors);
    stats.total_bytes = static_cast<int64_t>(header.total_bytes);
}

void SyncSkeleton::walk(const SyncPlan& plan, std::vector<torch::Tensor>& tensors, const std::vector<int64_t>& nbytes,
                        const comm::Deadline& deadline, WeightSyncStats& stats) {
    SyncTransport& t = *transport_;
    std::vector<bool> direct;
    direct.reserve(tensors.size());
    for (const auto& tensor : tensors) direct.push_back(t.direct(tensor));
    const int64_t buffer_bytes = pack_buffer_bytes(plan, direct);
    const bool root = t.comm().rank() == 0;
    const Payload payload{plan, tensors, nbytes, direct, deadline, stats, root};  // outlives the steps
    t.begin(payload);
    for (size_t m = 0; m < plan.messages.size(); ++m) {
        const Message& msg = plan.messages[m];
        const Piece& first = msg.pieces.front();
        if (msg.inplace && direct[first.tensor]) {
            t.post(static_cast<int>(m), static_cast<char*>(tensors[first.tensor].data_ptr()) + first.tensor_offset, -1);
            ++stats.n_inplace_messages;
        } else {
            const int slot = t.take_slot();
            char* buffer = t.slot_buffer(slot, buffer_bytes);
            if (root) t.pack(msg, buffer);
            t.post(static_cast<int>(m), buffer, slot);
            stats.packed_bytes += msg.bytes;
        }
        ++stats.n_messages;
    }
    t.finish();
}

}  // namespace rlpt::weights::detail
