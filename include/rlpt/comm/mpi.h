#pragma once
// Thin RAII wrappers over MPI used everywhere else in rlpt. Torch-free.
//
// Error handling: MpiRuntime sets MPI_ERRORS_RETURN on MPI_COMM_WORLD right after
// MPI_Init_thread, so every MPI call returns an error code, and RLPT_MPI_CHECK turns
// it into a CommError carrying MPI_Error_string and the call text.
//
// Waiting: every blocking wait in rlpt goes through wait_all()/wait_any() below, which
// poll MPI_Test* with a spin -> sched_yield -> sleep back-off. A rank that waits for
// minutes (a worker while the controller scores rewards, the controller while the
// workers generate) costs ~0% CPU instead of one busy core, which matters whenever
// ranks outnumber cores; back-to-back messages still see µs latency from the spin
// phase. Waits take a Deadline and throw TimeoutError naming what they waited for.
//
// Watchdog: every such wait also reports itself, about every 50 ms, to the process's
// WaitObserver (set_wait_observer). That is how a wait without a deadline of its own (a role's
// collective: the gradient all-reduce, an error agreement) still ends within
// trainer.call_timeout_s: on rank 0 the Controller observes every wait and ends it (throws
// TimeoutError naming the rank(s) that stopped answering) at the deadline of the call in
// flight; on a worker the WorkerHost observes its waits inside a call, tells the controller it
// is alive and what it waits for (heartbeats), and ends the job itself should the controller
// not do so (rlpt/protocol/runtime.h).
//
// Threads: MPI runs at MPI_THREAD_SERIALIZED (MpiRuntime refuses less): any thread may call MPI,
// never two at once. rlpt calls it from the thread that created the MpiRuntime (the MPI thread,
// on_mpi_thread()) with one exception: during a backward() on a GPU, autograd runs the backward
// functions and hooks of CUDA tensors on its own device thread while the MPI thread blocks in
// backward() until they are done. Those are collectives (tensor parallelism's backward all-reduce,
// the ZeRO-3 hooks' gathers and reduce-scatters: rlpt/comm/collectives.h), over MPI when device
// collectives are MPI, and their waits (over MPI or NCCL) report to the WaitObserver from that
// thread. Serialized holds because one rank drives one device and its models live there: no
// backward function that communicates runs on the MPI thread concurrently (CPU parameters run
// their backward on the MPI thread itself, and then autograd starts no device thread). Beyond
// that rule no rlpt thread calls MPI (the timeline writer, loaders and logging never do). A
// WaitObserver runs on the waiting thread: the worker's sends only heartbeats on the MPI thread
// (a stall handler never sends from a foreign thread; the controller's receives and its
// TimeoutError are legal there under the rule above).

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/core/error.h"

namespace rlpt::comm {

std::string mpi_error_string(int code);

}  // namespace rlpt::comm

