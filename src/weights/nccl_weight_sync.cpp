// Weight sync over NCCL: the transfer steps of the sync skeleton (sync_skeleton.h) as
// ncclBroadcast on device memory, all queued on one non-blocking CUDA stream owned by the
// transport. Built only with NCCL.
//
// Ordering. One stream carries every pack copy, broadcast and unpack copy, so a pack buffer
// is never overwritten before the broadcast that reads it has run, whatever n_buffers is (one
// slot serves every packed message); the host only waits (polling, with a deadline) at the end of
// the sync, or before copying to a host destination. The pack buffers come from PyTorch's caching
// allocator, bound to that stream (DeviceBuffer, rlpt/comm/nccl_check.h): the sync runs when the
// model and optimizer hold most of the device, and the allocator can reuse or release what it
// owns. The tensors are produced and consumed by torch on its own streams: begin() synchronizes
// the device once (the optimizer step / generation that touch the tensors must be finished) and
// the stream is idle when finish() returns.
//
// Bootstrap (first sync, collective on the sync communicator): nccl_bootstrap (rlpt/comm/nccl_check.h)
// with the sync's deadline, so a rank that cannot take part is named on every rank and a
// bootstrap that cannot connect becomes an error instead of a silent hang.
#include <cstring>

#include "rlpt/comm/nccl_check.h"
#include "rlpt/core/log.h"
#include "sync_skeleton.h"

