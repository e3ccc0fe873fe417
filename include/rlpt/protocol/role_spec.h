#pragma once
// Dispatch tables (DESIGN §2, STYLE §5): every remote method of every role, as plain data.
//
// Each role declares `enum class <Role>Method : uint16_t { ..., kCount }` in its public
// header (include/rlpt/roles/<role>.h) and builds one RoleSpec whose methods[i].id == i for
// every enumerator, so a misspelt method is a compile error and a missing row is caught by
// validate_registry() at start-up on every rank. src/app/registry.cpp lists the specs
// in a fixed order; the index of a spec in that list is its id on the wire.
//
// How a call moves:
//   distribute  kOneToAll  the same batch to every rank of the role
//               kDpSplit   one shard per data-parallel rank (replicated inside a model-
//                          parallel block); the batch is padded to a multiple of the DP size
//                          when pad_to_dp, else its row count must divide evenly
//               kAllToAll  the caller passes one batch per role rank
//   collect     kConcatDpSources  rows of the output sources (mp_rank 0), in dp order,
//                                 concatenated and unpadded; metrics merged
//               kFirst            role rank 0's output
//               kAll              every rank's output, in role-rank order
//               kNone             nothing (every rank still reports success or its error)
//   pad_to_dp   kDpSplit only: pad the batch to a multiple of the DP size (else refuse
//               a batch that does not split evenly: updates, whose mini-batches must not
//               contain copied rows)
//
// Every method is sent to every rank of its role, which runs the handler; a handler that uses
// the role communicator (an update's gradient all-reduce) therefore always has all its peers.
//
// Devices: a handler receives its input Batch with every column on the rank's device
// (handler_device(): the GPU app/job.cpp bound at start-up, rlpt/comm/device.h, or the CPU), and
// may return columns on any device. WorkerHost::run moves the input there before the handler and
// the output to the host after it: the one place where batches cross between host and device,
// for remote calls and for the controller's calls to roles it hosts alike. Handlers never move
// batch columns to or from the device themselves. A method whose handler reads its input as
// values on the host (token lists, tokenizers, loops over data_ptr) says so in its row
// (takes_host_input()): its input stays on the host.
//
// A table row reads as words, built with method() and the MethodSpec setters; a method with
// arguments uses the typed form (args.h), whose handler receives ArgsOf<M> decoded:
//     method<ActorMethod::kUpdate, update>("update").split_over_dp().unpadded()
//         .takes({ids, mask, ...}).concat_outputs({})

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "rlpt/batch/batch.h"
#include "rlpt/comm/topology.h"
#include "rlpt/core/error.h"

namespace rlpt::protocol {

enum class Distribute : uint8_t { kOneToAll = 0, kDpSplit = 1, kAllToAll = 2 };
enum class Collect : uint8_t { kConcatDpSources = 0, kFirst = 1, kAll = 2, kNone = 3 };
const char* distribute_name(Distribute d);
const char* collect_name(Collect c);

enum class FieldKind : uint8_t { kTensor = 0, kString = 1, kInt = 2, kMeta = 3 };
// One entry of a method's input or output schema.
struct FieldSpec {
    std::string name;
    FieldKind kind = FieldKind::kTensor;
    bool optional = false;
};

// Objects that colocated roles in one process share (e.g. the actor's model that a
// colocated rollout generates with, without a copy). Typed by the stored pointer type.
class ProcessShared {
  public:
    template <typename T>
    void put(const std::string& key, std::shared_ptr<T> v) {
        items_[key] = Item{std::static_pointer_cast<void>(std::move(v)), &typeid(T)};
    }
    template <typename T>
    std::shared_ptr<T> get(const std::string& key) const {
        auto it = items_.find(key);
        if (it == items_.end()) return nullptr;
        if (*it->second.type != typeid(T)) {
            throw InternalError(fmt::format("process-shared object '{}' has another type", key));
        }
        return std::static_pointer_cast<T>(it->second.ptr);
    }
    bool has(const std::string& key) const { return items_.count(key) != 0; }

  private:
    struct Item {
        std::shared_ptr<void> ptr;
        const std::type_info* type;
    };
    std::map<std::string, Item> items_;
};

// What a handler sees of the world. A role's settings come with its kInit (args.h, InitWith),
// never from the run's config (include/rlpt/roles/settings.h).
struct WorkerContext {
    const comm::Topology* topology = nullptr;
    const comm::RoleComms* comms = nullptr;  // this role's communicators on this rank
    const comm::RoleLayout* layout = nullptr;
    std::string role;
    std::string method;  // the method running now (its table name): errors name "<role>.<method>"
    int world_rank = -1;
    ProcessShared* shared = nullptr;
    int64_t step = -1;  // the controller's step at the time of the call

