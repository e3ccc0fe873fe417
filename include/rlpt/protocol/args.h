#pragma once
// Typed call arguments: the scalar (and small list) inputs of a remote method, as one struct.
//
// Each remote method that takes arguments has a struct (in its role's header,
// include/rlpt/roles/<role>.h) with ONE field list, a `visit` member that names every field:
//
//     struct ReferenceLogProbArgs {
//         double temperature = 1.0;
//         template <typename V> void visit(V& v) { v("temperature", temperature); }
//     };
//
// and the role header links the method to it (ArgsOf below):
//
//     template <> struct rlpt::protocol::ArgsOf<rlpt::roles::ReferenceMethod::kComputeLogProb> {
//         using type = rlpt::roles::ReferenceLogProbArgs;
//     };
//
// That list gives, with nothing else to keep in step:
//   encode_args(args, batch)         the caller writes every field into the batch's meta;
//   decode_args<Args>(batch, where)  the handler reads every field back. A field that is
//                                    missing or of another type is a ValueError naming the
//                                    method (`where`, "actor.update") and the field: never a
//                                    default (the struct's defaults serve the caller only);
//   args_schema<Args>()              the FieldSpec list (kMeta) the method's table row declares,
//                                    so the controller refuses a call without the field before
//                                    sending it;
//   method<M, handler>(name)         a table row whose handler receives ArgsOf<M> decoded (the
//                                    message names "<role>.<method>" from the table) and whose
//                                    input schema lists its fields.
// Field types: int64_t (and other integers), double, bool (sent as int64 0/1), std::string,
// std::vector<int64_t> (a list stays a list on the wire: Batch meta holds int64 lists),
// std::optional of a number or bool (unset travels as the string "null", so it is sent, never
// missing), an enum (sent as its underlying integer: both ends run the same binary, which
// app::run_job checks), a struct with its own `visit` (its fields travel as "<field>.<name>"), and a
// std::vector of strings or of such structs (its length travels as "<field>.size", element i as
// "<field>.<i>" or "<field>.<i>.<name>"; the schema lists "<field>.size").

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "rlpt/batch/batch.h"
#include "rlpt/core/error.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::protocol {

namespace detail {

// A struct that lists its own fields (nested settings: ModelSettings inside ActorSettings).
template <typename T>
concept Visitable = requires(T& t, void (*v)(const char*, int64_t&)) {
    t.visit(v);
};

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsListOf : std::false_type {};  // std::vector<std::string> and std::vector<a Visitable>
template <typename T>
requires std::same_as<T, std::string> || Visitable<T>
struct IsListOf<std::vector<T>> : std::true_type {
};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

// How an unset std::optional travels.
inline const std::string kUnset = "null";

// Prefixes nested fields: "settings" + "model" + "path" -> "settings.model.path".
class FieldPath {
  protected:
    std::string key(const char* name) const { return prefix_ + name; }
    std::string nested(const char* name) const { return prefix_ + name + "."; }
    std::string size_key(const char* name) const { return prefix_ + name + ".size"; }
    std::string prefix_;
};

class ArgEncoder : FieldPath {
  public:
    explicit ArgEncoder(Batch& b, std::string prefix = {}) : b_(b) { prefix_ = std::move(prefix); }
    template <typename T>
    void operator()(const char* name, const T& v) {
        if constexpr (Visitable<T>) {
            ArgEncoder inner(b_, nested(name));
            T copy = v;  // visit() is one member for all three directions, so it is not const
            copy.visit(inner);
        } else if constexpr (IsListOf<T>::value) {
            b_.set_meta(size_key(name), static_cast<int64_t>(v.size()));
            ArgEncoder inner(b_, nested(name));
            for (size_t i = 0; i < v.size(); ++i) inner(std::to_string(i).c_str(), v[i]);
        } else if constexpr (IsOptional<T>::value) {
            static_assert(std::is_arithmetic_v<typename T::value_type>, "an optional argument holds a number or bool");
            if (v) (*this)(name, *v);
            else b_.set_meta(key(name), kUnset);
        } else if constexpr (std::is_enum_v<T>) {
            b_.set_meta(key(name), static_cast<int64_t>(v));
        } else if constexpr (std::is_same_v<T, bool>) {
            b_.set_meta(key(name), static_cast<int64_t>(v ? 1 : 0));
        } else if constexpr (std::is_integral_v<T>) {
            b_.set_meta(key(name), static_cast<int64_t>(v));
        } else {
            b_.set_meta(key(name), v);
        }
    }

