// Weight sync over MPI: the plan's messages go out as MPI_Ibcast on host memory.
//
// Progress. Open MPI moves non-blocking collectives only inside MPI calls (no progress
// thread), so every memcpy of a pack/unpack is cut into kCopyChunk pieces with an MPI_Test
// in between: the broadcast of bucket i keeps flowing while bucket i+1 is packed (root) or
// bucket i-1 unpacked (receivers). Waiting for a payload message polls MPI_Test with
// sched_yield only, never sleeping: all ranks are inside the sync by then (the header wait
// before it uses the back-off wait of mpi.h) and a sleeping rank would stall the pipelined
// transfer, which advances only while someone calls into MPI.
#include <sched.h>

#include <cstring>
#include <deque>

#include "rlpt/weights/weight_sync.h"
#include "weight_sync_backends.h"
#include "weight_sync_plan.h"

namespace rlpt::weights::detail {

using comm::Communicator;
using comm::Deadline;
using comm::detail::Backoff;

namespace {

constexpr int64_t kCopyChunk = int64_t(1) << 20;
// In-place messages need no pack buffer; cap how many run at once anyway, so the progress
// engine walks a short list.
constexpr int kExtraInFlight = 2;

bool host_direct(const torch::Tensor& t) { return t.device().is_cpu() && t.is_contiguous(); }

char* bytes_of(const torch::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

class MpiWeightSync final : public WeightSync {
  public:
    MpiWeightSync(Communicator comm, const WeightSyncOptions& options) : WeightSync(options), comm_(std::move(comm)) {}

    ~MpiWeightSync() override {
        if (broken_) {
            // A broadcast that failed half-way may still own these buffers inside MPI;
            // leaking them is safer than letting a late write land in freed memory.
            for (auto& b : buffers_) new std::vector<char>(std::move(b));
            header_.release();
        }
    }

    std::string backend_name() const override { return "mpi"; }

  protected:
    void do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors, uint64_t& version,
                 WeightSyncStats& stats) override;

  private:
    struct InFlight {
        MPI_Request req = MPI_REQUEST_NULL;
        int message = -1;
        int slot = -1;  // pack buffer, -1 for in-place
    };

    // One sync's transfer (step 3 of the protocol).
    class Transfer;

    char* slot_buffer(int slot, int64_t bytes, WeightSyncStats& stats) {
        if (static_cast<int64_t>(buffers_[slot].size()) < bytes) {
            ++stats.buffer_allocations;
            buffers_[slot] = std::vector<char>();               // free before allocating the larger one
            buffers_[slot].resize(static_cast<size_t>(bytes));  // zero-filled: faults pages now
        }
        return buffers_[slot].data();
    }

    void mark_broken(const std::string& why) {
        broken_ = true;
        broken_reason_ = why;
    }

    Communicator comm_;
    std::unique_ptr<WireHeader> header_ = std::make_unique<WireHeader>();
    std::vector<std::vector<char>> buffers_;
    bool broken_ = false;
    std::string broken_reason_;
};

class MpiWeightSync::Transfer {
  public:
    Transfer(MpiWeightSync& owner, const SyncPlan& plan, std::vector<torch::Tensor>& tensors,
             const std::vector<int64_t>& nbytes, const Deadline& deadline, WeightSyncStats& stats)
        : owner_(owner),
          plan_(plan),
          tensors_(tensors),
          nbytes_(nbytes),
          deadline_(deadline),
          stats_(stats),
          root_(owner.comm_.rank() == 0),
          staged_(tensors.size()) {
        direct_.reserve(tensors.size());
        for (const auto& t : tensors) direct_.push_back(host_direct(t));
        buffer_bytes_ = pack_buffer_bytes(plan, direct_);
        const int n_buffers = owner.options().n_buffers;
        owner.buffers_.resize(static_cast<size_t>(n_buffers));
        for (int s = n_buffers - 1; s >= 0; --s) free_slots_.push_back(s);
        max_in_flight_ = static_cast<size_t>(n_buffers + kExtraInFlight);
    }

    void run() {
        for (int m = 0; m < static_cast<int>(plan_.messages.size()); ++m) {
            const Message& msg = plan_.messages[m];
            InFlight f;
            f.message = m;
            char* data = nullptr;
            const Piece& first = msg.pieces.front();
            if (msg.inplace && direct_[first.tensor]) {
                data = bytes_of(tensors_[first.tensor]) + first.tensor_offset;
                ++stats_.n_inplace_messages;
            } else {
                while (free_slots_.empty()) finish_oldest();
                f.slot = free_slots_.back();
                free_slots_.pop_back();
                data = owner_.slot_buffer(f.slot, buffer_bytes_, stats_);
                if (root_) pack(msg, data);
            }
            RLPT_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(msg.bytes), MPI_BYTE, 0, owner_.comm_.get(), &f.req));
            in_flight_.push_back(f);
            ++stats_.n_messages;
            while (in_flight_.size() > max_in_flight_) finish_oldest();
        }
        while (!in_flight_.empty()) finish_oldest();
    }

  private:
    // One MPI call so the in-flight broadcasts advance.
    void progress() {
        for (auto& f : in_flight_) {
            if (f.req != MPI_REQUEST_NULL) {
                int flag = 0;
                RLPT_MPI_CHECK(MPI_Test(&f.req, &flag, MPI_STATUS_IGNORE));
                return;
            }
        }
    }

