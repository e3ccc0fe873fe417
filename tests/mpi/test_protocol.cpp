// Multi-rank tests of the controller-worker protocol with test dispatch tables registered
// under the real role names (the registry is per program; these tables are the tests').
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <exception>
#include <thread>

#include "mpi_thread_probe.h"
#include "rlpt/comm/topology.h"
#include "rlpt/config/config.h"
#include "rlpt/core/log.h"
#include "rlpt/protocol/runtime.h"

using namespace rlpt;
using namespace rlpt::protocol;

namespace {

enum class TestMethod : uint16_t {
    kEcho,
    kRoleSum,
    kWhoAll,
    kEach,
    kNothing,
    kFail,
    kMetrics,
    kSleep,
    kWaitOffThread,
    kCount
};

class TestWorker : public RoleWorker {};

Batch echo(RoleWorker&, WorkerContext& ctx, const Batch& in) {
    Batch out(in.size());
    out.set("x2", in.at("x") * 2);
    out.set("rank", torch::full({in.size()}, ctx.world_rank, torch::kInt64));
    if (in.has_strings("s")) out.set_strings("s", in.strings("s"));
    return out;
}

Batch role_sum(RoleWorker&, WorkerContext& ctx, const Batch& in) {
    double v = ctx.comms->role.allreduce_sum(static_cast<double>(ctx.comms->role_rank) + in.meta_double("add"));
    Batch out(1);
    out.set("sum", torch::full({1}, v, torch::kFloat64));
    return out;
}

Batch who(RoleWorker&, WorkerContext& ctx, const Batch&) {
    Batch out(1);
    out.set_ints("world_rank", {ctx.world_rank});
    return out;
}

Batch each(RoleWorker&, WorkerContext&, const Batch& in) { return in; }
Batch nothing(RoleWorker&, WorkerContext&, const Batch&) { return Batch(0); }

Batch fail(RoleWorker&, WorkerContext& ctx, const Batch&) {
    if (ctx.comms->role_rank == ctx.layout->size() - 1) throw ValueError("deliberate failure in a test handler");
    return Batch(0);
}

Batch metrics(RoleWorker&, WorkerContext& ctx, const Batch& in) {
    Batch out(0);
    out.add_metric("test/rows", static_cast<double>(in.size()), Reduce::kSum);
    out.add_metric("test/max_rank", ctx.world_rank, Reduce::kMax);
    out.add_metric("test/mean", 1.0, Reduce::kMean);
    return out;
}

Batch sleep_ms(RoleWorker&, WorkerContext&, const Batch& in) {
    std::this_thread::sleep_for(std::chrono::milliseconds(in.meta_int("ms")));
    return Batch(0);
}

// Waits 1.6 s on a helper thread (as autograd's device thread waits in a GPU backward's
// collectives), then 1.6 s on the MPI thread. Returns the MPI calls made off the MPI thread during
// the first (the worker's heartbeats must not be among them) and the sends on the MPI thread during
// the second (its heartbeats: the observer is live).
Batch wait_off_thread(RoleWorker&, WorkerContext&, const Batch&) {
    auto wait_for = [](double s, const std::string& what) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
        comm::poll_until([&] { return std::chrono::steady_clock::now() >= until; }, comm::Deadline::never(), what);
    };
    const int64_t off_before = test::mpi_calls_off_the_mpi_thread();
    std::exception_ptr error;
    std::thread helper([&] {
        try {
            wait_for(1.6, "a wait on a helper thread");
        } catch (...) {
            error = std::current_exception();
        }
    });
    helper.join();
    if (error) std::rethrow_exception(error);
    const int64_t off = test::mpi_calls_off_the_mpi_thread() - off_before;
    const int64_t sends_before = test::mpi_sends_on_the_mpi_thread();
    wait_for(1.6, "a wait on the MPI thread");
    Batch out(1);
    out.set_ints("off_thread_calls", {off});
    out.set_ints("heartbeat_sends", {test::mpi_sends_on_the_mpi_thread() - sends_before});
    return out;
}

int sources_max(const comm::RoleLayout& L) {
    auto s = L.output_sources();
    return *std::max_element(s.begin(), s.end());
}

std::unique_ptr<RoleWorker> make(WorkerContext&) { return std::make_unique<TestWorker>(); }

