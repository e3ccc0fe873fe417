#include "rlpt/batch/batch_codec.h"

#include <cstring>

#include "rlpt/core/error.h"
#include "rlpt/wire.h"

namespace rlpt {
namespace {

constexpr uint32_t kLayoutMagic = 0x42504c52u;  // "RLPB"
constexpr uint64_t kMaxNameBytes = 1 << 20;

class Writer {
  public:
    explicit Writer(std::string& out) : out_(out) {}
    template <typename T>
    void pod(T v) {
        out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
    }
    void str(const std::string& s) {
        pod<uint64_t>(s.size());
        out_.append(s);
    }

  private:
    std::string& out_;
};

class Reader {
  public:
    Reader(const char* p, size_t n) : p_(p), n_(n) {}
    template <typename T>
    T pod(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, p_ + off_, sizeof(T));
        off_ += sizeof(T);
        return v;
    }
    std::string str(const char* what) {
        uint64_t len = pod<uint64_t>(what);
        need(len, what);
        std::string s(p_ + off_, static_cast<size_t>(len));
        off_ += static_cast<size_t>(len);
        return s;
    }
    uint64_t count(const char* what, uint64_t min_bytes_each) {
        uint64_t c = pod<uint64_t>(what);
        // A count can't exceed what the remaining bytes could hold.
        if (min_bytes_each > 0 && c > (n_ - off_) / min_bytes_each) {
            throw CommError(fmt::format("malformed batch message: {} count {} exceeds the message size", what, c));
        }
        return c;
    }
    bool done() const { return off_ == n_; }

  private:
    void need(uint64_t k, const char* what) const {
        if (k > n_ - off_) {
            throw CommError(fmt::format("malformed batch message: truncated while reading {} (need {} bytes at offset "
                                        "{}, message has {})",
                                        what, k, off_, n_));
        }
    }
    const char* p_;
    size_t n_;
    size_t off_ = 0;
};

}  // namespace

uint8_t dtype_code(torch::ScalarType t) {
    using wire::DType;
    switch (t) {
        case torch::kUInt8: return static_cast<uint8_t>(DType::kUInt8);
        case torch::kInt8: return static_cast<uint8_t>(DType::kInt8);
        case torch::kInt16: return static_cast<uint8_t>(DType::kInt16);
        case torch::kInt32: return static_cast<uint8_t>(DType::kInt32);
        case torch::kInt64: return static_cast<uint8_t>(DType::kInt64);
        case torch::kFloat16: return static_cast<uint8_t>(DType::kFloat16);
        case torch::kBFloat16: return static_cast<uint8_t>(DType::kBFloat16);
        case torch::kFloat32: return static_cast<uint8_t>(DType::kFloat32);
        case torch::kFloat64: return static_cast<uint8_t>(DType::kFloat64);
        case torch::kBool: return static_cast<uint8_t>(DType::kBool);
        case torch::kComplexFloat: return static_cast<uint8_t>(DType::kComplex64);
        case torch::kComplexDouble: return static_cast<uint8_t>(DType::kComplex128);
        default: RLPT_THROW(ValueError, "dtype {} cannot be sent in a Batch", c10::toString(t));
    }
}

torch::ScalarType dtype_from_code(uint8_t code) {
    using wire::DType;
    switch (static_cast<DType>(code)) {
        case DType::kUInt8: return torch::kUInt8;
        case DType::kInt8: return torch::kInt8;
        case DType::kInt16: return torch::kInt16;
        case DType::kInt32: return torch::kInt32;
        case DType::kInt64: return torch::kInt64;
        case DType::kFloat16: return torch::kFloat16;
        case DType::kBFloat16: return torch::kBFloat16;
        case DType::kFloat32: return torch::kFloat32;
        case DType::kFloat64: return torch::kFloat64;
        case DType::kBool: return torch::kBool;
        case DType::kComplex64: return torch::kComplexFloat;
        case DType::kComplex128: return torch::kComplexDouble;
    }
    throw CommError(fmt::format("malformed batch message: unknown dtype code {}", code));
}

void encode_layout(const Batch& b, std::string& out) {
    Writer w(out);
    w.pod<uint32_t>(kLayoutMagic);
    w.pod<int64_t>(b.size());
    w.pod<uint64_t>(b.columns().size());
    for (const auto& [name, t] : b.columns()) {
        w.str(name);
        w.pod<uint8_t>(dtype_code(t.scalar_type()));
        w.pod<uint64_t>(static_cast<uint64_t>(t.dim()));
        for (int64_t d = 0; d < t.dim(); ++d) w.pod<int64_t>(t.size(d));
    }
    w.pod<uint64_t>(b.string_fields().size());
    for (const auto& [name, v] : b.string_fields()) {
        w.str(name);
        for (const auto& s : v) w.str(s);
    }
    w.pod<uint64_t>(b.int_fields().size());
    for (const auto& [name, v] : b.int_fields()) {
        w.str(name);
        out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
    }
    w.pod<uint64_t>(b.meta().size());
    for (const auto& [name, v] : b.meta()) {
        w.str(name);
        w.pod<uint8_t>(static_cast<uint8_t>(v.index()));
        if (const auto* i = std::get_if<int64_t>(&v)) w.pod<int64_t>(*i);
        if (const auto* d = std::get_if<double>(&v)) w.pod<double>(*d);
        if (const auto* s = std::get_if<std::string>(&v)) w.str(*s);
        if (const auto* l = std::get_if<std::vector<int64_t>>(&v)) {
            w.pod<uint64_t>(l->size());
            out.append(reinterpret_cast<const char*>(l->data()), l->size() * sizeof(int64_t));
        }
    }
    w.pod<uint64_t>(b.metrics().size());
    for (const auto& [name, m] : b.metrics()) {
        w.str(name);
        w.pod<uint8_t>(static_cast<uint8_t>(m.reduce));
        w.pod<uint64_t>(m.values.size());
        out.append(reinterpret_cast<const char*>(m.values.data()), m.values.size() * sizeof(double));
    }
}

