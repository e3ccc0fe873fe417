#include "rlpt/comm/mpi.h"

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

namespace rlpt::comm {

std::string mpi_error_string(int code) {
    char buf[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
    return std::string(buf, static_cast<size_t>(len));
}

// ---- deadlines and polling --------------------------------------------------------------

Deadline Deadline::after_seconds(double s) {
    Deadline d;
    if (s > 0 && s < 1e12) {
        d.infinite_ = false;
        d.at_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
    }
    return d;
}

bool Deadline::expired() const { return !infinite_ && std::chrono::steady_clock::now() >= at_; }

double Deadline::seconds_left() const {
    if (infinite_) return std::numeric_limits<double>::infinity();
    return std::chrono::duration<double>(at_ - std::chrono::steady_clock::now()).count();
}

namespace {
PollPolicy& policy_storage() {
    static PollPolicy p;
    return p;
}
}  // namespace

void set_poll_policy(const PollPolicy& p) { policy_storage() = p; }
const PollPolicy& poll_policy() { return policy_storage(); }

namespace {
struct ObserverSlot {
    WaitObserver* observer = nullptr;
    bool inside = false;  // on_wait() is running: waits inside it are not reported
};
ObserverSlot& observer_slot() {
    static ObserverSlot slot;
    return slot;
}
constexpr std::chrono::milliseconds kReportEvery{50};
}  // namespace

WaitObserver* set_wait_observer(WaitObserver* observer) { return std::exchange(observer_slot().observer, observer); }

namespace detail {
Backoff::Backoff(const std::string* what)
    : start_(std::chrono::steady_clock::now()), next_report_(start_ + kReportEvery), sleep_us_(20.0), what_(what) {}

void Backoff::report() {
    ObserverSlot& slot = observer_slot();
    if (what_ == nullptr || slot.observer == nullptr || slot.inside) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_report_) return;
    next_report_ = now + kReportEvery;
    struct Inside {
        ObserverSlot& s;
        explicit Inside(ObserverSlot& s_) : s(s_) { s.inside = true; }
        ~Inside() { s.inside = false; }
    } inside(slot);
    slot.observer->on_wait(*what_, std::chrono::duration<double>(now - start_).count());
}

void Backoff::pause() {
    report();
    const PollPolicy& p = poll_policy();
    double waited_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
    if (waited_us < p.spin_us) return;  // spin: the next MPI_Test is the pause
    if (waited_us < p.yield_until_us) {
        sched_yield();
        return;
    }
    struct timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = static_cast<long>(sleep_us_ * 1000.0);
    nanosleep(&ts, nullptr);
    sleep_us_ = std::min(sleep_us_ * 2.0, p.max_sleep_us);
}
}  // namespace detail

void wait_all(std::vector<MPI_Request>& reqs, const Deadline& deadline, const std::string& what) {
    if (reqs.empty()) return;
    int flag = 0;
    poll_until(
        [&] {
            RLPT_MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE));
            return flag != 0;
        },
        deadline, what);
}

void wait_one(MPI_Request& req, const Deadline& deadline, const std::string& what) {
    int flag = 0;
    poll_until(
        [&] {
            RLPT_MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
            return flag != 0;
        },
        deadline, what);
}

int wait_any(std::vector<MPI_Request>& reqs, MPI_Status* status, const Deadline& deadline, const std::string& what) {
    int index = MPI_UNDEFINED;
    int flag = 0;
    MPI_Status st;
    poll_until(
        [&] {
            RLPT_MPI_CHECK(MPI_Testany(static_cast<int>(reqs.size()), reqs.data(), &index, &flag, &st));
            return flag != 0;
        },
        deadline, what);
    if (index == MPI_UNDEFINED) return -1;
    if (status) *status = st;
    return index;
}

// ---- runtime ----------------------------------------------------------------------------

namespace {
std::atomic<std::thread::id>& mpi_thread() {
    static std::atomic<std::thread::id> id{std::thread::id()};
    return id;
}

const char* thread_level_name(int level) {
    switch (level) {
        case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
        case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
        case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
        case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    }
    return "an unknown thread level";
}
}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = 0;
    if (!initialized) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) throw CommError("MPI_Init_thread failed: " + mpi_error_string(rc));
        owns_ = true;
    } else {
        RLPT_MPI_CHECK(MPI_Query_thread(&provided));
    }
    RLPT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (provided < MPI_THREAD_SERIALIZED && owns_) MPI_Finalize();  // the throw below skips the destructor
    RLPT_CHECK_KIND(CommError, provided >= MPI_THREAD_SERIALIZED,
                    "the MPI library provides {} but rlpt needs MPI_THREAD_SERIALIZED (on a GPU, autograd's "
                    "device thread runs collectives while the main thread waits in backward()); use an MPI built "
                    "with thread support (Open MPI and MPICH provide it by default)",
                    thread_level_name(provided));
    mpi_thread().store(std::this_thread::get_id());
}

