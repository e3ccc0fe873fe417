// Typed call arguments (rlpt/protocol/args.h): one field list gives encode, decode and the
// schema a table row declares; a missing or mistyped field names the method and the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "rlpt/app/registry.h"
#include "rlpt/protocol/args.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "rlpt/roles/rollout.h"

namespace rlpt {
namespace {

using protocol::args_schema;
using protocol::decode_args;
using protocol::encode_args;

TEST(ProtocolArgs, EveryFieldRoundTripsAndListsStayLists) {
    roles::GenerateArgs a;
    a.temperature = 0.7;
    a.top_p = 0.9;
    a.top_k = 5;
    a.greedy = true;
    a.max_new_tokens = 12;
    a.eos_id = 3;
    a.pad_id = 1;
    a.stop_ids = {3, 8, 9};
    a.seed = 42;
    a.stream = (int64_t(1) << 40) + 2;
    Batch b(0);
    encode_args(a, b);
    EXPECT_EQ(b.meta_ints("stop_ids"), (std::vector<int64_t>{3, 8, 9}));  // a list, not "3,8,9"
    auto d = decode_args<roles::GenerateArgs>(b, "rollout.generate");
    EXPECT_EQ(d.temperature, 0.7);
    EXPECT_EQ(d.top_p, 0.9);
    EXPECT_EQ(d.top_k, 5);
    EXPECT_TRUE(d.greedy);
    EXPECT_EQ(d.max_new_tokens, 12);
    EXPECT_EQ(d.eos_id, 3);
    EXPECT_EQ(d.pad_id, 1);
    EXPECT_EQ(d.stop_ids, a.stop_ids);
    EXPECT_EQ(d.seed, 42);
    EXPECT_EQ(d.stream, a.stream);
}

// Lists of strings and of structs travel as "<field>.size" and one entry per element; the schema
// declares the size, and a missing element is an error naming it.
TEST(ProtocolArgs, ListsOfStringsAndOfStructsRoundTrip) {
    roles::GenerateArgs a;
    a.stop = {"</answer>", "", "\n\n"};
    rollout::GeneratorArgs g;
    g.stages.resize(2);
    g.stages[0].stop = {"x"};
    g.stages[0].append_ids = {4, 5};
    g.stages[1].generator = "beam_search";
    g.stages[1].max_tokens = 3;
    Batch b(0);
    encode_args(a, b);
    encode_args(g, b);
    EXPECT_EQ(b.meta_int("stop.size"), 3);
    EXPECT_EQ(b.meta_int("stages.size"), 2);
    EXPECT_EQ(decode_args<roles::GenerateArgs>(b, "t").stop, a.stop);
    const auto d = decode_args<rollout::GeneratorArgs>(b, "t");
    ASSERT_EQ(d.stages.size(), 2u);
    EXPECT_EQ(d.stages[0].stop, (std::vector<std::string>{"x"}));
    EXPECT_EQ(d.stages[0].append_ids, (std::vector<int64_t>{4, 5}));
    EXPECT_TRUE(d.stages[1].stop.empty());
    EXPECT_EQ(d.stages[1].generator, "beam_search");
    EXPECT_EQ(d.stages[1].max_tokens, 3);
    const auto schema = args_schema<roles::GenerateArgs>();
    EXPECT_TRUE(std::any_of(schema.begin(), schema.end(), [](const auto& f) { return f.name == "stop.size"; }));

    Batch without(0);
    for (const auto& [k, v] : b.meta())
        if (k != "stages.1.max_tokens") without.set_meta(k, v);
    try {
        decode_args<rollout::GeneratorArgs>(without, "rollout.init");
        FAIL() << "decoded without stages.1.max_tokens";
    } catch (const ValueError& e) {
        EXPECT_NE(e.message().find("stages.1.max_tokens"), std::string::npos) << e.message();
    }
}

TEST(ProtocolArgs, MissingFieldIsAnErrorNamingMethodAndField) {
    Batch b(0);
    encode_args(roles::ActorUpdateArgs{1.0, 2, 8.0}, b);
    auto meta = b.meta();
    Batch without(0);
    for (const auto& [k, v] : meta)
        if (k != "num_mini_batches") without.set_meta(k, v);
    try {
        decode_args<roles::ActorUpdateArgs>(without, "actor.update");
        FAIL() << "decoded without num_mini_batches";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("actor.update"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'num_mini_batches'"), std::string::npos) << e.what();
    }
    Batch wrong(0);
    encode_args(roles::ActorUpdateArgs{}, wrong);
    wrong.set_meta("num_mini_batches", std::string("2"));
    EXPECT_THROW(decode_args<roles::ActorUpdateArgs>(wrong, "actor.update"), ValueError);
}

// Settings structs nest, and carry optional numbers and enums: every field round-trips, an unset
// optional stays unset, and the schema names the nested fields by their path.
TEST(ProtocolArgs, NestedStructsOptionalsAndEnumsRoundTrip) {
    roles::CriticSettings s;
    s.policy.path = "/models/p";
    s.policy.builtin.num_layers = 5;
    s.optim.lr = 0.25;
    s.optim.scheduler = "cosine";
    s.ppo.loss_scale_factor = 7.5;
    s.loss_agg_mode = algo::AggMode::kSeqMeanTokenSumNorm;
    s.cliprange_value = 0.3;
    Batch b = protocol::settings_batch(s);
    EXPECT_EQ(b.meta_string("settings.policy.path"), "/models/p");
    EXPECT_EQ(b.meta_int("settings.policy.builtin.num_layers"), 5);
    auto d = decode_args<protocol::InitWith<roles::CriticSettings>>(protocol::with_args(b, protocol::InitArgs{}),
                                                                    "critic.init")
                 .settings;
    EXPECT_EQ(d.policy.path, "/models/p");
    EXPECT_EQ(d.policy.builtin.num_layers, 5);
    EXPECT_EQ(d.optim.lr, 0.25);
    EXPECT_EQ(d.optim.scheduler, "cosine");
    EXPECT_EQ(d.ppo.loss_scale_factor, 7.5);
    EXPECT_EQ(d.loss_agg_mode, algo::AggMode::kSeqMeanTokenSumNorm);
    EXPECT_EQ(d.cliprange_value, 0.3);
    s.ppo.loss_scale_factor.reset();
    d.ppo.loss_scale_factor = 1.0;
    d = decode_args<protocol::InitWith<roles::CriticSettings>>(protocol::with_args(protocol::settings_batch(s),
                                                                                   protocol::InitArgs{}),
                                                               "critic.init")
            .settings;
    EXPECT_FALSE(d.ppo.loss_scale_factor.has_value());

    std::vector<std::string> names;
    for (const auto& f : args_schema<protocol::InitWith<roles::CriticSettings>>()) names.push_back(f.name);
    for (const char* want : {"vocab_size", "settings.policy.builtin.init_seed", "settings.optim.grad_bucket_mb",
                             "settings.ppo.loss_scale_factor", "settings.loss_agg_mode"})
        EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;

    Batch wrong = protocol::with_args(protocol::settings_batch(s), protocol::InitArgs{});
    wrong.set_meta("settings.ppo.loss_scale_factor", std::string("none"));
    try {
        decode_args<protocol::InitWith<roles::CriticSettings>>(wrong, "critic.init");
        FAIL() << "decoded a string as an optional number";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "critic.init: argument 'settings.ppo.loss_scale_factor' has the wrong type"),
                  std::string::npos)
            << e.what();
    }
}

// The table rows declare exactly the fields their argument structs list.
TEST(ProtocolArgs, TableRowsDeclareTheirArguments) {
    const auto& reg = app::role_registry();
    auto declared = [&](const char* role, uint16_t method) {
        const auto& spec = reg[static_cast<size_t>(protocol::find_role(reg, role))];
        std::vector<std::string> meta;
        for (const auto& f : spec.methods[method].inputs)
            if (f.kind == protocol::FieldKind::kMeta) meta.push_back(f.name);
        return meta;
    };
    auto names = [](const std::vector<protocol::FieldSpec>& fs) {
        std::vector<std::string> out;
        for (const auto& f : fs) out.push_back(f.name);
        return out;
    };
    EXPECT_EQ(declared("rollout", static_cast<uint16_t>(roles::RolloutMethod::kGenerate)),
              names(args_schema<roles::GenerateArgs>()));
    EXPECT_EQ(declared("actor", static_cast<uint16_t>(roles::ActorMethod::kUpdate)),
              names(args_schema<roles::ActorUpdateArgs>()));
    EXPECT_EQ(declared("actor", static_cast<uint16_t>(roles::ActorMethod::kSave)), (std::vector<std::string>{"dir"}));
    // The rollout reads its prompts as token lists: its row keeps them on the host (no round trip
    // through the GPU); a model's forward gets its columns on the device.
    auto row = [&](const std::string& role, uint16_t method) {
        return reg[static_cast<size_t>(protocol::find_role(reg, role))].methods[method];
    };
    EXPECT_TRUE(row("rollout", static_cast<uint16_t>(roles::RolloutMethod::kGenerate)).host_input);
    EXPECT_FALSE(row("actor", static_cast<uint16_t>(roles::ActorMethod::kComputeLogProb)).host_input);
    // A typed row (protocol::method<M, handler>) declares ArgsOf<M>'s fields: kInit its settings too.
    EXPECT_EQ(declared("critic", static_cast<uint16_t>(roles::CriticMethod::kInit)),
              names(args_schema<protocol::InitWith<roles::CriticSettings>>()));
}

}  // namespace
}  // namespace rlpt