  private:
    Batch& b_;
};

class ArgDecoder : FieldPath {
  public:
    ArgDecoder(const Batch& b, const char* where, std::string prefix = {}) : b_(b), where_(where) {
        prefix_ = std::move(prefix);
    }
    template <typename T>
    void operator()(const char* name, T& v) {
        if constexpr (Visitable<T>) {
            ArgDecoder inner(b_, where_, nested(name));
            v.visit(inner);
        } else if constexpr (IsListOf<T>::value) {
            int64_t n = 0;
            ArgDecoder inner(b_, where_, nested(name));
            inner("size", n);
            if (n < 0) throw ValueError(fmt::format("{}: argument '{}' is negative", where_, size_key(name)));
            v.assign(static_cast<size_t>(n), typename T::value_type{});
            for (size_t i = 0; i < v.size(); ++i) inner(std::to_string(i).c_str(), v[i]);
        } else {
            const MetaValue& m = find(name);
            bool ok = false;
            if constexpr (IsOptional<T>::value) {
                const auto* s = std::get_if<std::string>(&m);
                if (s && *s == kUnset) {
                    ok = true;
                    v.reset();
                } else {
                    typename T::value_type x{};
                    ok = read(m, x);
                    if (ok) v = x;
                }
            } else {
                ok = read(m, v);
            }
            if (!ok) throw ValueError(fmt::format("{}: argument '{}' has the wrong type", where_, key(name)));
        }
    }

  private:
    const MetaValue& find(const char* name) const {
        auto it = b_.meta().find(key(name));
        if (it == b_.meta().end()) {
            throw ValueError(fmt::format("{}: the call has no argument '{}' (a caller must set every field of "
                                         "the method's argument struct)",
                                         where_, key(name)));
        }
        return it->second;
    }
    // Reads `m` into `v`; false when `m` holds another type (or a bool other than 0/1).
    template <typename T>
    static bool read(const MetaValue& m, T& v) {
        const auto* i = std::get_if<int64_t>(&m);
        if constexpr (std::is_same_v<T, bool>) {
            if (!i || (*i != 0 && *i != 1)) return false;
            v = *i == 1;
        } else if constexpr (std::is_enum_v<T> || std::is_integral_v<T>) {
            if (!i) return false;
            v = static_cast<T>(*i);
        } else if constexpr (std::is_same_v<T, double>) {
            const auto* d = std::get_if<double>(&m);
            if (!d && !i) return false;
            v = d ? *d : static_cast<double>(*i);
        } else {
            const auto* x = std::get_if<T>(&m);
            if (!x) return false;
            v = *x;
        }
        return true;
    }
    const Batch& b_;
    const char* where_;
};

class ArgSchema : FieldPath {
  public:
    explicit ArgSchema(std::vector<FieldSpec>& fields, std::string prefix = {}) : fields_(fields) {
        prefix_ = std::move(prefix);
    }
    template <typename T>
    void operator()(const char* name, T& v) {
        if constexpr (Visitable<T>) {
            ArgSchema inner(fields_, nested(name));
            v.visit(inner);
        } else if constexpr (IsListOf<T>::value) {
            fields_.push_back(FieldSpec{size_key(name), FieldKind::kMeta, false});
        } else {
            fields_.push_back(FieldSpec{key(name), FieldKind::kMeta, false});
        }
    }

  private:
    std::vector<FieldSpec>& fields_;
};

}  // namespace detail

// Writes every field of `args` into `b`'s meta.
template <typename Args>
void encode_args(const Args& args, Batch& b) {
    Args copy = args;  // visit() is one member for all three directions, so it is not const
    detail::ArgEncoder enc(b);
    copy.visit(enc);
}

