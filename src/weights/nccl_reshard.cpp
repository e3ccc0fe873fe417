// NCCL point-to-point transport of the weight reshard (weight_reshard_transport.h): each
// message (a piece of at most one bucket) is one ncclSend / ncclRecv on a stream owned by the
// transport. Built only with NCCL.
//
// Ordering with torch. Buckets are packed and unpacked by torch copies on torch's own stream;
// start() synchronizes the device first, so the pack that filled a bucket (and the unpack that
// last read a reused one) is finished before NCCL touches it; finish_oldest() waits for the
// bucket's event, so torch reads a received bucket only after it landed. That trades overlap
// of packing with transfer for simplicity; the messages of one round run back to back on the
// stream. Sends and receives are issued in the schedule's global order
// on every rank, which keeps blocking point-to-point NCCL calls deadlock-free (weight_reshard.h).
#include <deque>

#include "rlpt/comm/nccl_check.h"
#include "rlpt/core/log.h"
#include "weight_reshard_transport.h"

namespace rlpt::weights::detail {

namespace {

class NcclP2p final : public P2pTransport {
  public:
    NcclP2p(const comm::Communicator& comm, int device) : comm_(comm), device_(device) {
        if (device_ < 0) RLPT_CUDA_CHECK(cudaGetDevice(&device_));
    }
    ~NcclP2p() override {
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
        for (cudaEvent_t e : spare_) cudaEventDestroy(e);
    }

    const char* name() const override { return "nccl"; }
    torch::Device device() const override { return torch::Device(torch::kCUDA, static_cast<int8_t>(device_)); }

    void begin(const comm::Deadline& deadline) override {
        if (!nccl_) {
            nccl_ = comm::detail::nccl_bootstrap(comm_, device_, "rlpt_weight_reshard", deadline);  // sets the device
            stream_ = comm::detail::CudaStream::create();
            if (comm_.rank() == 0) {
                RLPT_LOG_INFO("weight reshard: NCCL communicator ready ({} ranks, cuda:{})", comm_.size(), device_);
            }
        }
        RLPT_CUDA_CHECK(cudaSetDevice(device_));
    }

    void start(bool send, void* data, int64_t bytes, int peer, const comm::Deadline& deadline) override {
        RLPT_CUDA_CHECK(cudaDeviceSynchronize());  // torch's pack / last unpack of this buffer
        const ncclResult_t r =
            send ? ncclSend(data, static_cast<size_t>(bytes), ncclUint8, peer, nccl_.get(), stream_.get())
                 : ncclRecv(data, static_cast<size_t>(bytes), ncclUint8, peer, nccl_.get(), stream_.get());
        nccl_.enqueued(r, send ? "ncclSend" : "ncclRecv", deadline);
        cudaEvent_t e = nullptr;
        if (spare_.empty()) {
            RLPT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        } else {
            e = spare_.back();
            spare_.pop_back();
        }
        events_.push_back(e);
        RLPT_CUDA_CHECK(cudaEventRecord(e, stream_.get()));
    }

    void finish_oldest(const comm::Deadline& deadline) override {
        static const std::string kWhat = "a weight reshard (nccl) bucket";
        const cudaEvent_t e = events_.front();
        comm::detail::wait_event(nccl_, e, deadline, kWhat);
        events_.pop_front();
        spare_.push_back(e);
    }

    void abandon() noexcept override { nccl_.abort(); }

  private:
    const comm::Communicator& comm_;
    int device_ = -1;
    comm::detail::NcclComm nccl_;
    comm::detail::CudaStream stream_;
    std::deque<cudaEvent_t> events_;
    std::vector<cudaEvent_t> spare_;
};

}  // namespace

std::unique_ptr<P2pTransport> make_nccl_p2p(const comm::Communicator& comm, int device) {
    return std::make_unique<NcclP2p>(comm, device);
}

}  // namespace rlpt::weights::detail
