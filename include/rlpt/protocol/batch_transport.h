#pragma once
// Moving Batches over MPI (DESIGN §3): a header message (a caller prefix + the batch layout)
// followed by one message per non-empty column carrying the tensor's storage as it is. No
// per-element encoding: a column costs what MPI costs for its bytes. Non-contiguous or
// device columns are first made contiguous on the host (one copy); contiguous host columns
// — including row slices of a larger batch — are sent in place.
//
// Receivers allocate columns from a BufferPool (warm memory), and a gather of several
// shards receives each shard directly into its rows of the final concatenated column, so a
// gather costs no extra copy either.

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "rlpt/batch/batch.h"
#include "rlpt/batch/batch_codec.h"
#include "rlpt/comm/buffer_pool.h"
#include "rlpt/comm/mpi.h"

namespace rlpt::protocol {

using comm::BufferPool;
using comm::Deadline;

// Sends in flight. Keeps the header bytes and the column tensors alive until complete().
class OutgoingBatch {
  public:
    OutgoingBatch() = default;
    OutgoingBatch(OutgoingBatch&&) = default;
    OutgoingBatch& operator=(OutgoingBatch&&) = default;
    // Posts the header (prefix + layout of b) as an envelope on header_tag (and header_tag + 1
    // when long) and each column on data_tag.
    void post(const std::string& prefix, const Batch& b, int dest, int header_tag, int data_tag, MPI_Comm comm);
    // Posts only a header message (prefix), e.g. a status-only reply.
    void post_header_only(const std::string& prefix, int dest, int header_tag, MPI_Comm comm);
    void complete(const Deadline& d, const std::string& what);
    bool test();  // true when everything was sent

  private:
    std::deque<std::string> headers_;  // messages and envelopes in flight (a deque: pushing never
                                       // moves the strings that pending sends point into)
    std::vector<torch::Tensor> keep_;
    std::vector<MPI_Request> reqs_;
};

// Receives one whole message with `tag` from `src` (MPI_ANY_SOURCE allowed) if one is
// waiting; returns false otherwise. `source` receives the sender's rank.
bool try_recv_message(int src, int tag, MPI_Comm comm, std::string& out, int* source);
// Blocking (with back-off and deadline) variant.
std::string recv_message(int src, int tag, MPI_Comm comm, int* source, const Deadline& d, const std::string& what);

// Receives the columns of one batch described by `layout` from `src`.
Batch recv_columns(BatchLayout layout, int src, int data_tag, MPI_Comm comm, BufferPool& pool, const Deadline& d,
                   const std::string& what);

// Receives several shards (in the given order) straight into one concatenated batch. The
// shards must agree on columns (names, dtypes, trailing shapes) and fields.
Batch recv_concat(std::vector<std::pair<int, BatchLayout>> shards, int data_tag, MPI_Comm comm, BufferPool& pool,
                  const Deadline& d, const std::string& what);

// Control messages ("envelopes") for the controller-worker protocol. Receives are posted in
// advance, so a message is matched as it arrives and waiting is a cheap MPI_Test: Open MPI's
// MPI_Improbe path (unexpected queue + probe per poll) doubles the latency of a round trip.
// A message of up to kEnvelopeBytes travels inline in one message; a longer one sends a
// short envelope announcing its length and then the whole message on tag + 1.
constexpr int64_t kEnvelopeBytes = 8192;

// Posts the message `msg` to `dest` (the request(s) are appended to `reqs`; `msg` and
// `keep` must stay alive until they complete: the envelope bytes are kept in `keep`).
void post_envelope(const std::string& msg, int dest, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs,
                   std::deque<std::string>& keep);

// Pre-posted receives of envelopes on `tag` from each of `sources`.
class Mailbox {
  public:
    Mailbox(MPI_Comm comm, int tag, std::vector<int> sources);
    ~Mailbox();  // cancels receives still posted
    Mailbox(const Mailbox&) = delete;
    Mailbox& operator=(const Mailbox&) = delete;
    // If a message has arrived from any source, stores it (whole, long ones included) and its
    // source and returns true. The receive of that source is re-posted on the next call.
    bool try_take(std::string& msg, int& source, const Deadline& d);

  private:
    void post(size_t i);
    MPI_Comm comm_;
    int tag_;
    std::vector<int> sources_;
    std::vector<std::vector<char>> buffers_;
    std::vector<MPI_Request> reqs_;
    std::vector<char> needs_post_;
};

// Point-to-point convenience (tests, benchmarks): send / receive one batch (header envelope on
// `tag`, column data on tag + 2).
void send_batch(const Batch& b, int dest, int tag, MPI_Comm comm, const Deadline& d = Deadline::never());
Batch recv_batch(int src, int tag, MPI_Comm comm, BufferPool& pool, const Deadline& d = Deadline::never());

}  // namespace rlpt::protocol
