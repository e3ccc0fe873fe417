// Weight sync over MPI: the transfer steps of the sync skeleton (sync_skeleton.h) as MPI_Ibcast
// on host memory.
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

#include "sync_skeleton.h"

namespace rlpt::weights::detail {

using comm::Communicator;
using comm::detail::Backoff;

namespace {

constexpr int64_t kCopyChunk = int64_t(1) << 20;
// In-place messages need no pack buffer; cap how many run at once anyway, so the progress
// engine walks a short list.
constexpr int kExtraInFlight = 2;

char* bytes_of(const torch::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// Up to n_buffers pack buffers and n_buffers + kExtraInFlight broadcasts in flight; a receiver
// unpacks a message when it completes (oldest first), which frees its pack buffer.
class MpiSyncTransport final : public SyncTransport {
  public:
    MpiSyncTransport(Communicator comm, int n_buffers) : SyncTransport(std::move(comm)), n_buffers_(n_buffers) {}

    const char* name() const override { return "mpi"; }
    std::string refuse(const std::vector<torch::Tensor>&) override { return {}; }
    void prepare(const comm::Deadline&) override {}
    bool direct(const torch::Tensor& t) const override { return t.device().is_cpu() && t.is_contiguous(); }

    void begin(const Payload& payload) override {
        p_ = &payload;
        staged_.assign(payload.tensors.size(), torch::Tensor());
        buffers_.resize(static_cast<size_t>(n_buffers_));
        free_slots_.clear();
        for (int s = n_buffers_ - 1; s >= 0; --s) free_slots_.push_back(s);
        in_flight_.clear();
        max_in_flight_ = static_cast<size_t>(n_buffers_ + kExtraInFlight);
    }

    int take_slot() override {
        while (free_slots_.empty()) finish_oldest();
        const int slot = free_slots_.back();
        free_slots_.pop_back();
        return slot;
    }

    char* slot_buffer(int slot, int64_t bytes) override {
        std::vector<char>& b = buffers_[static_cast<size_t>(slot)];
        if (static_cast<int64_t>(b.size()) < bytes) {
            ++p_->stats.buffer_allocations;
            b = std::vector<char>();               // free before allocating the larger one
            b.resize(static_cast<size_t>(bytes));  // zero-filled: faults pages now
        }
        return b.data();
    }

    void pack(const Message& msg, char* buffer) override {
        for (const Piece& p : msg.pieces) {
            torch::Tensor& src = staged_[p.tensor];
            if (p_->direct[p.tensor]) {
                src = p_->tensors[p.tensor];
            } else if (!src.defined()) {
                src = p_->tensors[p.tensor].to(torch::kCPU).contiguous();
            }
            copy_with_progress(buffer + p.message_offset, bytes_of(src) + p.tensor_offset, p.bytes);
            if (p.tensor_offset + p.bytes == p_->nbytes[p.tensor]) src = torch::Tensor();
        }
    }

    void post(int message, char* data, int slot) override {
        InFlight f;
        f.message = message;
        f.slot = slot;
        const int64_t bytes = p_->plan.messages[message].bytes;
        RLPT_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, 0, comm().get(), &f.req));
        in_flight_.push_back(f);
        while (in_flight_.size() > max_in_flight_) finish_oldest();
    }

    void finish() override {
        while (!in_flight_.empty()) finish_oldest();
        staged_.clear();
        p_ = nullptr;
    }

    void abort() noexcept override {}

    void leak_buffers() noexcept override {
        for (auto& b : buffers_) new std::vector<char>(std::move(b));
    }

  private:
    struct InFlight {
        MPI_Request req = MPI_REQUEST_NULL;
        int message = -1;
        int slot = -1;  // pack buffer, -1 for in-place
    };

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

    void unpack(const Message& msg, const char* buffer) {
        for (const Piece& p : msg.pieces) {
            char* dst = nullptr;
            if (p_->direct[p.tensor]) {
                dst = bytes_of(p_->tensors[p.tensor]);
            } else {
                torch::Tensor& st = staged_[p.tensor];
                if (!st.defined()) {
                    const auto& t = p_->tensors[p.tensor];
                    st = torch::empty(t.sizes(), t.options().device(torch::kCPU));
                }
                dst = bytes_of(st);
            }
            copy_with_progress(dst + p.tensor_offset, buffer + p.message_offset, p.bytes);
        }
    }

    // Copies staged tensors whose last piece arrived with message `m` into their destination.
    void finish_tensors(int m) {
        for (const Piece& p : p_->plan.messages[m].pieces) {
            if (p_->plan.last_message_of_tensor[p.tensor] != m || !staged_[p.tensor].defined()) {
                continue;
            }
            torch::NoGradGuard no_grad;
            p_->tensors[p.tensor].copy_(staged_[p.tensor]);
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
            if (p_->deadline.expired()) {
                throw TimeoutError(
                    fmt::format("weight sync (mpi): deadline passed waiting for payload message {} of {} "
                                "({} bytes); raise weight_sync.timeout_s if the transfer is just slow",
                                f.message + 1, p_->plan.messages.size(), p_->plan.messages[f.message].bytes));
            }
            sched_yield();
        }
    }

    void finish_oldest() {
        InFlight f = in_flight_.front();
        wait_payload(f);
        in_flight_.pop_front();
        if (!p_->root) {
            const Message& msg = p_->plan.messages[f.message];
            if (f.slot >= 0) unpack(msg, buffers_[f.slot].data());
            finish_tensors(f.message);
        }
        if (f.slot >= 0) free_slots_.push_back(f.slot);
    }

    const int n_buffers_;
    std::vector<std::vector<char>> buffers_;  // kept from sync to sync
    // The sync in progress (begin() to finish()).
    const Payload* p_ = nullptr;
    std::vector<torch::Tensor> staged_;  // root: contiguous host copies; receivers: landing
    std::vector<int> free_slots_;
    std::deque<InFlight> in_flight_;
    size_t max_in_flight_ = 0;
};

}  // namespace

std::unique_ptr<WeightSync> make_mpi_weight_sync(Communicator comm, const WeightSyncOptions& options) {
    return std::make_unique<SyncSkeleton>(std::make_unique<MpiSyncTransport>(std::move(comm), options.n_buffers),
                                          options);
}

}  // namespace rlpt::weights::detail
