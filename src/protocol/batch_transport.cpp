#include "rlpt/protocol/batch_transport.h"

#include <cstring>

#include "rlpt/core/error.h"

namespace rlpt::protocol {

using comm::irecv_bytes;
using comm::isend_bytes;
namespace {

// The tensor whose storage goes on the wire: host, C-contiguous.
torch::Tensor wire_tensor(const torch::Tensor& t) {
    torch::Tensor h = t.device().is_cpu() ? t : t.to(torch::kCPU);
    return h.is_contiguous() ? h : h.contiguous();
}

int64_t tensor_bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

void OutgoingBatch::post(const std::string& prefix, const Batch& b, int dest, int header_tag, int data_tag,
                         MPI_Comm comm) {
    headers_.emplace_back(prefix);
    encode_layout(b, headers_.back());
    post_envelope(headers_.back(), dest, header_tag, comm, reqs_, headers_);
    for (const auto& kv : b.columns()) {
        torch::Tensor t = wire_tensor(kv.second);
        int64_t n = tensor_bytes(t);
        if (n == 0) continue;
        isend_bytes(t.data_ptr(), n, dest, data_tag, comm, reqs_);
        keep_.push_back(std::move(t));
    }
}

void OutgoingBatch::post_header_only(const std::string& prefix, int dest, int header_tag, MPI_Comm comm) {
    headers_.emplace_back(prefix);
    post_envelope(headers_.back(), dest, header_tag, comm, reqs_, headers_);
}

void OutgoingBatch::complete(const Deadline& d, const std::string& what) {
    wait_all(reqs_, d, what);
    reqs_.clear();
    keep_.clear();
    headers_.clear();
}

bool OutgoingBatch::test() {
    if (reqs_.empty()) return true;
    int flag = 0;
    RLPT_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) {
        reqs_.clear();
        keep_.clear();
        headers_.clear();
    }
    return flag != 0;
}

bool try_recv_message(int src, int tag, MPI_Comm comm, std::string& out, int* source) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    RLPT_MPI_CHECK(MPI_Improbe(src, tag, comm, &flag, &msg, &st));
    if (!flag) return false;
    int count = 0;
    RLPT_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
    out.resize(static_cast<size_t>(count));
    RLPT_MPI_CHECK(MPI_Mrecv(out.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE));
    if (source) *source = st.MPI_SOURCE;
    return true;
}

std::string recv_message(int src, int tag, MPI_Comm comm, int* source, const Deadline& d, const std::string& what) {
    std::string out;
    poll_until([&] { return try_recv_message(src, tag, comm, out, source); }, d, what);
    return out;
}

Batch recv_columns(BatchLayout layout, int src, int data_tag, MPI_Comm comm, BufferPool& pool, const Deadline& d,
                   const std::string& what) {
    std::vector<std::pair<int, BatchLayout>> one;
    one.emplace_back(src, std::move(layout));
    return recv_concat(std::move(one), data_tag, comm, pool, d, what);
}

Batch recv_concat(std::vector<std::pair<int, BatchLayout>> shards, int data_tag, MPI_Comm comm, BufferPool& pool,
                  const Deadline& d, const std::string& what) {
    if (shards.empty()) return Batch(0);
    // Fields, meta and metrics: concatenate the skeletons (no columns, cheap).
    std::vector<Batch> skeletons;
    skeletons.reserve(shards.size());
    for (auto& s : shards) skeletons.push_back(s.second.skeleton);
    Batch out = shards.size() == 1 ? std::move(skeletons.front()) : Batch::concat(skeletons);

    const auto& cols0 = shards.front().second.columns;
    for (size_t k = 1; k < shards.size(); ++k) {
        const auto& cols = shards[k].second.columns;
        bool same = cols.size() == cols0.size();
        for (size_t c = 0; same && c < cols.size(); ++c) {
            same = cols[c].name == cols0[c].name && cols[c].dtype == cols0[c].dtype &&
                   std::vector<int64_t>(cols[c].shape.begin() + 1, cols[c].shape.end()) ==
                       std::vector<int64_t>(cols0[c].shape.begin() + 1, cols0[c].shape.end());
        }
        if (!same) {
            throw CommError(fmt::format("{}: shard from rank {} has different columns than the shard from rank {}",
                                        what, shards[k].first, shards.front().first));
        }
    }
    std::vector<MPI_Request> reqs;
    std::vector<torch::Tensor> columns;
    for (size_t c = 0; c < cols0.size(); ++c) {
        std::vector<int64_t> shape = cols0[c].shape;
        shape[0] = out.size();
        torch::Tensor t = pool.empty(shape, cols0[c].dtype);
        columns.push_back(t);
    }
    // Post receives source by source, in column order (the order they were sent in).
    for (size_t k = 0; k < shards.size(); ++k) {
        int64_t row0 = 0;
        for (size_t j = 0; j < k; ++j) row0 += shards[j].second.skeleton.size();
        for (size_t c = 0; c < cols0.size(); ++c) {
            const ColumnDesc& desc = shards[k].second.columns[c];
            if (desc.nbytes == 0) continue;
            int64_t row_bytes = desc.shape[0] > 0 ? desc.nbytes / desc.shape[0] : 0;
            char* dst = static_cast<char*>(columns[c].data_ptr()) + row0 * row_bytes;
            irecv_bytes(dst, desc.nbytes, shards[k].first, data_tag, comm, reqs);
        }
    }
    wait_all(reqs, d, what);
    for (size_t c = 0; c < cols0.size(); ++c) out.set(cols0[c].name, std::move(columns[c]));
    return out;
}