    void copy_with_progress(char* dst, const char* src, int64_t bytes) {
        for (int64_t off = 0; off < bytes; off += kCopyChunk) {
            std::memcpy(dst + off, src + off, static_cast<size_t>(std::min(kCopyChunk, bytes - off)));
            progress();
        }
    }

    void pack(const Message& msg, char* buffer) {
        for (const Piece& p : msg.pieces) {
            torch::Tensor& src = staged_[p.tensor];
            if (direct_[p.tensor]) {
                src = tensors_[p.tensor];
            } else if (!src.defined()) {
                src = tensors_[p.tensor].to(torch::kCPU).contiguous();
            }
            copy_with_progress(buffer + p.message_offset, bytes_of(src) + p.tensor_offset, p.bytes);
            if (p.tensor_offset + p.bytes == nbytes_[p.tensor]) src = torch::Tensor();
        }
        stats_.packed_bytes += msg.bytes;
    }

    void unpack(const Message& msg, const char* buffer) {
        for (const Piece& p : msg.pieces) {
            char* dst = nullptr;
            if (direct_[p.tensor]) {
                dst = bytes_of(tensors_[p.tensor]);
            } else {
                torch::Tensor& st = staged_[p.tensor];
                if (!st.defined()) {
                    const auto& t = tensors_[p.tensor];
                    st = torch::empty(t.sizes(), t.options().device(torch::kCPU));
                }
                dst = bytes_of(st);
            }
            copy_with_progress(dst + p.tensor_offset, buffer + p.message_offset, p.bytes);
        }
        stats_.packed_bytes += msg.bytes;
    }

    // Copies staged tensors whose last piece arrived with message `m` into their destination.
    void finish_tensors(int m) {
        for (const Piece& p : plan_.messages[m].pieces) {
            if (plan_.last_message_of_tensor[p.tensor] != m || !staged_[p.tensor].defined()) {
                continue;
            }
            torch::NoGradGuard no_grad;
            tensors_[p.tensor].copy_(staged_[p.tensor]);
            staged_[p.tensor] = torch::Tensor();
        }
    }

    void wait_payload(InFlight& f) {
        static const std::string kWhat = "weight sync (mpi) payload";
        Backoff watch(&kWhat);  // only report(): this loop never sleeps (see the top)
        int flag = 0;
        for (;;) {
            RLPT_MPI_CHECK(MPI_Test(&f.req, &flag, MPI_STATUS_IGNORE));
            if (flag) return;
            watch.report();
            if (deadline_.expired()) {
                throw TimeoutError(
                    fmt::format("weight sync (mpi): deadline passed waiting for payload message {} of {} "
                                "({} bytes); raise weight_sync.timeout_s if the transfer is just slow",
                                f.message + 1, plan_.messages.size(), plan_.messages[f.message].bytes));
            }
            sched_yield();
        }
    }

    void finish_oldest() {
        InFlight f = in_flight_.front();
        wait_payload(f);
        in_flight_.pop_front();
        if (!root_) {
            const Message& msg = plan_.messages[f.message];
            if (f.slot >= 0) unpack(msg, owner_.buffers_[f.slot].data());
            finish_tensors(f.message);
        }
        if (f.slot >= 0) free_slots_.push_back(f.slot);
    }

    MpiWeightSync& owner_;
    const SyncPlan& plan_;
    std::vector<torch::Tensor>& tensors_;
    const std::vector<int64_t>& nbytes_;
    const Deadline& deadline_;
    WeightSyncStats& stats_;
    const bool root_;
    std::vector<bool> direct_;
    std::vector<torch::Tensor> staged_;  // root: contiguous host copies; receivers: landing
    std::vector<int> free_slots_;
    std::deque<InFlight> in_flight_;
    size_t max_in_flight_ = 0;
    int64_t buffer_bytes_ = 0;
};

void MpiWeightSync::do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors,
                            uint64_t& version, WeightSyncStats& stats) {
    RLPT_CHECK_KIND(CommError, !broken_, "weight sync (mpi) is unusable after an earlier failure mid-transfer: {}",
                    broken_reason_);
    const Deadline deadline = Deadline::after_seconds(options().timeout_s);
    const Layout layout = describe_layout(names, tensors);
    WireHeader& header = *header_;
    header = comm_.rank() == 0 ? root_header(layout, version, options()) : WireHeader();
    std::string mismatch;
    try {
        mismatch = agree_on_layout(comm_, header, layout, std::string(), deadline);
    } catch (const Error& e) {
        mark_broken(e.what());
        rethrow_with_context("weight sync (mpi): agreeing on the header with the root", e);
    } catch (const std::exception& e) {
        mark_broken(e.what());
        throw;
    }
    if (!mismatch.empty()) throw CommError(mismatch, __FILE__, __LINE__);  // clean: nothing sent
    try {
        const SyncPlan plan = make_plan(layout.nbytes, static_cast<int64_t>(header.bucket_bytes),
                                        static_cast<int64_t>(header.inplace_min_bytes));
        Transfer(*this, plan, tensors, layout.nbytes, deadline, stats).run();
    } catch (const std::exception& e) {
        mark_broken(e.what());
        throw;
    }
    version = header.version;
    stats.version = header.version;
    stats.n_tensors = static_cast<int64_t>(header.n_tensors);
    stats.total_bytes = static_cast<int64_t>(header.total_bytes);
}

}  // namespace

std::unique_ptr<WeightSync> make_mpi_weight_sync(Communicator comm, const WeightSyncOptions& options) {
    return std::make_unique<MpiWeightSync>(std::move(comm), options);
}

}  // namespace rlpt::weights::detail