int MpiRuntime::thread_level() {
    int provided = MPI_THREAD_SINGLE;
    RLPT_MPI_CHECK(MPI_Query_thread(&provided));
    return provided;
}

bool on_mpi_thread() { return mpi_thread().load() == std::this_thread::get_id(); }

MpiRuntime::~MpiRuntime() {
    mpi_thread().store(std::thread::id());
    if (!owns_ || failed_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

void MpiRuntime::abort(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

// ---- communicators ----------------------------------------------------------------------

Communicator Communicator::world() {
    Communicator c;
    c.comm_ = MPI_COMM_WORLD;
    c.owned_ = false;
    c.refresh();
    return c;
}

Communicator Communicator::adopt(MPI_Comm comm) {
    Communicator c;
    c.comm_ = comm;
    c.owned_ = comm != MPI_COMM_NULL;
    c.refresh();
    return c;
}

void Communicator::refresh() {
    if (comm_ == MPI_COMM_NULL) {
        rank_ = -1;
        size_ = 0;
        return;
    }
    RLPT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    RLPT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

Communicator::~Communicator() {
    if (owned_ && comm_ != MPI_COMM_NULL) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Comm_free(&comm_);
    }
}

Communicator::Communicator(Communicator&& o) noexcept
    : comm_(o.comm_), owned_(o.owned_), rank_(o.rank_), size_(o.size_) {
    o.comm_ = MPI_COMM_NULL;
    o.owned_ = false;
    o.rank_ = -1;
    o.size_ = 0;
}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
    if (this != &o) {
        Communicator tmp(std::move(*this));
        comm_ = o.comm_;
        owned_ = o.owned_;
        rank_ = o.rank_;
        size_ = o.size_;
        o.comm_ = MPI_COMM_NULL;
        o.owned_ = false;
        o.rank_ = -1;
        o.size_ = 0;
    }
    return *this;
}

Communicator Communicator::dup() const {
    MPI_Comm out = MPI_COMM_NULL;
    RLPT_MPI_CHECK(MPI_Comm_dup(comm_, &out));
    return adopt(out);
}

Communicator Communicator::split(int color, int key) const {
    MPI_Comm out = MPI_COMM_NULL;
    RLPT_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out));
    return adopt(out);
}

Communicator Communicator::split_shared() const {
    MPI_Comm out = MPI_COMM_NULL;
    RLPT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out));
    return adopt(out);
}

Communicator Communicator::create_group(const std::vector<int>& ranks, int tag) const {
    MPI_Group all = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
    RLPT_MPI_CHECK(MPI_Comm_group(comm_, &all));
    int rc = MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &sub);
    MPI_Group_free(&all);
    if (rc != MPI_SUCCESS) throw CommError(mpi_error_string(rc), __FILE__, __LINE__, "MPI_Group_incl");
    MPI_Comm out = MPI_COMM_NULL;
    rc = MPI_Comm_create_group(comm_, sub, tag, &out);
    MPI_Group_free(&sub);
    if (rc != MPI_SUCCESS) throw CommError(mpi_error_string(rc), __FILE__, __LINE__, "MPI_Comm_create_group");
    return adopt(out);
}

void Communicator::barrier(const Deadline& d) const {
    MPI_Request req;
    RLPT_MPI_CHECK(MPI_Ibarrier(comm_, &req));
    wait_one(req, d, "barrier");
}

void Communicator::bcast(void* data, int64_t bytes, int root, const Deadline& d) const {
    char* p = static_cast<char*>(data);
    std::vector<MPI_Request> reqs;
    for (int64_t off = 0; off < bytes; off += kMaxMessageBytes) {
        int n = static_cast<int>(std::min(kMaxMessageBytes, bytes - off));
        MPI_Request req;
        RLPT_MPI_CHECK(MPI_Ibcast(p + off, n, MPI_BYTE, root, comm_, &req));
        reqs.push_back(req);
    }
    wait_all(reqs, d, "broadcast");
}

