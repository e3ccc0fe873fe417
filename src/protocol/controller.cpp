#include <algorithm>

#include "protocol_common.h"
#include "rlpt/core/log.h"
#include "rlpt/core/signals.h"
#include "rlpt/protocol/runtime.h"

namespace rlpt::protocol {

struct Controller::Call {
    uint64_t seq = 0;
    int role = 0;
    uint16_t method = 0;
    int64_t step = -1;
    int64_t pad = 0;                      // rows added to the input
    int64_t padded_rows = -1;             // rows sent in total (dp_split)
    std::vector<int> ranks;               // world ranks, role-rank order
    std::set<int> waiting;                // ranks whose reply header has not arrived
    std::map<int, BatchLayout> payloads;  // world rank -> layout of its payload
    bool has_local = false;
    bool local_done = false;
    bool local_running = false;  // rank 0 is inside this call's local share
    Batch local_in;              // this rank's share, run in wait() (see below)
    Batch local_out;
    std::map<int, OutgoingBatch> sends;  // world rank -> its inputs, until they are taken
    double started = 0;
    double last_warn = 0;

    // Forgets the input sends that have completed: the ranks left have not taken their inputs.
    void drop_sent_inputs() {
        for (auto it = sends.begin(); it != sends.end();) it = it->second.test() ? sends.erase(it) : std::next(it);
    }
};

namespace {
std::string rank_list(const std::set<int>& ranks) {
    std::string out;
    for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
}
// A worker that sent a heartbeat this recently is alive (it sends one about every second
// while it waits inside a call).
constexpr double kAliveWindowS = 3.0;

std::vector<int> worker_ranks(const comm::Topology& topo) {
    std::vector<int> out;
    for (int r = 0; r < topo.world_size(); ++r)
        if (r != topo.world_rank()) out.push_back(r);
    return out;
}
}  // namespace

Controller::Controller(const std::vector<RoleSpec>& registry, const ProtocolSettings& settings,
                       const comm::Topology& topo, WorkerHost* local)
    : registry_(registry),
      settings_(settings),
      topo_(topo),
      local_(local),
      replies_(std::make_unique<Mailbox>(topo.control().get(), wire::kTagReply, worker_ranks(topo))),
      heartbeats_(std::make_unique<Mailbox>(topo.control().get(), wire::kTagHeartbeat, worker_ranks(topo))) {
    previous_observer_ = comm::set_wait_observer(this);
}

Controller::~Controller() {
    comm::set_wait_observer(previous_observer_);
    try {
        shutdown();
    } catch (const std::exception& e) {
        RLPT_LOG_ERROR("shutting down the workers failed: {}", e.what());
    }
}

int Controller::role_index(const std::string& role) const {
    int idx = find_role(registry_, role);
    if (idx < 0 || !topo_.placement().find(role)) {
        throw ConfigError(fmt::format("role '{}' is not placed on any rank (placement.groups)", role));
    }
    return idx;
}

bool Controller::has_role(const std::string& role) const {
    return find_role(registry_, role) >= 0 && topo_.placement().find(role) != nullptr;
}

const comm::RoleLayout& Controller::layout(const std::string& role) const { return topo_.placement().at(role); }

void Controller::set_role_settings(const std::string& role, Batch settings) {
    const int idx = find_role(registry_, role);
    RLPT_CHECK_KIND(InternalError, idx >= 0, "settings for '{}', which has no dispatch table", role);
    role_settings_[idx] = std::move(settings);
}

Controller::Pending Controller::submit_raw(int role_index, uint16_t method, const Batch* in,
                                           const std::vector<Batch>* per_rank) {
    RLPT_CHECK_KIND(InternalError, !shut_down_, "call after shutdown");
    RLPT_CHECK_KIND(InternalError, role_index >= 0 && static_cast<size_t>(role_index) < registry_.size(),
                    "bad role index {}", role_index);
    const RoleSpec& spec = registry_[static_cast<size_t>(role_index)];
    RLPT_CHECK_KIND(InternalError, method < spec.methods.size(), "role '{}' has no method #{}", spec.name, method);
    const MethodSpec& m = spec.methods[method];
    const comm::RoleLayout& L = topo_.placement().at(spec.name);
    const std::string what = spec.name + "." + m.name;
    Batch with_settings;
    if (m.takes_settings) {
        auto it = role_settings_.find(role_index);
        RLPT_CHECK_KIND(InternalError, it != role_settings_.end() && in != nullptr,
                        "{}: no settings were given for the {} (the run plan resolves them before any kInit: "
                        "app::give_role_settings)",
                        what, spec.name);
        with_settings = *in;
        for (const auto& [key, value] : it->second.meta()) with_settings.set_meta(key, value);
        in = &with_settings;
    }

    auto call = std::make_unique<Call>();
    call->seq = next_seq_++;
    call->role = role_index;
    call->method = method;
    call->step = step_;
    call->ranks = L.world_ranks;
    call->started = call->last_warn = detail::wall_seconds();

    // One input per role rank.
    std::vector<Batch> shards;
    std::vector<const Batch*> input_of(static_cast<size_t>(L.size()), nullptr);
    switch (m.distribute) {
        case Distribute::kOneToAll: {
            RLPT_CHECK_KIND(InternalError, in != nullptr, "{} takes one batch", what);
            check_schema(*in, m.inputs, spec.name, m.name, "input");
            for (auto& p : input_of) p = in;
            break;
        }
        case Distribute::kDpSplit: {
            RLPT_CHECK_KIND(InternalError, in != nullptr, "{} takes one batch", what);
            check_schema(*in, m.inputs, spec.name, m.name, "input");
            const int dp = L.dp_size();
            Batch padded = *in;
            if (padded.size() % dp != 0) {
                RLPT_CHECK(m.pad_to_dp, "{}: {} rows do not split evenly over {} data-parallel ranks", what,
                           padded.size(), dp);
                call->pad = padded.pad_to_multiple(dp);
            }
            call->padded_rows = padded.size();
            shards = padded.chunk(dp);
            for (int r = 0; r < L.size(); ++r)
                input_of[static_cast<size_t>(r)] = &shards[static_cast<size_t>(L.dp_rank_of(r))];
            break;
        }
        case Distribute::kAllToAll: {
            RLPT_CHECK_KIND(InternalError, per_rank != nullptr, "{} takes one batch per rank", what);
            RLPT_CHECK(static_cast<int>(per_rank->size()) == L.size(), "{}: got {} batches for {} ranks", what,
                       per_rank->size(), L.size());
            for (int r = 0; r < L.size(); ++r) {
                check_schema((*per_rank)[static_cast<size_t>(r)], m.inputs, spec.name, m.name, "input");
                input_of[static_cast<size_t>(r)] = &(*per_rank)[static_cast<size_t>(r)];
            }
            break;
        }
    }

    wire::CommandHeader h;
    h.kind = static_cast<uint8_t>(wire::CommandKind::kCall);
    h.role = static_cast<uint8_t>(role_index);
    h.method = method;
    h.seq = call->seq;
    h.step = step_;
    const std::string prefix = detail::header_bytes(h);
    const int me = topo_.world_rank();
    int local_role_rank = -1;
    for (int r = 0; r < L.size(); ++r) {
        int w = L.world_ranks[static_cast<size_t>(r)];
        auto busy = busy_rank_.find(w);
        RLPT_CHECK_KIND(InternalError, busy == busy_rank_.end(),
                        "{}: rank {} is still busy with an earlier call (seq {}); wait() for it first", what, w,
                        busy == busy_rank_.end() ? 0 : busy->second);
        if (w == me) {
            local_role_rank = r;
            continue;
        }
        call->sends[w].post(prefix, *input_of[static_cast<size_t>(r)], w, wire::kTagCommand, wire::kTagCommandData,
                            topo_.control().get());
        call->waiting.insert(w);
        busy_rank_[w] = call->seq;
    }
    if (local_role_rank >= 0) {
        RLPT_CHECK_KIND(InternalError, local_ != nullptr, "controller hosts {} but has no WorkerHost", spec.name);
        call->has_local = true;
        call->local_in = *input_of[static_cast<size_t>(local_role_rank)];
    }
    Pending p{call->seq};
    calls_.emplace(call->seq, std::move(call));
    return p;
}

void Controller::run_local_share(Call& call) {
    // The controller's own share runs when the call is waited for, not when it is submitted:
    // calls that together form one collective across roles (actor -> rollout weight sync)
    // are all submitted before any of them blocks in that collective.
    if (!call.has_local || call.local_done) return;
    call.local_done = true;
    struct Running {  // also cleared when the share throws
        bool& flag;
        explicit Running(bool& f) : flag(f) { flag = true; }
        ~Running() { flag = false; }
    } running(call.local_running);
    try {
        call.local_out = local_->run(call.role, call.method, call.local_in, call.step);
    } catch (const RemoteError&) {
        throw;  // another rank's error reply, read while this share waited
    } catch (const ConfigError&) {
        throw;  // a config error or the watchdog keep their own message and exit code
    } catch (const TimeoutError&) {
        throw;
    } catch (const std::exception& e) {
        // Rank 0 failed as a worker: the same message and exit code as any worker.
        const RoleSpec& spec = registry_[static_cast<size_t>(call.role)];
        throw RemoteError(fmt::format("{}.{} failed on rank {} (role {}, step {}): {}", spec.name,
                                      spec.methods[call.method].name, topo_.world_rank(), spec.name, call.step,
                                      e.what()),
                          topo_.world_rank());
    }
    call.local_in = Batch(0);
}

Controller::Call& Controller::find_call(uint64_t seq) {
    auto it = calls_.find(seq);
    RLPT_CHECK_KIND(InternalError, it != calls_.end(), "no call in flight with seq {}", seq);
    return *it->second;
}

double Controller::timeout_of(const Call& call) const {
    // trainer.call_timeout_s caps every call; a method's own timeout_s can only tighten it
    // (ping: 120 s), so a user who lowers the cap gets the watchdog they asked for.
    const MethodSpec& m = registry_[static_cast<size_t>(call.role)].methods[call.method];
    return m.timeout_s > 0 ? std::min(m.timeout_s, settings_.call_timeout_s) : settings_.call_timeout_s;
}

void Controller::receive_replies_until_done(Call& call) {
    comm::detail::Backoff backoff;
    // The watchdog every 50 ms, the first time after 50 ms: replies keep their µs latency.
    double next_watch = detail::wall_seconds() + 0.05;
    const comm::Deadline long_message = comm::Deadline::after_seconds(settings_.call_timeout_s);
    std::string msg;
    int source = -1;
    for (;;) {
        // Done? checked before every receive attempt: a failed MPI_Testany costs a progress
        // round (and, with mpi_yield_when_idle, a sched_yield).
        if (call.waiting.empty()) {
            call.drop_sent_inputs();
            if (call.sends.empty()) return;
        }
        if (replies_->try_take(msg, source, long_message)) {
            handle_reply(msg, source);
            backoff = comm::detail::Backoff();
            continue;
        }
        const double now = detail::wall_seconds();
        if (now >= next_watch) {
            watch(nullptr);
            next_watch = now + 0.05;
        }
        backoff.pause();
    }
}

void Controller::on_wait(const std::string& what, double) {
    // Any wait of rank 0 outside the controller's own loops: a collective or a transfer in a
    // local share, the outputs of a call, the shutdown. Only calls still outstanding are checked.
    take_replies();
    watch(&what);
}

bool Controller::take_replies() {
    std::string msg;
    int source = -1;
    bool any = false;
    while (replies_->try_take(msg, source, comm::Deadline::after_seconds(settings_.call_timeout_s))) {
        handle_reply(msg, source);
        any = true;
    }
    return any;
}

void Controller::handle_reply(const std::string& msg, int source) {
    auto r = detail::parse_header<wire::ReplyHeader>(msg, "reply from a worker");
    auto busy = busy_rank_.find(source);
    if (busy == busy_rank_.end() || busy->second != r.seq) {
        throw CommError(fmt::format("unexpected reply from rank {} (seq {})", source, r.seq));
    }
    Call& owner = find_call(r.seq);
    const RoleSpec& ospec = registry_[static_cast<size_t>(owner.role)];
    const MethodSpec& om = ospec.methods[owner.method];
    if (r.stop_signal != 0 && remote_stop_signal_ == 0) {
        remote_stop_signal_ = r.stop_signal;
        remote_stop_rank_ = source;
        RLPT_LOG_WARN("rank {} reports a stop signal ({}); stopping at the next step boundary", source,
                      signal_name(r.stop_signal));
    }
    if (r.status != static_cast<uint8_t>(wire::ReplyStatus::kOk)) {
        std::string text = msg.substr(sizeof(r));
        throw RemoteError(fmt::format("{}.{} failed on rank {} (role {}, step {}): {}", ospec.name, om.name, source,
                                      ospec.name, owner.step, text),
                          source);
    }
    if (r.has_payload) {
        owner.payloads.emplace(source, decode_layout(msg.data() + sizeof(r), msg.size() - sizeof(r)));
    }
    owner.waiting.erase(source);
}

void Controller::watch(const std::string* local_wait) {
    const double now = detail::wall_seconds();
    std::string msg;
    int source = -1;
    while (heartbeats_->try_take(msg, source, comm::Deadline::after_seconds(settings_.call_timeout_s))) {
        auto h = detail::parse_header<wire::HeartbeatHeader>(msg, "heartbeat from a worker");
        Seen& seen = seen_[source];
        seen.at = now;
        seen.seq = h.seq;
        seen.what = msg.substr(sizeof(h));
        seen.waited_s = h.waited_ms / 1000.0;
    }
    for (auto& [seq, owned] : calls_) {
        Call& call = *owned;
        call.drop_sent_inputs();
        if (call.waiting.empty() && call.sends.empty() && !call.local_running) continue;
        const RoleSpec& spec = registry_[static_cast<size_t>(call.role)];
        const std::string what = spec.name + "." + spec.methods[call.method].name;
        if (rlpt::stop_requested() && !stop_noticed_) {
            // Say what is in flight: when the launcher is ending the job (a rank died and
            // mpirun/srun terminates the others) this is the last line naming the method.
            stop_noticed_ = true;
            RLPT_LOG_WARN("{} received while {} (step {}) waits for rank(s) {}; stopping after this call",
                          stop_signal_name(), what, call.step, rank_list(call.waiting));
        }
        if (now - call.started >= timeout_of(call)) throw TimeoutError(describe(call, now, local_wait, true));
        if (now - call.last_warn >= settings_.stall_warn_s) {
            call.last_warn = now;
            RLPT_LOG_WARN("{}", describe(call, now, local_wait, false));
        }
    }
}

std::string Controller::describe(const Call& call, double now, const std::string* local_wait, bool final) const {
    const RoleSpec& spec = registry_[static_cast<size_t>(call.role)];
    const std::string what = spec.name + "." + spec.methods[call.method].name;
    // Outstanding ranks with a recent heartbeat from inside this call are alive and waiting
    // (for the silent ones, in a collective or a transfer); the others stopped answering.
    std::set<int> silent, alive, unsent;
    std::vector<std::string> waits;
    if (call.local_running) {
        waits.push_back(fmt::format("rank {} (this rank) in {}", topo_.world_rank(),
                                    local_wait ? *local_wait : std::string("its own share")));
    }
    for (const auto& kv : call.sends) unsent.insert(kv.first);
    std::set<int> outstanding = call.waiting;
    outstanding.insert(unsent.begin(), unsent.end());
    for (int w : outstanding) {
        auto it = seen_.find(w);
        if (it != seen_.end() && it->second.seq == call.seq && now - it->second.at <= kAliveWindowS) {
            alive.insert(w);
            waits.push_back(fmt::format("rank {} in {} ({:.0f} s)", w, it->second.what, it->second.waited_s));
        } else {
            silent.insert(w);
        }
    }
    const std::set<int>& blamed = silent.empty() ? alive : silent;
    bool sending = false;
    for (int w : blamed) sending = sending || unsent.count(w) != 0;
    const std::string phase = sending ? " (sending them the inputs)" : "";
    std::string who =
        blamed.empty() ? fmt::format("rank {} (this rank)", topo_.world_rank()) : "rank(s) " + rank_list(blamed);
    std::string out;
    if (final) {
        out = fmt::format("{} (step {}): {} did not answer within {:.0f} s (trainer.call_timeout_s){}; ", what,
                          call.step, who, timeout_of(call), phase);
        out += silent.empty() ? "no rank of the call is silent: they wait for each other or for a rank outside it"
                              : "they stopped answering (hung, stopped or dead)";
    } else {
        out = fmt::format("{} (step {}) has waited {:.0f} s for {} to answer{}", what, call.step, now - call.started,
                          who, phase);
    }
    if (!waits.empty()) {
        out += silent.empty() ? "; waiting: " : "; waiting for them: ";
        for (size_t i = 0; i < waits.size(); ++i) out += (i ? ", " : "") + waits[i];
    }
    return out;
}

std::vector<Batch> Controller::collect(Call& call) {
    const RoleSpec& spec = registry_[static_cast<size_t>(call.role)];
    const MethodSpec& m = spec.methods[call.method];
    const comm::RoleLayout& L = topo_.placement().at(spec.name);
    const std::string what = spec.name + "." + m.name;
    comm::Deadline deadline = comm::Deadline::after_seconds(settings_.call_timeout_s);
    MPI_Comm control = topo_.control().get();
    const int me = topo_.world_rank();

    auto output_of = [&](int w) -> Batch {
        if (w == me) return call.local_out;
        auto it = call.payloads.find(w);
        RLPT_CHECK_KIND(CommError, it != call.payloads.end(), "{}: rank {} sent no output", what, w);
        return recv_columns(std::move(it->second), w, wire::kTagReplyData, control, pool_, deadline,
                            fmt::format("{} output from rank {}", what, w));
    };

    std::vector<Batch> outs;
    switch (m.collect) {
        case Collect::kNone: outs.emplace_back(0); break;
        case Collect::kFirst: outs.push_back(output_of(L.world_ranks.front())); break;
        case Collect::kAll:
            for (int w : L.world_ranks) outs.push_back(output_of(w));
            break;
        case Collect::kConcatDpSources: {
            std::vector<int> sources = L.output_sources();
            bool local_source = std::find(sources.begin(), sources.end(), me) != sources.end();
            Batch out;
            if (!local_source) {
                // Straight into the concatenated columns: no extra copy.
                std::vector<std::pair<int, BatchLayout>> shards;
                for (int w : sources) {
                    auto it = call.payloads.find(w);
                    RLPT_CHECK_KIND(CommError, it != call.payloads.end(), "{}: rank {} sent no output", what, w);
                    shards.emplace_back(w, std::move(it->second));
                }
                out = recv_concat(std::move(shards), wire::kTagReplyData, control, pool_, deadline, what + " outputs");
            } else {
                std::vector<Batch> parts;
                for (int w : sources) parts.push_back(output_of(w));
                out = Batch::concat(parts);
            }
            if (call.pad > 0 && out.size() == call.padded_rows) {
                out.unpad(call.pad);
            } else if (call.padded_rows >= 0 && out.size() != 0 && out.size() != call.padded_rows) {
                throw ValueError(
                    fmt::format("{} returned {} rows for {} input rows", what, out.size(), call.padded_rows));
            }
            outs.push_back(std::move(out));
            break;
        }
    }
    for (auto& o : outs) {
        if (m.collect != Collect::kNone) check_schema(o, m.outputs, spec.name, m.name, "output");
    }
    return outs;
}

std::vector<Batch> Controller::wait_all(Pending& p) {
    Call& call = find_call(p.seq);
    // Every pending local share first, in submission order: the awaited call's remote ranks
    // may be in a collective with an earlier call's local share.
    for (auto& kv : calls_) run_local_share(*kv.second);
    receive_replies_until_done(call);
    std::vector<Batch> outs = collect(call);
    for (int w : call.ranks) {
        auto it = busy_rank_.find(w);
        if (it != busy_rank_.end() && it->second == call.seq) busy_rank_.erase(it);
    }
    calls_.erase(p.seq);
    return outs;
}

Batch Controller::wait(Pending& p) {
    Call& call = find_call(p.seq);
    const MethodSpec& m = registry_[static_cast<size_t>(call.role)].methods[call.method];
    RLPT_CHECK_KIND(InternalError, m.collect != Collect::kAll, "{} collects all outputs: use call_all/wait_all",
                    m.name);
    return std::move(wait_all(p).front());
}

bool Controller::stop_requested() const { return rlpt::stop_requested() || remote_stop_signal_ != 0; }

std::string Controller::stop_reason() const {
    if (rlpt::stop_requested()) return fmt::format("{} on rank {}", stop_signal_name(), topo_.world_rank());
    if (remote_stop_signal_ != 0)
        return fmt::format("{} on rank {}", signal_name(remote_stop_signal_), remote_stop_rank_);
    return "";
}

void Controller::shutdown(int exit_code) {
    if (shut_down_) return;
    shut_down_ = true;
    RLPT_CHECK(exit_code >= 0 && exit_code < 256, "shutdown: exit code {} is not in 0..255", exit_code);
    wire::CommandHeader h;
    h.kind = static_cast<uint8_t>(wire::CommandKind::kShutdown);
    h.exit_code = static_cast<uint16_t>(exit_code);
    std::string prefix = detail::header_bytes(h);
    OutgoingBatch sends;
    for (int w = 0; w < topo_.world_size(); ++w) {
        if (w == topo_.world_rank()) continue;
        sends.post_header_only(prefix, w, wire::kTagCommand, topo_.control().get());
    }
    sends.complete(comm::Deadline::after_seconds(60), "workers to take the shutdown command");
}

}  // namespace rlpt::protocol