RoleSpec test_spec(const std::string& name) {
    RoleSpec s;
    s.name = name;
    s.method_count = static_cast<uint16_t>(TestMethod::kCount);
    s.factory = make;
    using protocol::method;
    using protocol::tensors;
    s.methods = {
        method(TestMethod::kEcho, "echo", echo)
            .split_over_dp()
            .takes(tensors("x"))
            .concat_outputs(tensors("x2", "rank")),
        method(TestMethod::kRoleSum, "role_sum", role_sum)
            .takes({protocol::meta_field("add")})
            .first_output(tensors("sum")),
        method(TestMethod::kWhoAll, "who", who).every_output({protocol::int_field("world_rank")}),
        method(TestMethod::kEach, "each", each).one_batch_per_rank().takes(tensors("v")).every_output(tensors("v")),
        method(TestMethod::kNothing, "nothing", nothing),
        method(TestMethod::kFail, "fail", fail),
        method(TestMethod::kMetrics, "metrics", metrics)
            .split_over_dp()
            .unpadded()
            .takes(tensors("x"))
            .concat_outputs({}),
        method(TestMethod::kSleep, "sleep", sleep_ms).takes({protocol::meta_field("ms")}),
        method(TestMethod::kWaitOffThread, "wait_off_thread", wait_off_thread)
            .every_output({protocol::int_field("off_thread_calls"), protocol::int_field("heartbeat_sends")}),
    };
    return s;
}

std::vector<RoleSpec> test_registry() { return {test_spec("actor"), test_spec("rollout"), test_spec("critic")}; }

std::vector<std::string> role_names(const std::vector<RoleSpec>& registry) {
    std::vector<std::string> names;
    for (const auto& spec : registry) names.push_back(spec.name);
    return names;
}

// Layouts exercised at every world size: a single group, and an uneven two-group layout
// (actor+rollout colocated on most ranks, critic on the rest), with and without rank 0
// hosting roles, and with model-parallel blocks where the size allows.
std::vector<std::vector<std::string>> layouts(int world) {
    std::vector<std::vector<std::string>> out;
    out.push_back({"placement.groups=[{roles: [actor, rollout], ranks: auto}]"});
    out.push_back(
        {"placement.groups=[{roles: [actor, rollout], ranks: auto}]", "placement.controller_hosts_roles=true"});
    if (world >= 3) {
        out.push_back({fmt::format("placement.groups=[{{roles: [actor, rollout], ranks: auto}}, {{roles: [critic], "
                                   "ranks: {}}}]",
                                   (world - 1) / 3 > 0 ? (world - 1) / 3 : 1)});
    }
    if (world >= 5) {
        out.push_back({"placement.groups=[{roles: [actor], ranks: 2, model_parallel_size: 2}, {roles: [rollout, "
                       "critic], ranks: auto}]"});
    }
    return out;
}

struct Env {
    Config config;
    comm::Topology topo;
};

Env make_env(const std::vector<std::string>& overrides) {
    Config c = config_from_yaml("", "test", overrides);
    auto world = comm::Communicator::world();
    auto nodes = comm::detect_node_labels(world, "");
    auto placement = comm::compute_placement(c.placement, world.size(), nodes, role_names(test_registry()), {});
    return Env{c, comm::Topology::build(world, std::move(placement))};
}

// Runs `drive` on the controller while every other rank serves.
template <typename Drive>
void run(const std::vector<std::string>& overrides, Drive&& drive) {
    auto registry = test_registry();
    validate_registry(registry);
    Env env = make_env(overrides);
    const ProtocolSettings settings{env.config.trainer.call_timeout_s, env.config.trainer.stall_warn_s};
    WorkerHost host(registry, settings, env.topo);
    if (env.topo.is_controller()) {
        Controller ctl(registry, settings, env.topo, &host);
        try {
            drive(ctl, env);
        } catch (const std::exception& e) {
            // Keep the workers answerable: report and fall through to shutdown.
            ADD_FAILURE() << "controller threw: " << e.what();
        }
        ctl.shutdown();
    } else {
        host.serve();
    }
}

}  // namespace

template <>
struct rlpt::protocol::RoleOf<TestMethod> {
    static constexpr const char* kName = "actor";
};

