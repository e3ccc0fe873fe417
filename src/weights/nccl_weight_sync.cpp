// Weight sync over NCCL: the plan's messages go out as ncclBroadcast on device memory, all
// queued on one non-blocking CUDA stream owned by the sync. Built only with NCCL.
//
// Ordering. One stream carries every pack copy, broadcast and unpack copy, so a pack buffer
// is never overwritten before the broadcast that reads it has run, whatever n_buffers is;
// the host only waits (polling, with a deadline) at the end of the sync, or before copying
// to a host destination. The pack buffers come from PyTorch's caching allocator, bound to that
// stream (DeviceBuffer, rlpt/comm/nccl_check.h): the sync runs when the model and optimizer hold most
// of the device, and the allocator can reuse or release what it owns. The tensors are produced and consumed by torch on its own streams:
// sync() synchronizes the device once on entry (the optimizer step / generation that touch
// the tensors must be finished) and its stream is idle when it returns.
//
// Bootstrap (first sync, collective on the sync communicator): nccl_bootstrap (rlpt/comm/nccl_check.h)
// with the sync's deadline, so a rank that cannot take part is named on every rank and a
// bootstrap that cannot connect becomes an error instead of a silent hang.
#include <cstring>

#include "rlpt/comm/nccl_check.h"
#include "rlpt/core/log.h"
#include "rlpt/weights/weight_sync.h"
#include "weight_sync_backends.h"
#include "weight_sync_plan.h"

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

class NcclWeightSync final : public WeightSync {
  public:
    NcclWeightSync(Communicator comm, const WeightSyncOptions& options) : WeightSync(options), comm_(std::move(comm)) {}

    ~NcclWeightSync() override {
        if (broken_) {
            // The communicator is aborted already; a failed broadcast may still reference
            // these, so keep them rather than free memory a late write could land in.
            for (auto& b : buffers_) b.leak();
            header_.release();
        }
    }

    std::string backend_name() const override { return "nccl"; }

  protected:
    void do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors, uint64_t& version,
                 WeightSyncStats& stats) override;

  private:
    // Device of this sync's tensors ("" error when fine).
    std::string pick_device(const std::vector<torch::Tensor>& tensors, int& device) const;
    void bootstrap(const Deadline& deadline);
    void transfer(const SyncPlan& plan, std::vector<torch::Tensor>& tensors, const std::vector<int64_t>& nbytes,
                  const Deadline& deadline, WeightSyncStats& stats);
    char* buffer(int slot, int64_t bytes, WeightSyncStats& stats);
    void broadcast(char* data, int64_t bytes, const Deadline& deadline);
    void fail(const std::string& why) {
        broken_ = true;
        broken_reason_ = why;
        nccl_.abort();
    }

    Communicator comm_;
    int device_ = -1;
    NcclComm nccl_;
    CudaStream stream_;
    std::vector<DeviceBuffer> buffers_;
    std::unique_ptr<WireHeader> header_ = std::make_unique<WireHeader>();
    bool broken_ = false;
    std::string broken_reason_;
};

std::string NcclWeightSync::pick_device(const std::vector<torch::Tensor>& tensors, int& device) const {
    device = device_;
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
    return {};
}

void NcclWeightSync::bootstrap(const Deadline& deadline) {
    int64_t n_nodes = 1;
    nccl_ = nccl_bootstrap(comm_, device_, "rlpt_weight_sync", deadline, &n_nodes);
    stream_ = CudaStream::create();
    if (comm_.rank() == 0) {
        RLPT_LOG_INFO("weight sync: NCCL communicator ready ({} ranks, {} node(s), cuda:{})", comm_.size(), n_nodes,
                      device_);
    }
}

char* NcclWeightSync::buffer(int slot, int64_t bytes, WeightSyncStats& stats) {
    if (buffers_.size() <= static_cast<size_t>(slot)) buffers_.resize(static_cast<size_t>(slot) + 1);
    if (static_cast<int64_t>(buffers_[slot].size()) < bytes) {
        buffers_[slot] = DeviceBuffer();  // free first: device memory is scarce
        buffers_[slot] = DeviceBuffer(static_cast<size_t>(bytes), stream_.get());
        ++stats.buffer_allocations;
    }
    return buffers_[slot].get();
}

void NcclWeightSync::broadcast(char* data, int64_t bytes, const Deadline& deadline) {
    nccl_.enqueued(ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, 0, nccl_.get(), stream_.get()),
                   "ncclBroadcast", deadline);
}

