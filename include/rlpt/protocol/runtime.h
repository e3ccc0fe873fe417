#pragma once
// The controller-worker runtime (DESIGN §2).
//
// Every rank builds one WorkerHost (the role objects of the roles it hosts). Ranks other
// than the controller then call WorkerHost::serve(): receive a command, run the method on
// their shard (SPMD inside the role communicator), reply, repeat until shutdown. Rank 0
// builds a Controller and drives the algorithm with typed calls:
//
//     Batch out = controller.call(roles::ActorMethod::kComputeLogProb, batch);
//
// call() pads/splits/sends per the method's table row, runs the local share itself when
// rank 0 hosts the role (in wait(), so several submitted calls that form one collective
// together do not deadlock), waits (polling with back-off, so a waiting controller does not
// spin a core), collects from the output ranks only and unpads. An error on any worker comes
// back as a RemoteError naming rank, role, method and step; the caller (main) prints it and
// aborts the job. A stop signal (rlpt/core/signals.h) arriving during a wait is logged once
// with the call in flight; the call still completes.
//
// Settings (ProtocolSettings): the two timeouts below, resolved from the run's config by the app
// (app/role_settings.h). Each role's own settings come with its kInit: the app gives them to the
// Controller once (set_role_settings), which adds them to the role's kInit call.
//
// Watchdog (bounded failure on every path). A call's deadline is trainer.call_timeout_s (or
// the method's timeout_s when that is shorter) from its submission. The Controller is rank 0's
// comm::WaitObserver, so it watches every wait of rank 0 — its own wait for replies, sending
// the inputs, and any collective its local share of a call blocks in (the gradient
// all-reduce, an error agreement) — and, in all of them: reads the workers' replies (an error
// reply ends the job at once, even while rank 0 waits in a collective with the failed rank),
// logs a stall warning every trainer.stall_warn_s, and at the deadline throws TimeoutError
// naming the rank(s) that stopped answering, the phase (sending the inputs, waiting for
// replies) and the ranks that were waiting for them in a collective. Workers tell the two
// apart: a worker waiting inside a call (a collective, its inputs) sends a heartbeat with what
// it waits for about every second (from the MPI thread only: waits on autograd's device thread
// during a GPU backward send none, rlpt/comm/mpi.h "Threads"); a rank with neither a reply nor a
// recent heartbeat is the one that stopped. A worker whose wait inside a call outlives the call's deadline plus a
// grace (worker_grace_s) ends the job itself (MPI_Abort, kWatchdogExitCode): the controller
// itself is stopped then. Not watched: a worker idle between calls (the controller's own work
// between calls has no bound) and start-up before the Controller exists.
//
// Threading: one MPI thread per rank (rlpt/comm/mpi.h, "Threads"); neither class is thread-safe.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/batch_transport.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::protocol {

// Exit code of a job ended by the watchdog (app::kExitTimeout).
constexpr int kWatchdogExitCode = 4;
// How long past a call's deadline a worker still waits before ending the job itself (the
// controller ends it at the deadline unless the controller is the rank that stopped).
inline double worker_grace_s(double call_timeout_s) { return std::max(5.0, 0.25 * call_timeout_s); }

// What the protocol reads of the run's config: its two timeouts (seconds, > 0).
struct ProtocolSettings {
    double call_timeout_s = 0;  // trainer.call_timeout_s: a call's deadline (and every wait inside it)
    double stall_warn_s = 0;    // trainer.stall_warn_s: a stall warning after this long
};

// A worker reported an error (what() names rank, role, method, step and the worker's message).
struct RemoteError : Error {
    RemoteError(std::string m, int rank) : Error(ErrorKind::kComm, std::move(m)), world_rank(rank) {}
    int world_rank;
};

// Fault injection for the fault tests (RLPT_FAULT="<throw|kill|hang|stop>:<world rank>:<method>[:<step>]"):
// throw an error, SIGKILL, sleep forever, or SIGSTOP this process when the method starts.
struct FaultPlan {
    std::string kind;  // empty: none
    int world_rank = -1;
    std::string method;
    int64_t step = -1;                                // -1: any step
    static FaultPlan parse(const std::string& spec);  // ConfigError on malformed specs
    bool active() const { return !kind.empty(); }
};