TEST(Protocol, EveryDispatchModeOnEveryLayout) {
    int world = comm::Communicator::world().size();
    for (const auto& ov : layouts(world)) {
        SCOPED_TRACE(ov.front());
        run(ov, [&](Controller& ctl, Env& env) {
            const auto& L = env.topo.placement().at("actor");
            // dp_split + concat, with padding (rows not a multiple of dp).
            for (int64_t rows : {int64_t(0), int64_t(1), int64_t(7), int64_t(64)}) {
                if (rows == 0) continue;
                Batch in(rows);
                in.set("x", torch::arange(rows, torch::kFloat32).view({rows, 1}).repeat({1, 3}));
                std::vector<std::string> s;
                for (int64_t i = 0; i < rows; ++i) s.push_back(std::string("s\0", 2) + std::to_string(i));
                in.set_strings("s", s);
                Batch out = ctl.call(TestMethod::kEcho, in);
                ASSERT_EQ(out.size(), rows);
                EXPECT_TRUE(torch::equal(out.at("x2"), in.at("x") * 2));
                EXPECT_EQ(out.strings("s"), s);
                // Rows come back from output sources only, in dp order.
                auto ranks = out.at("rank");
                auto sources = L.output_sources();
                int64_t per = (rows + L.dp_size() - 1) / L.dp_size();
                for (int64_t i = 0; i < rows; ++i)
                    EXPECT_EQ(ranks[i].item<int64_t>(), sources[static_cast<size_t>(i / per)]) << "row " << i;
            }
            // A layout far over the 8 KiB envelope (long strings) takes the long-message path.
            {
                Batch big(4);
                big.set("x", torch::ones({4, 2}));
                std::vector<std::string> s(4, std::string(50000, 'q'));
                s[2] = std::string(70000, '\0');
                big.set_strings("s", s);
                Batch out = ctl.call(TestMethod::kEcho, big);
                EXPECT_EQ(out.strings("s"), s);
            }
            // one_to_all + first, collective inside the role communicator.
            Batch in(0);
            in.set_meta("add", 1.0);
            Batch out = ctl.call(TestMethod::kRoleSum, in);
            int n = L.size();
            EXPECT_DOUBLE_EQ(out.at("sum")[0].item<double>(), n * (n - 1) / 2.0 + n);
            // one_to_all + all.
            Controller::Pending p = ctl.submit(TestMethod::kWhoAll, Batch(0));
            auto all = ctl.wait_all(p);
            ASSERT_EQ(static_cast<int>(all.size()), n);
            for (int r = 0; r < n; ++r)
                EXPECT_EQ(all[static_cast<size_t>(r)].ints("world_rank")[0], L.world_ranks[static_cast<size_t>(r)]);
            // all_to_all.
            std::vector<Batch> per_rank;
            for (int r = 0; r < n; ++r) {
                Batch b(1);
                b.set("v", torch::full({1}, r * 10, torch::kInt32));
                per_rank.push_back(b);
            }
            Controller::Pending pe =
                ctl.submit_raw(ctl.role_index("actor"), static_cast<uint16_t>(TestMethod::kEach), nullptr, &per_rank);
            auto back = ctl.wait_all(pe);
            for (int r = 0; r < n; ++r) EXPECT_EQ(back[static_cast<size_t>(r)].at("v")[0].item<int>(), r * 10);
            // none.
            EXPECT_EQ(ctl.call(TestMethod::kNothing, Batch(0)).size(), 0);
            // metrics merge over dp sources by their rules; no rows, no unpad trouble.
            Batch mx(10);
            mx.set("x", torch::zeros({10, 2}));
            if (10 % L.dp_size() == 0) {
                Batch m = ctl.call(TestMethod::kMetrics, mx);
                auto red = reduce_metrics(m.metrics());
                EXPECT_DOUBLE_EQ(red.at("test/rows"), 10.0);
                EXPECT_DOUBLE_EQ(red.at("test/max_rank"), static_cast<double>(sources_max(L)));
                EXPECT_DOUBLE_EQ(red.at("test/mean"), 1.0);
            } else {
                EXPECT_THROW(ctl.call(TestMethod::kMetrics, mx), ValueError);  // pad_to_dp=false
            }
        });
    }
}

TEST(Protocol, ConcurrentCallsOnDisjointRolesAndMisuse) {
    int world = comm::Communicator::world().size();
    if (world < 3) GTEST_SKIP() << "needs separate actor and critic ranks";
    run({"placement.groups=[{roles: [actor, rollout], ranks: auto}, {roles: [critic], ranks: 1}]"}, [&](Controller& ctl,
                                                                                                        Env&) {
        Batch in(4);
        in.set("x", torch::ones({4, 2}));
        Controller::Pending a = ctl.submit(TestMethod::kEcho, in);
        Controller::Pending c =
            ctl.submit_raw(ctl.role_index("critic"), static_cast<uint16_t>(TestMethod::kEcho), &in, nullptr);
        // The critic's reply may arrive first; each wait gets its own call's rows.
        Batch oc = ctl.wait(c);
        Batch oa = ctl.wait(a);
        EXPECT_EQ(oa.size(), 4);
        EXPECT_EQ(oc.size(), 4);
        EXPECT_EQ(oc.at("rank")[0].item<int64_t>(), world - 1);
        // A second call on ranks that are still busy is refused, not deadlocked.
        Controller::Pending b = ctl.submit(TestMethod::kNothing, Batch(0));
        EXPECT_THROW(ctl.submit(TestMethod::kNothing, Batch(0)), InternalError);
        ctl.wait(b);
        // Inputs are checked against the schema before anything is sent.
        Batch missing(2);
        missing.set("y", torch::ones({2}));
        try {
            ctl.call(TestMethod::kEcho, missing);
            ADD_FAILURE() << "expected a schema error";
        } catch (const ValueError& e) {
            EXPECT_NE(std::string(e.what()).find("actor.echo: input is missing 'x'"), std::string::npos) << e.what();
        }
    });
}