// `in` with `args` added (a copy of `in`'s handles: tensors are shared, not copied).
template <typename Args>
Batch with_args(Batch in, const Args& args) {
    encode_args(args, in);
    return in;
}

// Reads every field; ValueError naming `where` and the field when one is missing or mistyped.
template <typename Args>
Args decode_args(const Batch& b, const char* where) {
    Args a;
    detail::ArgDecoder dec(b, where);
    a.visit(dec);
    return a;
}

// The meta fields a method's table row declares for `Args`.
template <typename Args>
std::vector<FieldSpec> args_schema() {
    Args a;
    std::vector<FieldSpec> fields;
    detail::ArgSchema s(fields);
    a.visit(s);
    return fields;
}

// A method without arguments.
struct NoArgs {
    template <typename V>
    void visit(V&) {}
};

// The argument struct of method `M` (a role's method enumerator). Each role header specialises it
// for its methods that take arguments; the others take NoArgs.
template <auto M>
struct ArgsOf {
    using type = NoArgs;
};
template <auto M>
using ArgsOfT = typename ArgsOf<M>::type;

// A handler that receives its method's arguments decoded.
template <auto M>
using TypedHandler = Batch (*)(RoleWorker& self, WorkerContext& ctx, const Batch& in, const ArgsOfT<M>& args);

namespace detail {
template <auto M, TypedHandler<M> Fn>
Batch decode_then_run(RoleWorker& self, WorkerContext& ctx, const Batch& in) {
    const std::string where = ctx.role + "." + ctx.method;
    return Fn(self, ctx, in, decode_args<ArgsOfT<M>>(in, where.c_str()));
}
}  // namespace detail

// A table row for method `M` whose handler takes ArgsOf<M>: the row's input schema lists the
// struct's fields, and the handler gets them decoded (a missing or mistyped field is a ValueError
// naming "<role>.<name>" and the field before the handler runs).
template <auto M, TypedHandler<M> Fn>
MethodSpec method(std::string name) {
    return method(M, std::move(name), &detail::decode_then_run<M, Fn>).takes(args_schema<ArgsOfT<M>>());
}

// A checkpoint or export directory (save, load, export of the trained roles).
struct DirArgs {
    std::string dir;
    template <typename V>
    void visit(V& v) {
        v("dir", dir);
    }
};

// kInit of every model role: the tokenizer's vocabulary size and the run's training steps
// (the lr schedules count training steps; roles without an optimizer ignore it).
struct InitArgs {
    int64_t vocab_size = 0;
    int64_t total_steps = 1;
    // The run's CharTokenizer charset when it uses one (the built-in model), else empty: roles that
    // need text (the rollout's agent loop) then load model.path's tokenizer.
    std::string tokenizer_charset;
    std::string tokenizer_words;  // its words (multi-character tokens), '\n'-separated
    template <typename V>
    void visit(V& v) {
        v("vocab_size", vocab_size);
        v("total_steps", total_steps);
        v("tokenizer_charset", tokenizer_charset);
        v("tokenizer_words", tokenizer_words);
    }
};

// kInit of a role with settings (ArgsOf<kInit> of the actor, critic, reference and reward model):
// the run's InitArgs, which the trainer passes, and the role's own settings under "settings.",
// resolved once by the run plan (app/role_settings.h) and added by the Controller to every call
// of a row marked receives_settings() (Controller::set_role_settings).
template <typename Settings>
struct InitWith {
    InitArgs run;
    Settings settings;
    template <typename V>
    void visit(V& v) {
        run.visit(v);
        v("settings", settings);
    }
};

// The "settings." fields of InitWith<Settings> alone: what the run plan gives the Controller
// (Controller::set_role_settings) for a role's kInit.
template <typename Settings>
Batch settings_batch(const Settings& settings) {
    Batch b(0);
    detail::ArgEncoder enc(b);
    enc("settings", settings);
    return b;
}

}  // namespace rlpt::protocol
