// Typed call arguments (rlpt/protocol/args.h): one field list gives encode, decode and the
// schema a table row declares; a missing or mistyped field names the method and the field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rlpt/app/registry.h"
#include "rlpt/protocol/args.h"
#include "rlpt/roles/actor.h"
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
}

}  // namespace
}  // namespace rlpt