TEST(Protocol, BadLayoutRefusedOnEveryRankWithOneMessage) {
    auto world = comm::Communicator::world();
    std::string msg;
    try {
        make_env({fmt::format("placement.groups=[{{roles: [actor], ranks: {}}}]", world.size())});
    } catch (const ConfigError& e) {
        msg = e.message();
    }
    auto all = world.allgather_strings(msg);
    for (const auto& m : all) {
        EXPECT_FALSE(m.empty()) << "a rank accepted the layout";
        EXPECT_EQ(m, all.front());
    }
    EXPECT_NE(all.front().find("only " + std::to_string(world.size() - 1) + " are available"), std::string::npos)
        << all.front();
}

TEST(Protocol, TableMismatchIsCaught) {
    auto reg = test_registry();
    reg[0].methods.pop_back();
    EXPECT_THROW(validate_registry(reg), InternalError);
    auto reg2 = test_registry();
    reg2[1].methods[3].id = 5;
    EXPECT_THROW(validate_registry(reg2), InternalError);
    auto reg3 = test_registry();
    reg3[0].methods[0].inputs.clear();
    EXPECT_THROW(validate_registry(reg3), InternalError);  // dp_split without a row input
    EXPECT_NE(registry_hash(test_registry()), registry_hash(reg));
}

// A worker waiting on a thread other than the MPI thread (autograd's device thread in a GPU
// backward) sends no heartbeat from there: no MPI call at all off the MPI thread.
TEST(ProtocolThreads, WorkersSendHeartbeatsOnlyFromTheMpiThread) {
    run({"placement.groups=[{roles: [actor, rollout], ranks: auto}]"}, [&](Controller& ctl, Env& env) {
        const auto& L = env.topo.placement().at("actor");
        Controller::Pending p = ctl.submit(TestMethod::kWaitOffThread, Batch(0));
        auto all = ctl.wait_all(p);
        ASSERT_EQ(static_cast<int>(all.size()), L.size());
        for (size_t r = 0; r < all.size(); ++r) {
            EXPECT_EQ(all[r].ints("off_thread_calls")[0], 0)
                << "MPI calls off the MPI thread on rank " << L.world_ranks[r];
            EXPECT_GE(all[r].ints("heartbeat_sends")[0], 1)
                << "no heartbeat on the MPI thread of rank " << L.world_ranks[r];
        }
    });
}

// Not a normal test: the worker error must end the whole job. Registered through
// tests/mpi/expect_failure.sh, which checks the exit code, the message and that no
// process is left behind.
TEST(ProtocolAbort, WorkerErrorAbortsTheJob) {
    run({"placement.groups=[{roles: [actor, rollout], ranks: auto}]"}, [&](Controller& ctl, Env&) {
        ctl.set_step(12);
        try {
            ctl.call(TestMethod::kFail, Batch(0));
        } catch (const Error& e) {
            RLPT_LOG_ERROR("{}", e.what());
            comm::MpiRuntime::abort(3);
        }
        ADD_FAILURE() << "the failing call returned";
    });
}

TEST(ProtocolAbort, SilentWorkerTimesOut) {
    run({"placement.groups=[{roles: [actor, rollout], ranks: auto}]", "trainer.call_timeout_s=2",
         "trainer.stall_warn_s=1"},
        [&](Controller& ctl, Env&) {
            Batch in(0);
            in.set_meta("ms", int64_t(600000));
            try {
                ctl.call(TestMethod::kSleep, in);
            } catch (const Error& e) {
                RLPT_LOG_ERROR("{}", e.what());
                comm::MpiRuntime::abort(4);
            }
            ADD_FAILURE() << "the sleeping call returned";
        });
}