#define RLPT_MPI_CHECK(call)                                                                                  \
    do {                                                                                                      \
        int rlpt_mpi_rc_ = (call);                                                                            \
        if (rlpt_mpi_rc_ != MPI_SUCCESS) {                                                                    \
            throw ::rlpt::CommError(::rlpt::comm::mpi_error_string(rlpt_mpi_rc_), __FILE__, __LINE__, #call); \
        }                                                                                                     \
    } while (0)

namespace rlpt::comm {

// ---- deadlines and polling --------------------------------------------------------------

class Deadline {
  public:
    static Deadline never() { return Deadline(); }
    static Deadline after_seconds(double s);  // s <= 0 means never
    bool infinite() const { return infinite_; }
    bool expired() const;
    double seconds_left() const;  // +inf when infinite

  private:
    Deadline() = default;
    bool infinite_ = true;
    std::chrono::steady_clock::time_point at_{};
};

// How a waiting rank polls. Defaults: spin 200 µs, then sched_yield until 2 ms have passed,
// then sleep with exponential back-off from 20 µs up to max_sleep_us.
struct PollPolicy {
    double spin_us = 200.0;
    double yield_until_us = 2000.0;
    double max_sleep_us = 1000.0;
};
// Process-wide polling policy, set once at start-up before any communication (run_job sets the
// defaults above; no config key changes them).
void set_poll_policy(const PollPolicy& p);
const PollPolicy& poll_policy();

// Sees every wait of this process (see the top of this file). on_wait() runs on the waiting
// thread from inside the wait (the MPI thread, or autograd's device thread: on_mpi_thread() tells
// which; see "Threads" above), never re-entered (a wait inside on_wait() is not reported); it
// may throw, which abandons the wait (the exception leaves the wait as if the wait had thrown).
class WaitObserver {
  public:
    virtual ~WaitObserver() = default;
    // `what` names the wait ("gradient all-reduce"); `waited_s` is how long it has lasted.
    virtual void on_wait(const std::string& what, double waited_s) = 0;
};
// Installs the process's observer (nullptr: none) and returns the previous one. Set from the
// MPI thread; the observer must outlive its installation.
WaitObserver* set_wait_observer(WaitObserver* observer);

// Calls `ready()` until it returns true, backing off per poll_policy(). Throws
// TimeoutError("timed out after Xs waiting for <what>") at the deadline, and whatever the
// WaitObserver throws.
template <typename Ready>
void poll_until(Ready&& ready, const Deadline& deadline, const std::string& what);

// Completes all requests (MPI_Testall with back-off). Null requests are fine.
void wait_all(std::vector<MPI_Request>& reqs, const Deadline& deadline, const std::string& what);
void wait_one(MPI_Request& req, const Deadline& deadline, const std::string& what);
// Returns the index of one completed request (MPI_Testany with back-off); -1 when all null.
int wait_any(std::vector<MPI_Request>& reqs, MPI_Status* status, const Deadline& deadline, const std::string& what);

// ---- runtime ----------------------------------------------------------------------------

// Initialises MPI at MPI_THREAD_SERIALIZED (see "Threads" above; not MPI_THREAD_MULTIPLE, under
// which blocking MPI calls from several threads collapse to ms per message on Open MPI) and
// finalises it on destruction. Throws CommError when the library provides a lower thread level
// (also when MPI was initialised before, by someone else, at a lower level). The constructing
// thread becomes the MPI thread.
class MpiRuntime {
  public:
    MpiRuntime(int* argc, char*** argv);
    ~MpiRuntime();
    MpiRuntime(const MpiRuntime&) = delete;
    MpiRuntime& operator=(const MpiRuntime&) = delete;
    // Aborts the whole job (all ranks) with `code`. Never returns.
    [[noreturn]] static void abort(int code);
    // After abort-worthy errors the runtime must not call MPI_Finalize (it would hang
    // waiting for peers): mark_failed() makes the destructor skip it.
    void mark_failed() { failed_ = true; }
    // The thread level MPI provides (MPI_Query_thread): MPI_THREAD_SERIALIZED or higher.
    static int thread_level();

  private:
    bool failed_ = false;
    bool owns_ = false;
};

// True on the thread that created the live MpiRuntime (the MPI thread); false on every other
// thread, and everywhere while no MpiRuntime exists.
bool on_mpi_thread();

// ---- communicators ----------------------------------------------------------------------

// Move-only owner of an MPI_Comm (freed on destruction unless it is MPI_COMM_WORLD or null).
class Communicator {
  public:
    Communicator() = default;
    static Communicator world();               // MPI_COMM_WORLD, not owned
    static Communicator adopt(MPI_Comm comm);  // takes ownership (MPI_COMM_NULL allowed)
    ~Communicator();
    Communicator(Communicator&& o) noexcept;
    Communicator& operator=(Communicator&& o) noexcept;
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    bool valid() const { return comm_ != MPI_COMM_NULL; }
    MPI_Comm get() const { return comm_; }
    int rank() const { return rank_; }
    int size() const { return size_; }

    // Collective on this communicator.
    Communicator dup() const;
    // Collective on this communicator; color < 0 (MPI_UNDEFINED) returns an invalid comm.
    Communicator split(int color, int key) const;
    // Collective on this communicator: the ranks sharing a node (MPI_COMM_TYPE_SHARED).
    Communicator split_shared() const;
    // Collective over `ranks` only (ranks of this communicator; the new communicator's rank
    // order follows the list): MPI_Comm_create_group. Ranks not listed must not call it.
    Communicator create_group(const std::vector<int>& ranks, int tag) const;

    // ---- collectives (all collective on this communicator, all poll with back-off) ----
    void barrier(const Deadline& d = Deadline::never()) const;
    void bcast(void* data, int64_t bytes, int root, const Deadline& d = Deadline::never()) const;
    void bcast_string(std::string& s, int root, const Deadline& d = Deadline::never()) const;
    // Gathers one fixed-size item per rank to every rank.
    void allgather(const void* send, void* recv, int64_t bytes_each, const Deadline& d = Deadline::never()) const;
    std::vector<int64_t> allgather_i64(int64_t v, const Deadline& d = Deadline::never()) const;
    std::vector<std::string> allgather_strings(const std::string& s, const Deadline& d = Deadline::never()) const;
    // In-place all-reduce of `count` elements of `type` with `op`.
    void allreduce(void* data, int64_t count, MPI_Datatype type, MPI_Op op,
                   const Deadline& d = Deadline::never()) const;
    double allreduce_sum(double v) const;
    double allreduce_max(double v) const;
    int64_t allreduce_sum_i64(int64_t v) const;
    int64_t allreduce_max_i64(int64_t v) const;
    int64_t allreduce_min_i64(int64_t v) const;

  private:
    void refresh();
    MPI_Comm comm_ = MPI_COMM_NULL;
    bool owned_ = false;
    int rank_ = -1;
    int size_ = 0;
};

// Largest single MPI message rlpt sends (counts are int): bigger buffers go in chunks.
constexpr int64_t kMaxMessageBytes = int64_t(1) << 30;

// Non-blocking send/recv of an arbitrarily large byte range, split into kMaxMessageBytes
// pieces with the same tag (MPI keeps their order). Appends the requests to `reqs`.
void isend_bytes(const void* data, int64_t bytes, int dest, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs);
void irecv_bytes(void* data, int64_t bytes, int src, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs);

}  // namespace rlpt::comm

// ---- template implementation ------------------------------------------------------------
namespace rlpt::comm::detail {
// One wait's back-off. Constructed with `what` (which must outlive it), pause() also reports
// the wait to the WaitObserver about every 50 ms; report() does only that, for loops that
// pause their own way.
class Backoff {
  public:
    explicit Backoff(const std::string* what = nullptr);
    void pause();   // one back-off step
    void report();  // the observer part of pause()
  private:
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point next_report_;
    double sleep_us_;
    const std::string* what_;
};
}  // namespace rlpt::comm::detail

template <typename Ready>
void rlpt::comm::poll_until(Ready&& ready, const Deadline& deadline, const std::string& what) {
    detail::Backoff backoff(&what);
    while (!ready()) {
        if (deadline.expired()) {
            throw TimeoutError("timed out waiting for " + what);
        }
        backoff.pause();
    }
}
