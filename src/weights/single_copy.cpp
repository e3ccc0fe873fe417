// Single-copy moves between processes of one host (single_copy.h): the probe, region runs,
// mappings of peers' arenas and process_vm_readv.
#include "single_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <climits>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include <fmt/format.h>

#include "rlpt/comm/shared_arena.h"
#include "rlpt/core/log.h"

namespace rlpt::weights::detail {

using comm::arena_of;
using comm::ArenaRef;
using comm::Communicator;
using comm::Deadline;
using comm::shared_arenas_enabled;
using comm::wait_all;
using comm::wait_one;

namespace {

constexpr int kLayoutTag = 4244;
constexpr int kDoneTag = 4245;

// Hostname and boot id: equal only for processes of one running kernel.
uint64_t host_identity() {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    std::string id = name;
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string line;
    if (std::getline(boot, line)) id += "/" + line;
    return std::hash<std::string>{}(id);
}

bool disabled_by_environment() {
    const char* v = std::getenv("RLPT_RESHARD_CMA");
    return v != nullptr && std::string(v) == "0";
}

// Moves `v[i]` on by `n` bytes (dropping runs it used up).
void advance(std::vector<iovec>& v, size_t& i, size_t n) {
    while (n > 0) {
        if (n >= v[i].iov_len) {
            n -= v[i].iov_len;
            ++i;
        } else {
            v[i].iov_base = static_cast<char*>(v[i].iov_base) + n;
            v[i].iov_len -= n;
            n = 0;
        }
    }
}

// Copies the runs `from` into the runs `to` (the same total, each cut its own way) with memcpy;
// both lists are used up.
void copy_mapped(std::vector<iovec>& from, std::vector<iovec>& to) {
    size_t fi = 0, ti = 0;
    while (fi < from.size() && ti < to.size()) {
        const size_t n = std::min(from[fi].iov_len, to[ti].iov_len);
        std::memcpy(to[ti].iov_base, from[fi].iov_base, n);
        advance(from, fi, n);
        advance(to, ti, n);
    }
}

// Keeps what MPI may still read or write alive after a failure.
template <typename T>
void leak(T& x) {
    new T(std::move(x));
}

}  // namespace

int64_t RegionLayout::bytes() const {
    int64_t n = element_size;
    for (int64_t d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
}

RegionLayout describe_region(const void* address, int64_t element_size, const int64_t* sizes, const int64_t* strides,
                             int64_t ndim) {
    RegionLayout r;
    r.address = reinterpret_cast<uint64_t>(address);
    r.element_size = element_size;
    int64_t out_sizes[64], out_strides[64];
    int64_t k = 0;
    for (int64_t d = 0; d < ndim; ++d) {
        if (sizes[d] == 0) {  // empty: no runs
            r.ndim = 1;
            r.sizes[0] = 0;
            r.strides[0] = 1;
            return r;
        }
        if (sizes[d] == 1) continue;
        if (k > 0 && out_strides[k - 1] == strides[d] * sizes[d]) {  // contiguous with the outer one
            out_sizes[k - 1] *= sizes[d];
            out_strides[k - 1] = strides[d];
        } else if (k < 64) {
            out_sizes[k] = sizes[d];
            out_strides[k] = strides[d];
            ++k;
        } else {
            r.ndim = -1;
            return r;
        }
    }
    if (k > kMaxRegionDims) {
        r.ndim = -1;
        return r;
    }
    r.ndim = k;
    std::copy(out_sizes, out_sizes + k, r.sizes);
    std::copy(out_strides, out_strides + k, r.strides);
    int64_t extent = element_size;  // bytes from `address` to the end of the region's last element
    for (int64_t d = 0; d < k; ++d) {
        if (r.strides[d] < 0) return r;  // negative strides: not described by [address, address + extent)
        extent += (r.sizes[d] - 1) * r.strides[d] * element_size;
    }
    const ArenaRef a = arena_of(address, static_cast<size_t>(extent));
    r.arena_id = a.id;
    r.arena_inode = a.inode;
    r.arena_base = a.base;
    r.arena_bytes = a.bytes;
    r.arena_fd = a.fd;
    return r;
}

void append_runs(const RegionLayout& r, std::vector<iovec>& out) {
    char* base = reinterpret_cast<char*>(r.address);
    if (r.ndim == 0) {
        out.push_back({base, static_cast<size_t>(r.element_size)});
        return;
    }
    const bool inner_contiguous = r.strides[r.ndim - 1] == 1;
    const int64_t outer = inner_contiguous ? r.ndim - 1 : r.ndim;
    const size_t run = static_cast<size_t>(r.element_size * (inner_contiguous ? r.sizes[r.ndim - 1] : 1));
    for (int64_t d = 0; d < r.ndim; ++d)
        if (r.sizes[d] == 0) return;
    int64_t index[kMaxRegionDims] = {};
    for (;;) {
        int64_t offset = 0;
        for (int64_t d = 0; d < outer; ++d) offset += index[d] * r.strides[d];
        out.push_back({base + offset * r.element_size, run});
        int64_t d = outer - 1;
        for (; d >= 0; --d) {
            if (++index[d] < r.sizes[d]) break;
            index[d] = 0;
        }
        if (d < 0) return;
    }
}

std::string copy_runs(int pid, bool write, std::vector<iovec> local, std::vector<iovec> remote) {
    const char* call = write ? "process_vm_writev to" : "process_vm_readv from";
    size_t li = 0, ri = 0;
    while (li < local.size() && ri < remote.size()) {
        const auto ln = static_cast<unsigned long>(std::min<size_t>(IOV_MAX, local.size() - li));
        const auto rn = static_cast<unsigned long>(std::min<size_t>(IOV_MAX, remote.size() - ri));
        const ssize_t got = write ? process_vm_writev(pid, &local[li], ln, &remote[ri], rn, 0)
                                  : process_vm_readv(pid, &local[li], ln, &remote[ri], rn, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return fmt::format("{} pid {}: {}", call, pid, std::strerror(errno));
        if (got == 0) return fmt::format("{} pid {} made no progress", call, pid);
        advance(local, li, static_cast<size_t>(got));
        advance(remote, ri, static_cast<size_t>(got));
    }
    if (li != local.size() || ri != remote.size()) return "the two ends' regions differ in size";
    return {};
}

SingleCopy::SingleCopy(const Communicator& comm, bool enabled, const Deadline& deadline)
    : comm_(comm), probe_word_(std::make_unique<uint64_t>(0)) {
    const int n = comm.size(), me = comm.rank();
    std::random_device rd;
    *probe_word_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
    enabled = enabled && !disabled_by_environment();
    struct Card {
        int64_t pid;
        uint64_t host, address, word;
        int64_t enabled;
    };
    const Card mine{getpid(), host_identity(), reinterpret_cast<uint64_t>(probe_word_.get()), *probe_word_,
                    enabled ? 1 : 0};
    std::vector<Card> cards(static_cast<size_t>(n));
    comm.allgather(&mine, cards.data(), sizeof(Card), deadline);
    // Read every same-host peer's word.
    std::vector<char> row(static_cast<size_t>(n), 0);
    std::string failure;
    for (int q = 0; q < n; ++q) {
        const Card& c = cards[static_cast<size_t>(q)];
        if (q == me || !enabled || !c.enabled || c.host != mine.host) continue;
        uint64_t got = 0;
        iovec local{&got, sizeof(got)}, remote{reinterpret_cast<void*>(c.address), sizeof(got)};
        const ssize_t r = process_vm_readv(static_cast<pid_t>(c.pid), &local, 1, &remote, 1, 0);
        if (r == static_cast<ssize_t>(sizeof(got)) && got == c.word) {
            row[static_cast<size_t>(q)] = 1;
        } else if (failure.empty()) {
            failure = r < 0 ? fmt::format("rank {} (pid {}): {}", q, c.pid, std::strerror(errno))
                            : fmt::format("rank {} (pid {}): read another value (another pid namespace?)", q, c.pid);
        }
    }
    reads_.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
    comm.allgather(row.data(), reads_.data(), n, deadline);
    pids_.resize(static_cast<size_t>(n));
    int same_host = 0;
    for (int q = 0; q < n; ++q) {
        pids_[static_cast<size_t>(q)] = cards[static_cast<size_t>(q)].pid;
        for (int s = 0; s < q; ++s) {
            n_pairs_ += connects(q, s) ? 1 : 0;
            same_host += cards[static_cast<size_t>(s)].host == cards[static_cast<size_t>(q)].host;
        }
    }
    if (!failure.empty()) {
        RLPT_LOG_WARN("weight transfer (mpi): single copy (process_vm_readv) refused for {}; those pairs use MPI "
                      "messages",
                      failure);
    }
    if (me == 0) {
        RLPT_LOG_INFO(
            "weight transfer (mpi): single copy (process_vm_readv/writev) between {} of {} same-host rank pairs{}",
            n_pairs_, same_host, enabled ? "" : " (off on rank 0: RLPT_RESHARD_CMA=0 or the options)");
    }
}

SingleCopy::~SingleCopy() {
    for (auto& [key, m] : mappings_)
        if (m.data != nullptr) munmap(m.data, m.bytes);
}

char* SingleCopy::mapping(int peer, const RegionLayout& there) {
    auto [it, fresh] = mappings_.try_emplace({peer, there.arena_id});
    Mapping& m = it->second;
    m.used = true;
    if (!fresh) return m.data;
    const std::string path = fmt::format("/proc/{}/fd/{}", pids_[static_cast<size_t>(peer)], there.arena_fd);
    std::string failure;
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd < 0) {
        failure = std::strerror(errno);
    } else if (fstat(fd, &st) != 0) {
        failure = std::strerror(errno);
    } else if (static_cast<uint64_t>(st.st_ino) != there.arena_inode ||
               static_cast<uint64_t>(st.st_size) < there.arena_bytes) {
        failure = "another file than the peer's arena";
    } else {
        void* p = mmap(nullptr, there.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            failure = std::strerror(errno);
        } else {
            m.data = static_cast<char*>(p);
            m.bytes = there.arena_bytes;
        }
    }
    if (fd >= 0) close(fd);
    if (!failure.empty() && !map_warned_) {
        map_warned_ = true;
        RLPT_LOG_WARN("weight transfer (mpi): cannot map rank {}'s weight arena ({}: {}); copying with "
                      "process_vm_readv/writev instead",
                      peer, path, failure);
    }
    return m.data;
}

void SingleCopy::unmap_unused() {
    // The peers this rank copied with in this exchange (it holds their layouts).
    auto copied_with = [this](int peer) {
        return in_layouts_.size() > static_cast<size_t>(peer) && !in_layouts_[static_cast<size_t>(peer)].empty();
    };
    for (auto it = mappings_.begin(); it != mappings_.end();) {
        Mapping& m = it->second;
        if (!m.used && copied_with(it->first.first)) {
            if (m.data != nullptr) munmap(m.data, m.bytes);
            it = mappings_.erase(it);
        } else {
            m.used = false;
            ++it;
        }
    }
}

bool SingleCopy::connects(int a, int b) const {
    const auto n = static_cast<size_t>(comm_.size());
    return reads_[static_cast<size_t>(a) * n + static_cast<size_t>(b)] != 0 &&
           reads_[static_cast<size_t>(b) * n + static_cast<size_t>(a)] != 0;
}

void SingleCopy::start(std::vector<Move> moves, bool same_layouts) {
    const int n = comm_.size(), me = comm_.rank();
    moves_ = std::move(moves);
    error_.clear();
    const bool reuse = same_layouts && have_layouts_;
    RLPT_CHECK(reuse == same_layouts, "single copy: same_layouts without a completed exchange on rank {}", me);
    have_layouts_ = false;  // until this exchange completes
    std::vector<size_t> n_in(static_cast<size_t>(n), 0);
    out_layouts_.assign(static_cast<size_t>(n), {});
    if (!reuse) in_layouts_.assign(static_cast<size_t>(n), {});
    layout_requests_.assign(static_cast<size_t>(n), MPI_REQUEST_NULL);
    done_requests_.assign(static_cast<size_t>(n), MPI_REQUEST_NULL);
    done_status_.assign(static_cast<size_t>(n), 0);
    out_requests_.clear();
    mapped_moves_ = mapped_bytes_ = 0;
    for (const Move& m : moves_) {
        RLPT_CHECK(connects(m.src, m.dst) && (m.src == me) != (m.dst == me), "single copy: a move {} -> {} on rank {}",
                   m.src, m.dst, me);
        const int peer = m.src == me ? m.dst : m.src;
        if (m.region.ndim < 0 && error_.empty())
            error_ = fmt::format("a region {} rank {} is not host memory of at most {} dimensions",
                                 m.src == me ? "sent to" : "received from", peer, kMaxRegionDims);
        if (m.active(me)) {
            ++n_in[static_cast<size_t>(peer)];
        } else {
            out_layouts_[static_cast<size_t>(peer)].push_back(m.region);
        }
    }
    for (int p = 0; p < n; ++p) {
        const auto i = static_cast<size_t>(p);
        if (reuse) {
            RLPT_CHECK(in_layouts_[i].size() == n_in[i], "single copy: {} moves from rank {}, {} layouts kept", n_in[i],
                       p, in_layouts_[i].size());
        } else if (n_in[i] > 0) {
            in_layouts_[i].resize(n_in[i]);
            RLPT_MPI_CHECK(MPI_Irecv(in_layouts_[i].data(),
                                     static_cast<int>(in_layouts_[i].size() * sizeof(RegionLayout)), MPI_BYTE, p,
                                     kLayoutTag, comm_.get(), &layout_requests_[i]));
        }
        if (!out_layouts_[i].empty()) {
            if (!reuse) {
                out_requests_.push_back(MPI_REQUEST_NULL);
                RLPT_MPI_CHECK(MPI_Isend(out_layouts_[i].data(),
                                         static_cast<int>(out_layouts_[i].size() * sizeof(RegionLayout)), MPI_BYTE, p,
                                         kLayoutTag, comm_.get(), &out_requests_.back()));
            }
            RLPT_MPI_CHECK(MPI_Irecv(&done_status_[i], 1, MPI_INT64_T, p, kDoneTag, comm_.get(), &done_requests_[i]));
        }
    }
}

void SingleCopy::copy(const Deadline& deadline) {
    static const std::string kLayouts = "weight transfer (mpi): a peer's region layouts";
    const int n = comm_.size(), me = comm_.rank();
    std::vector<size_t> next(static_cast<size_t>(n), 0);
    sent_status_.assign(static_cast<size_t>(n), 0);
    std::vector<iovec> local, remote;
    const bool map_arenas = shared_arenas_enabled();  // the environment, once per exchange
    for (const Move& m : moves_) {
        if (!m.active(me)) continue;
        const bool write = m.src == me;
        const int peer = write ? m.dst : m.src;
        const auto i = static_cast<size_t>(peer);
        wait_one(layout_requests_[i], deadline, kLayouts);
        const RegionLayout& there = in_layouts_[i][next[i]++];
        if (error_.empty()) {
            if (there.ndim < 0 || m.region.ndim < 0 || there.bytes() != m.bytes || m.region.bytes() != m.bytes) {
                error_ = fmt::format("a {}-byte region {} rank {}: the layouts do not fit ({} bytes there, {} here)",
                                     m.bytes, write ? "to" : "from", peer, there.ndim < 0 ? -1 : there.bytes(),
                                     m.region.ndim < 0 ? -1 : m.region.bytes());
            } else {
                local.clear();
                remote.clear();
                append_runs(m.region, local);
                append_runs(there, remote);
                char* mapped = there.arena_id != 0 && map_arenas ? mapping(peer, there) : nullptr;
                for (const iovec& v : remote) {  // every remote run inside the arena (else CMA)
                    const auto a = reinterpret_cast<uint64_t>(v.iov_base);
                    if (a < there.arena_base || a + v.iov_len > there.arena_base + there.arena_bytes) mapped = nullptr;
                }
                std::string why;
                if (mapped != nullptr) {
                    for (iovec& v : remote)
                        v.iov_base = mapped + (reinterpret_cast<uint64_t>(v.iov_base) - there.arena_base);
                    write ? copy_mapped(local, remote) : copy_mapped(remote, local);
                    ++mapped_moves_;
                    mapped_bytes_ += m.bytes;
                } else {
                    why = copy_runs(static_cast<int>(pids_[i]), write, local, remote);
                }
                if (!why.empty())
                    error_ = fmt::format("{} {} bytes {} rank {}: {}", write ? "writing" : "reading", m.bytes,
                                         write ? "to" : "from", peer, why);
            }
        }
        if (next[i] == in_layouts_[i].size()) {  // the last one with this peer: it may go on
            sent_status_[i] = error_.empty() ? 0 : 1;
            out_requests_.push_back(MPI_REQUEST_NULL);
            RLPT_MPI_CHECK(
                MPI_Isend(&sent_status_[i], 1, MPI_INT64_T, peer, kDoneTag, comm_.get(), &out_requests_.back()));
        }
    }
}

void SingleCopy::finish(const Deadline& deadline) {
    static const std::string kDone = "weight transfer (mpi): peers copying from / into this rank's memory";
    static const std::string kSent = "weight transfer (mpi): single-copy control messages";
    wait_all(done_requests_, deadline, kDone);
    wait_all(out_requests_, deadline, kSent);
    for (size_t p = 0; p < done_status_.size() && error_.empty(); ++p) {
        if (done_status_[p] != 0) error_ = fmt::format("rank {} failed copying this rank's regions", p);
    }
    unmap_unused();
    moves_.clear();
    out_layouts_.clear();
    out_requests_.clear();
    have_layouts_ = error_.empty();  // the next exchange may reuse in_layouts_ (start's same_layouts)
    if (!error_.empty()) {
        throw CommError("weight transfer (mpi, single copy): " + error_, __FILE__, __LINE__);
    }
}

void SingleCopy::abandon() noexcept {
    leak(out_layouts_);
    leak(in_layouts_);
    leak(out_requests_);
    leak(layout_requests_);
    leak(done_requests_);
    leak(done_status_);
    leak(sent_status_);
}

}  // namespace rlpt::weights::detail