BatchLayout decode_layout(const char* data, size_t n) {
    Reader r(data, n);
    if (r.pod<uint32_t>("magic") != kLayoutMagic) throw CommError("malformed batch message: bad layout magic");
    int64_t rows = r.pod<int64_t>("row count");
    if (rows < 0) throw CommError(fmt::format("malformed batch message: negative row count {}", rows));
    BatchLayout L;
    L.skeleton = Batch(rows);
    uint64_t ncols = r.count("column", 9);
    for (uint64_t c = 0; c < ncols; ++c) {
        ColumnDesc d;
        d.name = r.str("column name");
        if (d.name.size() > kMaxNameBytes) throw CommError("malformed batch message: column name too long");
        d.dtype = dtype_from_code(r.pod<uint8_t>("column dtype"));
        uint64_t ndim = r.count("column rank", 8);
        if (ndim < 1 || ndim > 16) {
            throw CommError(fmt::format("malformed batch message: column '{}' has rank {}", d.name, ndim));
        }
        int64_t numel = 1;
        for (uint64_t k = 0; k < ndim; ++k) {
            int64_t s = r.pod<int64_t>("column shape");
            if (s < 0 || (s > 0 && numel > (int64_t(1) << 50) / s)) {
                throw CommError(fmt::format("malformed batch message: column '{}' has bad dimension {}", d.name, s));
            }
            d.shape.push_back(s);
            numel *= s;
        }
        if (d.shape[0] != rows) {
            throw CommError(fmt::format("malformed batch message: column '{}' has {} rows, batch has {}", d.name,
                                        d.shape[0], rows));
        }
        d.nbytes = numel * static_cast<int64_t>(c10::elementSize(d.dtype));
        L.columns.push_back(std::move(d));
    }
    uint64_t nstr = r.count("string field", 8);
    for (uint64_t f = 0; f < nstr; ++f) {
        std::string name = r.str("string field name");
        std::vector<std::string> v;
        v.reserve(static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(rows), n)));
        for (int64_t i = 0; i < rows; ++i) v.push_back(r.str("string value"));
        L.skeleton.set_strings(name, std::move(v));
    }
    uint64_t nint = r.count("int field", 8);
    for (uint64_t f = 0; f < nint; ++f) {
        std::string name = r.str("int field name");
        std::vector<int64_t> v(static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(rows), n)));
        if (static_cast<int64_t>(v.size()) != rows) throw CommError("malformed batch message: int field truncated");
        for (int64_t i = 0; i < rows; ++i) v[static_cast<size_t>(i)] = r.pod<int64_t>("int value");
        L.skeleton.set_ints(name, std::move(v));
    }
    uint64_t nmeta = r.count("meta", 10);
    for (uint64_t m = 0; m < nmeta; ++m) {
        std::string name = r.str("meta name");
        uint8_t kind = r.pod<uint8_t>("meta kind");
        if (kind == 0) L.skeleton.set_meta(name, r.pod<int64_t>("meta value"));
        else if (kind == 1) L.skeleton.set_meta(name, r.pod<double>("meta value"));
        else if (kind == 2) L.skeleton.set_meta(name, r.str("meta value"));
        else if (kind == 3) {
            std::vector<int64_t> v(r.count("meta list", 8));
            for (auto& x : v) x = r.pod<int64_t>("meta list value");
            L.skeleton.set_meta(name, std::move(v));
        } else throw CommError(fmt::format("malformed batch message: meta '{}' has kind {}", name, kind));
    }
    uint64_t nmet = r.count("metric", 17);
    for (uint64_t m = 0; m < nmet; ++m) {
        std::string name = r.str("metric name");
        uint8_t red = r.pod<uint8_t>("metric rule");
        if (red > 3) throw CommError(fmt::format("malformed batch message: metric '{}' has rule {}", name, red));
        uint64_t nv = r.count("metric values", 8);
        Metric metric;
        metric.reduce = static_cast<Reduce>(red);
        for (uint64_t k = 0; k < nv; ++k) metric.values.push_back(r.pod<double>("metric value"));
        L.skeleton.metrics()[name] = std::move(metric);
    }
    if (!r.done()) throw CommError("malformed batch message: trailing bytes after the layout");
    return L;
}

}  // namespace rlpt