class WorkerHost : public comm::WaitObserver {
  public:
    // Creates the role objects (factories are cheap; models load in an init method).
    WorkerHost(const std::vector<RoleSpec>& registry, const ProtocolSettings& settings, const comm::Topology& topo,
               FaultPlan fault = {});
    ~WorkerHost();
    WorkerHost(const WorkerHost&) = delete;
    WorkerHost& operator=(const WorkerHost&) = delete;

    bool hosts(int role_index) const;
    // Runs one method on this rank (fault injection included). Throws what the handler throws.
    Batch run(int role_index, uint16_t method, const Batch& in, int64_t step);
    // The worker loop; returns after the controller's shutdown command, with the exit code the
    // controller chose (0, or 75 after a stop signal). Every reply carries this process's stop
    // signal (rlpt/core/signals.h) so the controller learns of a signal that reached only a worker.
    int serve();
    ProcessShared& shared() { return shared_; }
    comm::BufferPool& pool() { return pool_; }
    // While serve() runs a call: heartbeats to the controller and the worker's own backstop.
    void on_wait(const std::string& what, double waited_s) override;

  private:
    void maybe_inject_fault(const MethodSpec& m, int64_t step) const;
    void send_heartbeat(const std::string& what, double waited_s);
    struct InCall {
        bool active = false;
        uint64_t seq = 0;
        int64_t step = -1;
        std::string method;      // "actor.update_actor"
        double started = 0;      // wall seconds (monotonic) when the command arrived
        double abort_after = 0;  // seconds: the call's deadline + kWorkerGrace
    };
    InCall in_call_;
    double last_heartbeat_ = 0;
    std::vector<MPI_Request> heartbeat_reqs_;
    std::deque<std::string> heartbeat_keep_;
    const std::vector<RoleSpec>& registry_;
    const ProtocolSettings settings_;
    const comm::Topology& topo_;
    FaultPlan fault_;
    ProcessShared shared_;
    comm::BufferPool pool_;
    std::map<int, std::unique_ptr<RoleWorker>> workers_;
    std::map<int, WorkerContext> contexts_;
};

class Controller : public comm::WaitObserver {
  public:
    // `local` is this rank's WorkerHost when the controller also hosts roles (else nullptr).
    Controller(const std::vector<RoleSpec>& registry, const ProtocolSettings& settings, const comm::Topology& topo,
               WorkerHost* local);
    ~Controller();
    Controller(const Controller&) = delete;
    Controller& operator=(const Controller&) = delete;

    struct Pending {
        uint64_t seq = 0;
    };

    // The settings of `role` (its ArgsOf<kInit>'s `settings`, encoded with encode_args under
    // "settings."), resolved once by the run plan: added to every call of the role's method whose
    // row says receives_settings() (its kInit), so the caller passes only the run's InitArgs.
    // Calling such a method before its role's settings were given is an InternalError.
    void set_role_settings(const std::string& role, Batch settings);

    // The training step stamped on every following call (for error messages).
    void set_step(int64_t step) { step_ = step; }
    int64_t step() const { return step_; }