void NcclWeightSync::transfer(const SyncPlan& plan, std::vector<torch::Tensor>& tensors,
                              const std::vector<int64_t>& nbytes, const Deadline& deadline, WeightSyncStats& stats) {
    const bool root = comm_.rank() == 0;
    const cudaStream_t stream = stream_.get();
    const size_t n = tensors.size();
    std::vector<bool> direct(n);
    for (size_t i = 0; i < n; ++i) {
        const auto& t = tensors[i];
        direct[i] = t.is_cuda() && t.device().index() == device_ && t.is_contiguous();
    }
    const int64_t buffer_bytes = pack_buffer_bytes(plan, direct);
    // Root: contiguous copies of the other sources, made up front and kept until the stream
    // is idle (the copies below read them asynchronously). Receivers: host landing tensors
    // for destinations that are not contiguous on this device.
    std::vector<torch::Tensor> staged(n);
    if (root) {
        for (size_t i = 0; i < n; ++i) {
            if (!direct[i] && nbytes[i] > 0) staged[i] = tensors[i].contiguous();
        }
    }
    // Finish whatever torch queued on the tensors (optimizer step, .contiguous() above,
    // generation reading the destinations) before our stream touches them.
    RLPT_CUDA_CHECK(cudaDeviceSynchronize());

    for (size_t m = 0; m < plan.messages.size(); ++m) {
        const Message& msg = plan.messages[m];
        const Piece& first = msg.pieces.front();
        ++stats.n_messages;
        if (msg.inplace && direct[first.tensor]) {
            broadcast(bytes_of(tensors[first.tensor]) + first.tensor_offset, msg.bytes, deadline);
            ++stats.n_inplace_messages;
            continue;
        }
        char* buf = buffer(0, buffer_bytes, stats);
        stats.packed_bytes += msg.bytes;
        if (root) {
            for (const Piece& p : msg.pieces) {
                const char* src = direct[p.tensor] ? bytes_of(tensors[p.tensor]) : bytes_of(staged[p.tensor]);
                RLPT_CUDA_CHECK(cudaMemcpyAsync(buf + p.message_offset, src + p.tensor_offset,
                                                static_cast<size_t>(p.bytes), cudaMemcpyDefault, stream));
            }
            broadcast(buf, msg.bytes, deadline);
            continue;
        }
        broadcast(buf, msg.bytes, deadline);
        for (const Piece& p : msg.pieces) {
            if (direct[p.tensor]) {
                RLPT_CUDA_CHECK(cudaMemcpyAsync(bytes_of(tensors[p.tensor]) + p.tensor_offset, buf + p.message_offset,
                                                static_cast<size_t>(p.bytes), cudaMemcpyDeviceToDevice, stream));
                continue;
            }
            torch::Tensor& st = staged[p.tensor];
            if (!st.defined()) {
                const auto& t = tensors[p.tensor];
                st = torch::empty(t.sizes(), t.options().device(torch::kCPU));
            }
            // A copy into pageable host memory blocks the host until the stream reaches it:
            // wait (with the deadline) for the broadcast first.
            wait_stream(nccl_, stream, deadline, "a weight broadcast before a host copy");
            RLPT_CUDA_CHECK(cudaMemcpyAsync(bytes_of(st) + p.tensor_offset, buf + p.message_offset,
                                            static_cast<size_t>(p.bytes), cudaMemcpyDeviceToHost, stream));
            wait_stream(nccl_, stream, deadline, "a device-to-host weight copy");
        }
    }
    wait_stream(nccl_, stream, deadline, "the weight broadcasts");
    if (!root) {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < n; ++i) {
            if (staged[i].defined()) tensors[i].copy_(staged[i]);
        }
    }
}

void NcclWeightSync::do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors,
                             uint64_t& version, WeightSyncStats& stats) {
    RLPT_CHECK_KIND(CommError, !broken_, "weight sync (nccl) is unusable after an earlier failure mid-transfer: {}",
                    broken_reason_);
    const Deadline deadline = Deadline::after_seconds(options().timeout_s);
    const Layout layout = describe_layout(names, tensors);
    int device = -1;
    const std::string device_error = pick_device(tensors, device);
    WireHeader& header = *header_;
    header = comm_.rank() == 0 ? root_header(layout, version, options()) : WireHeader();
    std::string mismatch;
    try {
        mismatch = agree_on_layout(comm_, header, layout, device_error, deadline);
    } catch (const Error& e) {
        fail(e.what());
        rethrow_with_context("weight sync (nccl): agreeing on the header with the root", e);
    } catch (const std::exception& e) {
        fail(e.what());
        throw;
    }
    if (!mismatch.empty()) throw CommError(mismatch, __FILE__, __LINE__);  // clean: nothing sent
    try {
        if (!nccl_) {
            device_ = device;
            bootstrap(deadline);
        }
        RLPT_CUDA_CHECK(cudaSetDevice(device_));
        const SyncPlan plan = make_plan(layout.nbytes, static_cast<int64_t>(header.bucket_bytes),
                                        static_cast<int64_t>(header.inplace_min_bytes));
        transfer(plan, tensors, layout.nbytes, deadline, stats);
    } catch (const std::exception& e) {
        fail(e.what());
        throw;
    }
    version = header.version;
    stats.version = header.version;
    stats.n_tensors = static_cast<int64_t>(header.n_tensors);
    stats.total_bytes = static_cast<int64_t>(header.total_bytes);
}

}  // namespace

std::unique_ptr<WeightSync> make_nccl_weight_sync(Communicator comm, const WeightSyncOptions& options) {
    return std::make_unique<NcclWeightSync>(std::move(comm), options);
}

}  // namespace rlpt::weights::detail