void Communicator::bcast_string(std::string& s, int root, const Deadline& d) const {
    int64_t n = static_cast<int64_t>(s.size());
    bcast(&n, sizeof(n), root, d);
    s.resize(static_cast<size_t>(n));
    if (n > 0) bcast(s.data(), n, root, d);
}

void Communicator::allgather(const void* send, void* recv, int64_t bytes_each, const Deadline& d) const {
    RLPT_CHECK_KIND(CommError, bytes_each < kMaxMessageBytes, "allgather item too large");
    MPI_Request req;
    RLPT_MPI_CHECK(MPI_Iallgather(send, static_cast<int>(bytes_each), MPI_BYTE, recv, static_cast<int>(bytes_each),
                                  MPI_BYTE, comm_, &req));
    wait_one(req, d, "allgather");
}

std::vector<int64_t> Communicator::allgather_i64(int64_t v, const Deadline& d) const {
    std::vector<int64_t> out(static_cast<size_t>(size_));
    allgather(&v, out.data(), sizeof(int64_t), d);
    return out;
}

std::vector<std::string> Communicator::allgather_strings(const std::string& s, const Deadline& d) const {
    auto lens = allgather_i64(static_cast<int64_t>(s.size()), d);
    std::vector<int> counts(lens.size()), displs(lens.size());
    int64_t total = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
        counts[i] = static_cast<int>(lens[i]);
        displs[i] = static_cast<int>(total);
        total += lens[i];
    }
    RLPT_CHECK_KIND(CommError, total < kMaxMessageBytes, "allgather_strings payload too large");
    std::string all(static_cast<size_t>(total), '\0');
    MPI_Request req;
    RLPT_MPI_CHECK(MPI_Iallgatherv(s.data(), static_cast<int>(s.size()), MPI_BYTE, all.data(), counts.data(),
                                   displs.data(), MPI_BYTE, comm_, &req));
    wait_one(req, d, "allgather of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < lens.size(); ++i) out.push_back(all.substr(displs[i], counts[i]));
    return out;
}

void Communicator::allreduce(void* data, int64_t count, MPI_Datatype type, MPI_Op op, const Deadline& d) const {
    int elem = 0;
    RLPT_MPI_CHECK(MPI_Type_size(type, &elem));
    int64_t max_count = kMaxMessageBytes / elem;
    char* p = static_cast<char*>(data);
    std::vector<MPI_Request> reqs;
    for (int64_t off = 0; off < count; off += max_count) {
        int n = static_cast<int>(std::min(max_count, count - off));
        MPI_Request req;
        RLPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p + off * elem, n, type, op, comm_, &req));
        reqs.push_back(req);
    }
    wait_all(reqs, d, "all-reduce");
}

double Communicator::allreduce_sum(double v) const {
    allreduce(&v, 1, MPI_DOUBLE, MPI_SUM);
    return v;
}
double Communicator::allreduce_max(double v) const {
    allreduce(&v, 1, MPI_DOUBLE, MPI_MAX);
    return v;
}
int64_t Communicator::allreduce_sum_i64(int64_t v) const {
    allreduce(&v, 1, MPI_INT64_T, MPI_SUM);
    return v;
}
int64_t Communicator::allreduce_max_i64(int64_t v) const {
    allreduce(&v, 1, MPI_INT64_T, MPI_MAX);
    return v;
}
int64_t Communicator::allreduce_min_i64(int64_t v) const {
    allreduce(&v, 1, MPI_INT64_T, MPI_MIN);
    return v;
}

void isend_bytes(const void* data, int64_t bytes, int dest, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs) {
    const char* p = static_cast<const char*>(data);
    for (int64_t off = 0; off < bytes; off += kMaxMessageBytes) {
        int n = static_cast<int>(std::min(kMaxMessageBytes, bytes - off));
        MPI_Request req;
        RLPT_MPI_CHECK(MPI_Isend(p + off, n, MPI_BYTE, dest, tag, comm, &req));
        reqs.push_back(req);
    }
}

void irecv_bytes(void* data, int64_t bytes, int src, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs) {
    char* p = static_cast<char*>(data);
    for (int64_t off = 0; off < bytes; off += kMaxMessageBytes) {
        int n = static_cast<int>(std::min(kMaxMessageBytes, bytes - off));
        MPI_Request req;
        RLPT_MPI_CHECK(MPI_Irecv(p + off, n, MPI_BYTE, src, tag, comm, &req));
        reqs.push_back(req);
    }
}

}  // namespace rlpt::comm