    template <typename M>
    Batch call(M method, const Batch& in) {
        Pending p = submit(method, in);
        return wait(p);
    }
    // A call with its method's typed arguments (ArgsOf<M>, args.h): ctl.call<ActorMethod::kSftStep>(batch, args).
    template <auto M>
    Batch call(Batch in, const ArgsOfT<M>& args) {
        return call(M, with_args(std::move(in), args));
    }
    template <auto M>
    std::vector<Batch> call_all(Batch in, const ArgsOfT<M>& args) {
        return call_all(M, with_args(std::move(in), args));
    }
    // kAll methods: one output per role rank, in role-rank order.
    template <typename M>
    std::vector<Batch> call_all(M method, const Batch& in) {
        Pending p = submit(method, in);
        return wait_all(p);
    }
    // kAllToAll methods: one input per role rank.
    template <typename M>
    Batch call_each(M method, const std::vector<Batch>& per_rank) {
        Pending p = submit_raw(role_index<M>(), static_cast<uint16_t>(method), nullptr, &per_rank);
        return wait(p);
    }
    // Starts a call and returns at once; wait() collects it. Calls in flight at the same time
    // must not share ranks (e.g. an actor update and a critic update on separate ranks).
    template <typename M>
    Pending submit(M method, const Batch& in) {
        return submit_raw(role_index<M>(), static_cast<uint16_t>(method), &in, nullptr);
    }
    template <auto M>
    Pending submit(Batch in, const ArgsOfT<M>& args) {
        return submit(M, with_args(std::move(in), args));
    }
    Batch wait(Pending& p);
    std::vector<Batch> wait_all(Pending& p);

    // Untyped access (tests, tools).
    Pending submit_raw(int role_index, uint16_t method, const Batch* in, const std::vector<Batch>* per_rank);
    int role_index(const std::string& role) const;
    bool has_role(const std::string& role) const;
    const comm::RoleLayout& layout(const std::string& role) const;
    int dp_size(const std::string& role) const { return layout(role).dp_size(); }

    // Stop requests (rlpt/core/signals.h): true once this process got SIGTERM/SIGUSR1 or any
    // worker's reply said its process did. Trainers poll it at step boundaries; a worker's
    // signal is seen with its next reply (every step calls every role, so within one step).
    bool stop_requested() const;
    // "SIGUSR1 on rank 0", "SIGTERM on rank 3" (the first one seen), or "" when none.
    std::string stop_reason() const;

    // Sends shutdown to every worker rank; they leave serve() returning `exit_code`.
    // Idempotent; the destructor calls it with 0.
    void shutdown(int exit_code = 0);

    // The watchdog (see the top of this file): every wait of rank 0 lands here.
    void on_wait(const std::string& what, double waited_s) override;

  private:
    template <typename M>
    int role_index() const {
        return role_index(RoleOf<M>::kName);
    }
    struct Call;
    void run_local_share(Call& call);
    void receive_replies_until_done(Call& call);
    Call& find_call(uint64_t seq);
    std::vector<Batch> collect(Call& call);
    double timeout_of(const Call& call) const;
    // Takes every reply that has arrived (throws RemoteError for an error reply); true if any.
    bool take_replies();
    void handle_reply(const std::string& msg, int source);
    // Heartbeats, input sends, stall warnings and deadlines of every call in flight.
    // `local_wait`: what rank 0 itself waits for inside a local share (nullptr: the replies).
    void watch(const std::string* local_wait);
    std::string describe(const Call& call, double now, const std::string* local_wait, bool final) const;

    const std::vector<RoleSpec>& registry_;
    const ProtocolSettings settings_;
    const comm::Topology& topo_;
    WorkerHost* local_;
    std::map<int, Batch> role_settings_;  // role index -> its settings (set_role_settings)
    comm::BufferPool pool_;
    std::unique_ptr<Mailbox> replies_;  // receives posted in advance, one per worker rank
    int64_t step_ = -1;
    uint64_t next_seq_ = 1;
    std::map<uint64_t, std::unique_ptr<Call>> calls_;
    std::map<int, uint64_t> busy_rank_;  // world rank -> seq of the call it is in
    std::unique_ptr<Mailbox> heartbeats_;
    struct Seen {  // the last heartbeat of a worker rank
        double at = -1;
        uint64_t seq = 0;
        std::string what;
        double waited_s = 0;
    };
    std::map<int, Seen> seen_;
    comm::WaitObserver* previous_observer_ = nullptr;
    bool shut_down_ = false;
    bool stop_noticed_ = false;   // a SIGTERM/SIGUSR1 during a wait has been logged
    int remote_stop_signal_ = 0;  // first stop signal a worker reported, and its rank
    int remote_stop_rank_ = -1;
};

}  // namespace rlpt::protocol