namespace rlpt::weights::detail {

using comm::Communicator;
using comm::Deadline;
using comm::detail::CudaStream;
using comm::detail::DeviceBuffer;
using comm::detail::nccl_bootstrap;
using comm::detail::NcclComm;
using comm::detail::wait_stream;

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

namespace {

char* bytes_of(const torch::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

class NcclSyncTransport final : public SyncTransport {
  public:
    explicit NcclSyncTransport(Communicator comm) : SyncTransport(std::move(comm)) {}

    const char* name() const override { return "nccl"; }

    // The device of this sync's tensors (kept for prepare()), or why there is none.
    std::string refuse(const std::vector<torch::Tensor>& tensors) override {
        int device = device_;
        for (size_t i = 0; i < tensors.size(); ++i) {
            const auto& t = tensors[i];
            if (!t.defined() || !t.is_cuda()) continue;
            const int d = t.device().index();
            if (device < 0) device = d;
            if (d != device) {
                return fmt::format("the NCCL weight sync uses one CUDA device per rank (cuda:{}), but tensor {} is "
                                   "on cuda:{}",
                                   device, i, d);
            }
        }
        if (device < 0) RLPT_CUDA_CHECK(cudaGetDevice(&device));
        picked_device_ = device;
        return {};
    }

    void prepare(const Deadline& deadline) override {
        if (!nccl_) {
            device_ = picked_device_;
            int64_t n_nodes = 1;
            nccl_ = nccl_bootstrap(comm(), device_, "rlpt_weight_sync", deadline, &n_nodes);
            stream_ = CudaStream::create();
            if (comm().rank() == 0) {
                RLPT_LOG_INFO("weight sync: NCCL communicator ready ({} ranks, {} node(s), cuda:{})", comm().size(),
                              n_nodes, device_);
            }
        }
        RLPT_CUDA_CHECK(cudaSetDevice(device_));
    }

    bool direct(const torch::Tensor& t) const override {
        return t.is_cuda() && t.device().index() == device_ && t.is_contiguous();
    }

    void begin(const Payload& payload) override {
        p_ = &payload;
        // Root: contiguous copies of the other sources, made up front and kept until the stream
        // is idle (the copies below read them asynchronously). Receivers: host landing tensors
        // for destinations that are not contiguous on this device.
        staged_.assign(payload.tensors.size(), torch::Tensor());
        if (payload.root) {
            for (size_t i = 0; i < staged_.size(); ++i) {
                if (!payload.direct[i] && payload.nbytes[i] > 0) staged_[i] = payload.tensors[i].contiguous();
            }
        }
        // Finish whatever torch queued on the tensors (optimizer step, .contiguous() above,
        // generation reading the destinations) before our stream touches them.
        RLPT_CUDA_CHECK(cudaDeviceSynchronize());
    }

    int take_slot() override { return 0; }

    char* slot_buffer(int slot, int64_t bytes) override {
        if (buffers_.size() <= static_cast<size_t>(slot)) buffers_.resize(static_cast<size_t>(slot) + 1);
        if (static_cast<int64_t>(buffers_[slot].size()) < bytes) {
            buffers_[slot] = DeviceBuffer();  // free first: device memory is scarce
            buffers_[slot] = DeviceBuffer(static_cast<size_t>(bytes), stream_.get());
            ++p_->stats.buffer_allocations;
        }
        return buffers_[slot].get();
    }

    void pack(const Message& msg, char* buffer) override {
        for (const Piece& p : msg.pieces) {
            const char* src = p_->direct[p.tensor] ? bytes_of(p_->tensors[p.tensor]) : bytes_of(staged_[p.tensor]);
            RLPT_CUDA_CHECK(cudaMemcpyAsync(buffer + p.message_offset, src + p.tensor_offset,
                                            static_cast<size_t>(p.bytes), cudaMemcpyDefault, stream_.get()));
        }
    }

    void post(int message, char* data, int slot) override {
        const Message& msg = p_->plan.messages[message];
        nccl_.enqueued(ncclBroadcast(data, data, static_cast<size_t>(msg.bytes), ncclUint8, 0, nccl_.get(),
                                     stream_.get()),
                       "ncclBroadcast", p_->deadline);
        if (p_->root || slot < 0) return;
        for (const Piece& p : msg.pieces) unpack(p, data);
    }

    void finish() override {
        wait_stream(nccl_, stream_.get(), p_->deadline, "the weight broadcasts");
        if (!p_->root) {
            torch::NoGradGuard no_grad;
            for (size_t i = 0; i < staged_.size(); ++i) {
                if (staged_[i].defined()) p_->tensors[i].copy_(staged_[i]);
            }
        }
        staged_.clear();
        p_ = nullptr;
    }

    void abort() noexcept override { nccl_.abort(); }

    void leak_buffers() noexcept override {
        // The communicator is aborted already; a failed broadcast may still reference these.
        for (auto& b : buffers_) b.leak();
    }

  private:
    // A receiver's piece from the pack buffer into its tensor (on the device) or its host landing tensor.
    void unpack(const Piece& p, const char* buffer) {
        const cudaStream_t stream = stream_.get();
        if (p_->direct[p.tensor]) {
            RLPT_CUDA_CHECK(cudaMemcpyAsync(bytes_of(p_->tensors[p.tensor]) + p.tensor_offset,
                                            buffer + p.message_offset, static_cast<size_t>(p.bytes),
                                            cudaMemcpyDeviceToDevice, stream));
            return;
        }
        torch::Tensor& st = staged_[p.tensor];
        if (!st.defined()) {
            const auto& t = p_->tensors[p.tensor];
            st = torch::empty(t.sizes(), t.options().device(torch::kCPU));
        }
        // A copy into pageable host memory blocks the host until the stream reaches it:
        // wait (with the deadline) for the broadcast first.
        wait_stream(nccl_, stream, p_->deadline, "a weight broadcast before a host copy");
        RLPT_CUDA_CHECK(cudaMemcpyAsync(bytes_of(st) + p.tensor_offset, buffer + p.message_offset,
                                        static_cast<size_t>(p.bytes), cudaMemcpyDeviceToHost, stream));
        wait_stream(nccl_, stream, p_->deadline, "a device-to-host weight copy");
    }

    int device_ = -1;         // of the NCCL communicator (set at the first sync)
    int picked_device_ = -1;  // of this sync's tensors (refuse())
    NcclComm nccl_;
    CudaStream stream_;
    std::vector<DeviceBuffer> buffers_;  // after stream_: freed before it
    // The sync in progress (begin() to finish()).
    const Payload* p_ = nullptr;
    std::vector<torch::Tensor> staged_;
};

}  // namespace

std::unique_ptr<WeightSync> make_nccl_weight_sync(Communicator comm, const WeightSyncOptions& options) {
    return std::make_unique<SyncSkeleton>(std::make_unique<NcclSyncTransport>(std::move(comm)), options);
}

}  // namespace rlpt::weights::detail