namespace {
// Envelope: [uint8 inline][uint64 total length][message bytes if inline].
constexpr size_t kEnvelopeHeader = 9;
}  // namespace

void post_envelope(const std::string& msg, int dest, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs,
                   std::deque<std::string>& keep) {
    const bool inline_msg = static_cast<int64_t>(msg.size()) <= kEnvelopeBytes;
    std::string env(kEnvelopeHeader, '\0');
    env[0] = inline_msg ? 1 : 0;
    uint64_t n = msg.size();
    std::memcpy(&env[1], &n, sizeof(n));
    if (inline_msg) env += msg;
    keep.push_back(std::move(env));
    const std::string& e = keep.back();
    isend_bytes(e.data(), static_cast<int64_t>(e.size()), dest, tag, comm, reqs);
    if (!inline_msg) isend_bytes(msg.data(), static_cast<int64_t>(msg.size()), dest, tag + 1, comm, reqs);
}

Mailbox::Mailbox(MPI_Comm comm, int tag, std::vector<int> sources)
    : comm_(comm), tag_(tag), sources_(std::move(sources)) {
    buffers_.resize(sources_.size(), std::vector<char>(kEnvelopeHeader + static_cast<size_t>(kEnvelopeBytes)));
    reqs_.assign(sources_.size(), MPI_REQUEST_NULL);
    needs_post_.assign(sources_.size(), 1);
}

Mailbox::~Mailbox() {
    for (auto& r : reqs_) {
        if (r == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
}

void Mailbox::post(size_t i) {
    RLPT_MPI_CHECK(MPI_Irecv(buffers_[i].data(), static_cast<int>(buffers_[i].size()), MPI_BYTE, sources_[i], tag_,
                             comm_, &reqs_[i]));
    needs_post_[i] = 0;
}

bool Mailbox::try_take(std::string& msg, int& source, const Deadline& d) {
    for (size_t i = 0; i < sources_.size(); ++i)
        if (needs_post_[i]) post(i);
    int index = MPI_UNDEFINED, flag = 0;
    MPI_Status st;
    RLPT_MPI_CHECK(MPI_Testany(static_cast<int>(reqs_.size()), reqs_.data(), &index, &flag, &st));
    if (!flag || index == MPI_UNDEFINED) return false;
    const size_t i = static_cast<size_t>(index);
    needs_post_[i] = 1;
    int count = 0;
    RLPT_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
    const char* b = buffers_[i].data();
    if (count < static_cast<int>(kEnvelopeHeader))
        throw CommError(fmt::format("malformed envelope from rank {}", st.MPI_SOURCE));
    uint64_t n = 0;
    std::memcpy(&n, b + 1, sizeof(n));
    source = sources_[i];
    if (b[0] == 1) {
        if (n != static_cast<uint64_t>(count) - kEnvelopeHeader) {
            throw CommError(fmt::format("malformed envelope from rank {}: length mismatch", source));
        }
        msg.assign(b + kEnvelopeHeader, static_cast<size_t>(n));
        return true;
    }
    msg.resize(static_cast<size_t>(n));
    std::vector<MPI_Request> rq;
    irecv_bytes(msg.data(), static_cast<int64_t>(n), source, tag_ + 1, comm_, rq);
    wait_all(rq, d, fmt::format("a long control message from rank {}", source));
    return true;
}

void send_batch(const Batch& b, int dest, int tag, MPI_Comm comm, const Deadline& d) {
    OutgoingBatch out;
    out.post(std::string(), b, dest, tag, tag + 2, comm);
    out.complete(d, fmt::format("sending a batch to rank {}", dest));
}

Batch recv_batch(int src, int tag, MPI_Comm comm, BufferPool& pool, const Deadline& d) {
    int source = src;
    std::string header;
    Mailbox box(comm, tag, {src});
    poll_until([&] { return box.try_take(header, source, d); }, d, fmt::format("a batch from rank {}", src));
    BatchLayout layout = decode_layout(header.data(), header.size());
    return recv_columns(std::move(layout), source, tag + 2, comm, pool, d,
                        fmt::format("batch data from rank {}", source));
}

}  // namespace rlpt::protocol
