#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#include "protocol_common.h"
#include "rlpt/core/log.h"
#include "rlpt/core/signals.h"
#include "rlpt/protocol/runtime.h"

namespace rlpt::protocol {

FaultPlan FaultPlan::parse(const std::string& spec) {
    FaultPlan p;
    if (spec.empty()) return p;
    std::vector<std::string> parts;
    std::stringstream ss(spec);
    for (std::string s; std::getline(ss, s, ':');) parts.push_back(s);
    auto bad = [&] {
        return ConfigError(
            fmt::format("RLPT_FAULT='{}': expected <throw|kill|hang|stop>:<world rank>:<method>[:<step>]", spec));
    };
    if (parts.size() < 3 || parts.size() > 4) throw bad();
    if (parts[0] != "throw" && parts[0] != "kill" && parts[0] != "hang" && parts[0] != "stop") throw bad();
    try {
        p.world_rank = std::stoi(parts[1]);
        if (parts.size() == 4) p.step = std::stoll(parts[3]);
    } catch (const std::exception&) {
        throw bad();
    }
    p.kind = parts[0];
    p.method = parts[2];
    return p;
}

WorkerHost::WorkerHost(const std::vector<RoleSpec>& registry, const ProtocolSettings& settings,
                       const comm::Topology& topo, FaultPlan fault)
    : registry_(registry), settings_(settings), topo_(topo), fault_(std::move(fault)) {
    for (const auto& role : topo_.hosted_roles()) {
        int idx = find_role(registry_, role);
        if (idx < 0) throw InternalError(fmt::format("no dispatch table is registered for role '{}'", role));
        WorkerContext ctx;
        ctx.topology = &topo_;
        ctx.comms = &topo_.role(role);
        ctx.layout = topo_.placement().find(role);
        ctx.role = role;
        ctx.world_rank = topo_.world_rank();
        ctx.shared = &shared_;
        contexts_[idx] = ctx;
    }
    // Roles are created in registry order, so a role may find what an earlier one shared.
    for (auto& [idx, ctx] : contexts_) workers_[idx] = registry_[static_cast<size_t>(idx)].factory(ctx);
}

WorkerHost::~WorkerHost() = default;

bool WorkerHost::hosts(int role_index) const { return workers_.count(role_index) != 0; }

void WorkerHost::maybe_inject_fault(const MethodSpec& m, int64_t step) const {
    if (!fault_.active() || fault_.world_rank != topo_.world_rank() || fault_.method != m.name) return;
    if (fault_.step >= 0 && fault_.step != step) return;
    RLPT_LOG_WARN("injecting fault '{}' in {} at step {} (RLPT_FAULT)", fault_.kind, m.name, step);
    if (fault_.kind == "throw") throw ValueError(fmt::format("injected fault in {} (RLPT_FAULT)", m.name));
    if (fault_.kind == "kill") ::raise(SIGKILL);
    if (fault_.kind == "stop") ::raise(SIGSTOP);  // as `kill -STOP`: the process stays, silent
    if (fault_.kind == "hang") {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
}

Batch WorkerHost::run(int role_index, uint16_t method, const Batch& in, int64_t step) {
    auto it = workers_.find(role_index);
    if (it == workers_.end()) {
        throw InternalError(
            fmt::format("rank {} got a call for role #{} it does not host", topo_.world_rank(), role_index));
    }
    const RoleSpec& spec = registry_[static_cast<size_t>(role_index)];
    if (method >= spec.methods.size()) {
        throw CommError(fmt::format("role '{}' has no method #{} (mixed rlpt binaries?)", spec.name, method));
    }
    const MethodSpec& m = spec.methods[method];
    maybe_inject_fault(m, step);
    WorkerContext& ctx = contexts_.at(role_index);
    ctx.step = step;
    ctx.method = m.name;
    // The one place batches cross between host and device (role_spec.h, "Devices").
    const Batch out = m.handler(*it->second, ctx, m.host_input ? in : in.to(handler_device()));
    return out.to(torch::kCPU);
}

namespace {
bool sends_payload(Collect c, const WorkerContext& ctx) {
    switch (c) {
        case Collect::kConcatDpSources: return ctx.comms->mp_rank == 0;
        case Collect::kFirst: return ctx.comms->role_rank == 0;
        case Collect::kAll: return true;
        case Collect::kNone: return false;
    }
    return false;
}
}  // namespace

void WorkerHost::on_wait(const std::string& what, double waited_s) {
    if (!in_call_.active) return;  // idle between calls: the controller's own work has no bound
    const double now = detail::wall_seconds();
    if (now - in_call_.started > in_call_.abort_after) {
        // The controller ends a stalled call at its deadline; still waiting this long after it
        // means the controller itself stopped answering (or waits in a collective with a rank
        // that did). End the job from here rather than wait forever.
        RLPT_LOG_ERROR("{} (step {}): this rank has waited {:.0f} s in {} and the controller (rank {}) did not end the "
                       "call within trainer.call_timeout_s; it stopped answering (hung, stopped or dead): aborting the "
                       "job",
                       in_call_.method, in_call_.step, waited_s, what, topo_.placement().controller_rank);
        comm::MpiRuntime::abort(kWatchdogExitCode);
    }
    // Heartbeats only from the MPI thread: a wait on autograd's device thread (a GPU backward)
    // sends none; the backstop above still holds there (rlpt/comm/mpi.h, "Threads").
    if (waited_s >= 0.5 && now - last_heartbeat_ >= 1.0 && comm::on_mpi_thread()) send_heartbeat(what, waited_s);
}

void WorkerHost::send_heartbeat(const std::string& what, double waited_s) {
    int done = 1;
    if (!heartbeat_reqs_.empty()) {
        RLPT_MPI_CHECK(
            MPI_Testall(static_cast<int>(heartbeat_reqs_.size()), heartbeat_reqs_.data(), &done, MPI_STATUSES_IGNORE));
    }
    if (!done) return;  // the previous one is still on its way: the controller is busy
    heartbeat_reqs_.clear();
    heartbeat_keep_.clear();
    wire::HeartbeatHeader h;
    h.seq = in_call_.seq;
    h.waited_ms = static_cast<uint32_t>(std::min(waited_s * 1000.0, 4.0e9));
    heartbeat_keep_.push_back(detail::header_bytes(h) + what.substr(0, 200));
    post_envelope(heartbeat_keep_.back(), topo_.placement().controller_rank, wire::kTagHeartbeat, topo_.control().get(),
                  heartbeat_reqs_, heartbeat_keep_);
    last_heartbeat_ = detail::wall_seconds();
}

int WorkerHost::serve() {
    const int controller = topo_.placement().controller_rank;
    MPI_Comm control = topo_.control().get();
    Mailbox commands(control, wire::kTagCommand, {controller});
    struct Observe {
        comm::WaitObserver* previous;
        explicit Observe(comm::WaitObserver* o) : previous(comm::set_wait_observer(o)) {}
        ~Observe() { comm::set_wait_observer(previous); }
    } observe(this);
    std::string msg;
    for (;;) {
        int source = controller;
        comm::poll_until([&] { return commands.try_take(msg, source, comm::Deadline::never()); },
                         comm::Deadline::never(), "the next command from the controller");

        auto h = detail::parse_header<wire::CommandHeader>(msg, "command from the controller");
        if (h.kind == static_cast<uint8_t>(wire::CommandKind::kShutdown)) {
            // A heartbeat still on its way is small (sent eagerly); do not leave it pending.
            for (auto& r : heartbeat_reqs_) {
                int done = 0;
                RLPT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
                if (!done) MPI_Request_free(&r);  // completes in the background
            }
            return h.exit_code;
        }
        if (h.kind != static_cast<uint8_t>(wire::CommandKind::kCall)) {
            throw CommError(fmt::format("unknown command kind {} from the controller", h.kind));
        }
        if (h.role >= registry_.size() || !hosts(h.role)) {
            throw CommError(
                fmt::format("command for role #{} which rank {} does not host", h.role, topo_.world_rank()));
        }
        const RoleSpec& spec = registry_[h.role];
        if (h.method >= spec.methods.size()) {
            throw CommError(fmt::format("command for {} method #{} which does not exist", spec.name, h.method));
        }
        const MethodSpec& m = spec.methods[h.method];
        const WorkerContext& ctx = contexts_.at(h.role);
        const double timeout =
            m.timeout_s > 0 ? std::min(m.timeout_s, settings_.call_timeout_s) : settings_.call_timeout_s;
        in_call_ = InCall{
            true, h.seq, h.step, spec.name + "." + m.name, detail::wall_seconds(), timeout + worker_grace_s(timeout)};

        wire::ReplyHeader reply;
        reply.role = h.role;
        reply.method = h.method;
        reply.world_rank = topo_.world_rank();
        reply.seq = h.seq;
        // A stop signal that reached only this rank still stops the job: the controller reads
        // this at its next step boundary (rlpt/core/signals.h).
        reply.stop_signal = static_cast<uint8_t>(stop_signal());
        Batch out;
        std::string error;
        try {
            BatchLayout layout = decode_layout(msg.data() + sizeof(h), msg.size() - sizeof(h));
            Batch in = recv_columns(std::move(layout), controller, wire::kTagCommandData, control, pool_,
                                    comm::Deadline::after_seconds(settings_.call_timeout_s),
                                    fmt::format("{}.{} input", spec.name, m.name));
            out = run(h.role, h.method, in, h.step);
        } catch (const std::exception& e) {
            error = e.what();
        }
        in_call_.active = false;
        OutgoingBatch send;
        if (!error.empty()) {
            reply.status = static_cast<uint8_t>(wire::ReplyStatus::kError);
            send.post_header_only(detail::header_bytes(reply) + error, controller, wire::kTagReply, control);
        } else if (sends_payload(m.collect, ctx)) {
            reply.has_payload = 1;
            send.post(detail::header_bytes(reply), out, controller, wire::kTagReply, wire::kTagReplyData, control);
        } else {
            send.post_header_only(detail::header_bytes(reply), controller, wire::kTagReply, control);
        }
        send.complete(comm::Deadline::after_seconds(settings_.call_timeout_s),
                      fmt::format("the controller to take the reply of {}.{}", spec.name, m.name));
    }
}

}  // namespace rlpt::protocol
