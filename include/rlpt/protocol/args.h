#pragma once
// Typed call arguments: the scalar (and small list) inputs of a remote method, as one struct.
//
// Each remote method that takes arguments has a struct in its role's header
// (include/rlpt/roles/<role>.h) with ONE field list, a `visit` member that names every field:
//
//     struct ReferenceLogProbArgs {
//         double temperature = 1.0;
//         template <typename V> void visit(V& v) { v("temperature", temperature); }
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
//                                    sending it.
// Field types: int64_t, double, bool (sent as int64 0/1), std::string, std::vector<int64_t>
// (a list stays a list on the wire: Batch meta holds int64 lists).
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "rlpt/batch/batch.h"
#include "rlpt/core/error.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::protocol {

namespace detail {

class ArgEncoder {
  public:
    explicit ArgEncoder(Batch& b) : b_(b) {}
    template <typename T>
    void operator()(const char* name, const T& v) {
        if constexpr (std::is_same_v<T, bool>) b_.set_meta(name, static_cast<int64_t>(v ? 1 : 0));
        else if constexpr (std::is_integral_v<T>) b_.set_meta(name, static_cast<int64_t>(v));
        else b_.set_meta(name, v);
    }

  private:
    Batch& b_;
};

class ArgDecoder {
  public:
    ArgDecoder(const Batch& b, const char* where) : b_(b), where_(where) {}
    template <typename T>
    void operator()(const char* name, T& v) {
        auto it = b_.meta().find(name);
        if (it == b_.meta().end()) {
            throw ValueError(fmt::format("{}: the call has no argument '{}' (a caller must set every field of "
                                         "the method's argument struct)",
                                         where_, name));
        }
        const MetaValue& m = it->second;
        bool ok = false;
        if constexpr (std::is_same_v<T, bool>) {
            if (const auto* i = std::get_if<int64_t>(&m)) ok = (*i == 0 || *i == 1), v = *i != 0;
        } else if constexpr (std::is_integral_v<T>) {
            if (const auto* i = std::get_if<int64_t>(&m)) ok = true, v = static_cast<T>(*i);
        } else if constexpr (std::is_same_v<T, double>) {
            if (const auto* d = std::get_if<double>(&m)) ok = true, v = *d;
            else if (const auto* i = std::get_if<int64_t>(&m)) ok = true, v = static_cast<double>(*i);
        } else {
            if (const auto* x = std::get_if<T>(&m)) ok = true, v = *x;
        }
        if (!ok) throw ValueError(fmt::format("{}: argument '{}' has the wrong type", where_, name));
    }

  private:
    const Batch& b_;
    const char* where_;
};

class ArgSchema {
  public:
    template <typename T>
    void operator()(const char* name, const T&) {
        fields.push_back(FieldSpec{name, FieldKind::kMeta, false});
    }
    std::vector<FieldSpec> fields;
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
    detail::ArgSchema s;
    a.visit(s);
    return s.fields;
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

}  // namespace rlpt::protocol