    bool is_output_source() const { return comms->mp_rank == 0; }
    int dp_rank() const { return comms->dp_rank; }
    int dp_size() const { return layout->dp_size(); }
};

// Base of every role's state object (the actor's model and optimizer, ...).
class RoleWorker {
  public:
    virtual ~RoleWorker() = default;
};

using Handler = Batch (*)(RoleWorker& self, WorkerContext& ctx, const Batch& in);
using Factory = std::unique_ptr<RoleWorker> (*)(WorkerContext& ctx);

struct MethodSpec {
    uint16_t id = 0;
    std::string name;
    Distribute distribute = Distribute::kOneToAll;
    Collect collect = Collect::kNone;
    bool pad_to_dp = true;
    double timeout_s = 0;  // 0: trainer.call_timeout_s; > 0: min(this, trainer.call_timeout_s)
    // kInit of a role with settings: the Controller adds the role's settings (resolved once by
    // the run plan, Controller::set_role_settings) to the caller's input.
    bool takes_settings = false;
    bool host_input = false;  // the handler reads its input on the host: WorkerHost leaves it there
    std::vector<FieldSpec> inputs;
    std::vector<FieldSpec> outputs;
    Handler handler = nullptr;

    // ---- row builders (each returns *this) ----
    MethodSpec& split_over_dp() { return distribute = Distribute::kDpSplit, *this; }
    MethodSpec& one_batch_per_rank() { return distribute = Distribute::kAllToAll, *this; }
    MethodSpec& unpadded() { return pad_to_dp = false, *this; }
    // Appends to the input schema (columns, per-sample fields, args_schema<...>()).
    MethodSpec& takes(const std::vector<FieldSpec>& fields) {
        inputs.insert(inputs.end(), fields.begin(), fields.end());
        return *this;
    }
    MethodSpec& concat_outputs(std::vector<FieldSpec> fields) { return collect_as(Collect::kConcatDpSources, fields); }
    MethodSpec& first_output(std::vector<FieldSpec> fields) { return collect_as(Collect::kFirst, fields); }
    MethodSpec& every_output(std::vector<FieldSpec> fields) { return collect_as(Collect::kAll, fields); }
    MethodSpec& timeout(double seconds) { return timeout_s = seconds, *this; }
    MethodSpec& receives_settings() { return takes_settings = true, *this; }
    MethodSpec& takes_host_input() { return host_input = true, *this; }

  private:
    MethodSpec& collect_as(Collect c, std::vector<FieldSpec>& fields) {
        collect = c;
        outputs = std::move(fields);
        return *this;
    }
};

// A row: sent whole to every rank of the role, nothing collected, until the setters say otherwise.
template <typename MethodEnum>
MethodSpec method(MethodEnum id, std::string name, Handler handler) {
    MethodSpec m;
    m.id = static_cast<uint16_t>(id);
    m.name = std::move(name);
    m.handler = handler;
    return m;
}
// Schema entries that read as words: tensors("input_ids", "responses"), int_field("sample_index").
template <typename... Names>
std::vector<FieldSpec> tensors(Names... names) {
    return {FieldSpec{names, FieldKind::kTensor, false}...};
}
inline FieldSpec int_field(std::string name) { return {std::move(name), FieldKind::kInt, false}; }
inline FieldSpec string_field(std::string name) { return {std::move(name), FieldKind::kString, false}; }
inline FieldSpec meta_field(std::string name) { return {std::move(name), FieldKind::kMeta, false}; }

struct RoleSpec {
    std::string name;
    uint16_t method_count = 0;  // the enum's kCount
    std::vector<MethodSpec> methods;
    Factory factory = nullptr;
};

// Checks every table: ids dense and in enum order, names unique, handlers present,
// kDpSplit methods have a row-carrying input, kConcatDpSources methods a row-carrying
// output (or declare none: metrics-only), role names unique. Throws InternalError.
void validate_registry(const std::vector<RoleSpec>& registry);
// Hash of names, ids and modes of every table (all ranks must agree: same binary).
uint64_t registry_hash(const std::vector<RoleSpec>& registry);
// Index of the spec named `role`, or -1.
int find_role(const std::vector<RoleSpec>& registry, const std::string& role);

// This rank's device (see "Devices" above): cuda:<the index app/job.cpp bound>, or the CPU. Handlers
// get their inputs there, and every role of the rank builds its models there.
torch::Device handler_device();

// Checks that `b` carries every non-optional field of `schema`; ValueError naming
// what is missing, for which role/method and direction.
void check_schema(const Batch& b, const std::vector<FieldSpec>& schema, const std::string& role,
                  const std::string& method, const char* direction);

// Compile-time link from a method enum to its role name; each role header specialises it:
//   template <> struct RoleOf<roles::ActorMethod> { static constexpr const char* kName = "actor"; };
template <typename MethodEnum>
struct RoleOf;

}  // namespace rlpt::protocol
