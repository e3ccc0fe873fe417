#include "rlpt/batch/batch.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "rlpt/core/error.h"

namespace rlpt {

const char* reduce_name(Reduce r) {
    switch (r) {
        case Reduce::kMean: return "mean";
        case Reduce::kSum: return "sum";
        case Reduce::kMax: return "max";
        case Reduce::kMin: return "min";
    }
    return "?";
}

double Metric::value() const {
    if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
    switch (reduce) {
        case Reduce::kMean: {
            double s = 0;
            for (double v : values) s += v;
            return s / static_cast<double>(values.size());
        }
        case Reduce::kSum: {
            double s = 0;
            for (double v : values) s += v;
            return s;
        }
        case Reduce::kMax: return *std::max_element(values.begin(), values.end());
        case Reduce::kMin: return *std::min_element(values.begin(), values.end());
    }
    return std::numeric_limits<double>::quiet_NaN();
}

void add_metric(MetricMap& m, const std::string& name, double value, Reduce reduce) {
    auto it = m.find(name);
    if (it == m.end()) {
        m.emplace(name, Metric{reduce, {value}});
        return;
    }
    RLPT_CHECK(it->second.reduce == reduce, "metric '{}' is reduced by {} but was given with {}", name,
               reduce_name(it->second.reduce), reduce_name(reduce));
    it->second.values.push_back(value);
}

void merge_metrics(MetricMap& into, const MetricMap& from) {
    for (const auto& [name, metric] : from) {
        auto it = into.find(name);
        if (it == into.end()) {
            into.emplace(name, metric);
            continue;
        }
        RLPT_CHECK(it->second.reduce == metric.reduce, "metric '{}' is reduced by {} and by {}", name,
                   reduce_name(it->second.reduce), reduce_name(metric.reduce));
        it->second.values.insert(it->second.values.end(), metric.values.begin(), metric.values.end());
    }
}

std::map<std::string, double> reduce_metrics(const MetricMap& m) {
    std::map<std::string, double> out;
    for (const auto& [name, metric] : m) out[name] = metric.value();
    return out;
}

// ---- Batch ------------------------------------------------------------------------------

namespace {
std::string shape_str(const torch::Tensor& t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); ++d) s += (d ? "," : "") + std::to_string(t.size(d));
    return s + "]";
}

template <typename Map>
std::string key_list(const Map& m) {
    std::string s;
    for (const auto& kv : m) s += (s.empty() ? "" : ", ") + kv.first;
    return s.empty() ? "none" : s;
}

template <typename T>
std::vector<T> take(const std::vector<T>& v, const std::vector<int64_t>& idx) {
    std::vector<T> out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(v[static_cast<size_t>(i)]);
    return out;
}

template <typename T>
std::vector<T> take_range(const std::vector<T>& v, int64_t b, int64_t e) {
    return std::vector<T>(v.begin() + b, v.begin() + e);
}
}  // namespace

void Batch::adopt_rows(int64_t rows, const std::string& what) {
    if (!sized_) {
        size_ = rows;
        sized_ = true;
        return;
    }
    RLPT_CHECK(rows == size_, "{} has {} rows but the batch has {}", what, rows, size_);
}

void Batch::set(const std::string& name, torch::Tensor t) {
    RLPT_CHECK(t.defined(), "column '{}': undefined tensor", name);
    RLPT_CHECK(t.dim() >= 1, "column '{}' must have a row dimension, got a 0-dim tensor", name);
    adopt_rows(t.size(0), "column '" + name + "'");
    columns_[name] = std::move(t);
}

const torch::Tensor& Batch::at(const std::string& name) const {
    auto it = columns_.find(name);
    if (it == columns_.end()) {
        RLPT_THROW(ValueError, "batch has no column '{}' (columns: {})", name, key_list(columns_));
    }
    return it->second;
}

void Batch::erase(const std::string& name) {
    columns_.erase(name);
    strings_.erase(name);
    ints_.erase(name);
}

std::vector<std::string> Batch::column_names() const {
    std::vector<std::string> out;
    for (const auto& kv : columns_) out.push_back(kv.first);
    return out;
}

void Batch::set_strings(const std::string& name, std::vector<std::string> v) {
    adopt_rows(static_cast<int64_t>(v.size()), "string field '" + name + "'");
    strings_[name] = std::move(v);
}

void Batch::set_ints(const std::string& name, std::vector<int64_t> v) {
    adopt_rows(static_cast<int64_t>(v.size()), "int field '" + name + "'");
    ints_[name] = std::move(v);
}

const std::vector<std::string>& Batch::strings(const std::string& name) const {
    auto it = strings_.find(name);
    if (it == strings_.end()) {
        RLPT_THROW(ValueError, "batch has no string field '{}' (string fields: {})", name, key_list(strings_));
    }
    return it->second;
}

const std::vector<int64_t>& Batch::ints(const std::string& name) const {
    auto it = ints_.find(name);
    if (it == ints_.end()) {
        RLPT_THROW(ValueError, "batch has no int field '{}' (int fields: {})", name, key_list(ints_));
    }
    return it->second;
}

int64_t Batch::meta_int(const std::string& name) const {
    auto it = meta_.find(name);
    RLPT_CHECK(it != meta_.end(), "batch has no meta '{}' (meta: {})", name, key_list(meta_));
    const auto* v = std::get_if<int64_t>(&it->second);
    RLPT_CHECK(v != nullptr, "batch meta '{}' is not an integer", name);
    return *v;
}

double Batch::meta_double(const std::string& name) const {
    auto it = meta_.find(name);
    RLPT_CHECK(it != meta_.end(), "batch has no meta '{}' (meta: {})", name, key_list(meta_));
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
    RLPT_THROW(ValueError, "batch meta '{}' is not a number", name);
}

const std::string& Batch::meta_string(const std::string& name) const {
    auto it = meta_.find(name);
    RLPT_CHECK(it != meta_.end(), "batch has no meta '{}' (meta: {})", name, key_list(meta_));
    const auto* v = std::get_if<std::string>(&it->second);
    RLPT_CHECK(v != nullptr, "batch meta '{}' is not a string", name);
    return *v;
}

const std::vector<int64_t>& Batch::meta_ints(const std::string& name) const {
    auto it = meta_.find(name);
    RLPT_CHECK(it != meta_.end(), "batch has no meta '{}' (meta: {})", name, key_list(meta_));
    const auto* v = std::get_if<std::vector<int64_t>>(&it->second);
    RLPT_CHECK(v != nullptr, "batch meta '{}' is not a list of integers", name);
    return *v;
}

int64_t Batch::meta_int(const std::string& name, int64_t fallback) const {
    return has_meta(name) ? meta_int(name) : fallback;
}

double Batch::meta_double(const std::string& name, double fallback) const {
    return has_meta(name) ? meta_double(name) : fallback;
}

Batch Batch::select(const std::vector<std::string>& columns, const std::vector<std::string>& fields) const {
    Batch out(size_);
    for (const auto& c : columns) out.columns_[c] = at(c);
    for (const auto& f : fields) {
        if (strings_.count(f)) {
            out.strings_[f] = strings_.at(f);
        } else if (ints_.count(f)) {
            out.ints_[f] = ints_.at(f);
        } else {
            RLPT_THROW(ValueError, "batch has no field '{}' (string fields: {}; int fields: {})", f, key_list(strings_),
                       key_list(ints_));
        }
    }
    out.meta_ = meta_;
    out.metrics_ = metrics_;
    return out;
}

Batch Batch::slice(int64_t begin, int64_t end) const {
    RLPT_CHECK(0 <= begin && begin <= end && end <= size_, "slice [{}, {}) out of range for {} rows", begin, end,
               size_);
    Batch out(end - begin);
    for (const auto& [k, t] : columns_) out.columns_[k] = t.slice(0, begin, end);
    for (const auto& [k, v] : strings_) out.strings_[k] = take_range(v, begin, end);
    for (const auto& [k, v] : ints_) out.ints_[k] = take_range(v, begin, end);
    out.meta_ = meta_;
    return out;
}

Batch Batch::index(const std::vector<int64_t>& indices) const {
    for (int64_t i : indices) {
        RLPT_CHECK(0 <= i && i < size_, "index {} out of range for {} rows", i, size_);
    }
    Batch out(static_cast<int64_t>(indices.size()));
    if (!columns_.empty()) {
        auto idx = torch::tensor(indices, torch::kInt64);  // moved once to the columns' device
        for (const auto& [k, t] : columns_) {
            if (idx.device() != t.device()) idx = idx.to(t.device());
            out.columns_[k] = t.index_select(0, idx);
        }
    }
    for (const auto& [k, v] : strings_) out.strings_[k] = take(v, indices);
    for (const auto& [k, v] : ints_) out.ints_[k] = take(v, indices);
    out.meta_ = meta_;
    return out;
}

Batch Batch::index(const torch::Tensor& indices_or_mask) const {
    torch::Tensor idx = indices_or_mask.to(torch::kCPU);
    if (idx.scalar_type() == torch::kBool) {
        RLPT_CHECK(idx.dim() == 1 && idx.size(0) == size_, "mask has shape {} but the batch has {} rows",
                   shape_str(idx), size_);
        idx = idx.nonzero().view({-1});
    }
    RLPT_CHECK(idx.dim() == 1, "indices must be 1-D, got shape {}", shape_str(idx));
    idx = idx.to(torch::kInt64).contiguous();
    const int64_t* p = idx.data_ptr<int64_t>();
    return index(std::vector<int64_t>(p, p + idx.numel()));
}

std::vector<Batch> Batch::chunk(int64_t n, bool allow_uneven) const {
    RLPT_CHECK(n >= 1, "chunk count must be >= 1, got {}", n);
    RLPT_CHECK(allow_uneven || size_ % n == 0,
               "cannot chunk {} rows into {} equal parts (pass allow_uneven or pad first)", size_, n);
    std::vector<Batch> out;
    int64_t base = size_ / n, extra = size_ % n, begin = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t rows = base + (i < extra ? 1 : 0);
        out.push_back(slice(begin, begin + rows));
        begin += rows;
    }
    return out;
}

std::vector<Batch> Batch::split(int64_t rows) const {
    RLPT_CHECK(rows >= 1, "split size must be >= 1, got {}", rows);
    std::vector<Batch> out;
    for (int64_t b = 0; b < size_; b += rows) out.push_back(slice(b, std::min(size_, b + rows)));
    return out;
}

Batch Batch::concat(const std::vector<Batch>& parts) {
    if (parts.empty()) return Batch(0);
    const Batch& first = parts.front();
    int64_t rows = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
        const Batch& b = parts[p];
        RLPT_CHECK(b.columns_.size() == first.columns_.size() && b.strings_.size() == first.strings_.size() &&
                       b.ints_.size() == first.ints_.size(),
                   "concat: part {} has columns/fields ({}; {}; {}) but part 0 has ({}; {}; {})", p,
                   key_list(b.columns_), key_list(b.strings_), key_list(b.ints_), key_list(first.columns_),
                   key_list(first.strings_), key_list(first.ints_));
        for (const auto& [k, v] : b.meta_) {
            auto it = first.meta_.find(k);
            RLPT_CHECK(it == first.meta_.end() || it->second == v, "concat: part {} disagrees on meta '{}'", p, k);
        }
        rows += b.size_;
    }
    Batch out(rows);
    for (const auto& [k, t0] : first.columns_) {
        std::vector<torch::Tensor> ts;
        ts.reserve(parts.size());
        for (size_t p = 0; p < parts.size(); ++p) {
            auto it = parts[p].columns_.find(k);
            RLPT_CHECK(it != parts[p].columns_.end(), "concat: part {} lacks column '{}'", p, k);
            const torch::Tensor& t = it->second;
            RLPT_CHECK(t.scalar_type() == t0.scalar_type() && t.sizes().slice(1) == t0.sizes().slice(1),
                       "concat: column '{}' is {}{} in part {} but {}{} in part 0", k, c10::toString(t.scalar_type()),
                       shape_str(t), p, c10::toString(t0.scalar_type()), shape_str(t0));
            RLPT_CHECK(t.device() == t0.device(), "concat: column '{}' is on {} in part {} but on {} in part 0", k,
                       t.device().str(), p, t0.device().str());
            ts.push_back(t);
        }
        out.columns_[k] = parts.size() == 1 ? t0 : torch::cat(ts, 0);
    }
    for (const auto& [k, v0] : first.strings_) {
        std::vector<std::string> all;
        all.reserve(static_cast<size_t>(rows));
        for (size_t p = 0; p < parts.size(); ++p) {
            const auto& v = parts[p].strings(k);
            all.insert(all.end(), v.begin(), v.end());
        }
        out.strings_[k] = std::move(all);
    }
    for (const auto& [k, v0] : first.ints_) {
        std::vector<int64_t> all;
        all.reserve(static_cast<size_t>(rows));
        for (size_t p = 0; p < parts.size(); ++p) {
            const auto& v = parts[p].ints(k);
            all.insert(all.end(), v.begin(), v.end());
        }
        out.ints_[k] = std::move(all);
    }
    for (const auto& b : parts) {
        for (const auto& [k, v] : b.meta_) out.meta_.emplace(k, v);
        merge_metrics(out.metrics_, b.metrics_);
    }
    return out;
}

int64_t Batch::pad_to_multiple(int64_t k) {
    RLPT_CHECK(k >= 1, "pad multiple must be >= 1, got {}", k);
    int64_t pad = (k - size_ % k) % k;
    if (pad == 0) return 0;
    RLPT_CHECK(size_ > 0, "cannot pad an empty batch to a multiple of {}", k);
    std::vector<int64_t> idx(static_cast<size_t>(pad));
    for (int64_t i = 0; i < pad; ++i) idx[static_cast<size_t>(i)] = i % size_;
    MetricMap metrics = std::move(metrics_);
    *this = concat({*this, index(idx)});
    metrics_ = std::move(metrics);
    return pad;
}

void Batch::unpad(int64_t pad) {
    RLPT_CHECK(pad >= 0 && pad <= size_, "cannot unpad {} rows from a batch of {}", pad, size_);
    if (pad == 0) return;
    MetricMap metrics = std::move(metrics_);
    *this = slice(0, size_ - pad);
    metrics_ = std::move(metrics);
}

Batch Batch::repeat_interleave(int64_t n) const {
    RLPT_CHECK(n >= 1, "repeat count must be >= 1, got {}", n);
    std::vector<int64_t> idx;
    idx.reserve(static_cast<size_t>(size_ * n));
    for (int64_t i = 0; i < size_; ++i)
        for (int64_t j = 0; j < n; ++j) idx.push_back(i);
    return index(idx);
}

Batch Batch::to(const torch::Device& device) const {
    Batch out = *this;
    for (auto& [name, t] : out.columns_) {
        if (t.device() != device) t = t.to(device);
    }
    return out;
}

std::vector<torch::Device> Batch::devices() const {
    std::vector<torch::Device> out;
    for (const auto& [name, t] : columns_) {
        if (std::find(out.begin(), out.end(), t.device()) == out.end()) out.push_back(t.device());
    }
    if (out.empty()) out.emplace_back(torch::kCPU);
    return out;
}

void Batch::update(const Batch& other) {
    if (sized_ || !columns_.empty()) {
        RLPT_CHECK(other.size_ == size_, "union of batches with {} and {} rows", size_, other.size_);
    }
    adopt_rows(other.size_, "union");
    for (const auto& [k, t] : other.columns_) {
        auto it = columns_.find(k);
        if (it != columns_.end()) {
            RLPT_CHECK(it->second.sizes() == t.sizes() && it->second.scalar_type() == t.scalar_type() &&
                           torch::equal(it->second, t.to(it->second.device())),
                       "union: column '{}' differs between the two batches", k);
        } else {
            columns_[k] = t;
        }
    }
    for (const auto& [k, v] : other.strings_) {
        auto it = strings_.find(k);
        RLPT_CHECK(it == strings_.end() || it->second == v, "union: string field '{}' differs", k);
        strings_[k] = v;
    }
    for (const auto& [k, v] : other.ints_) {
        auto it = ints_.find(k);
        RLPT_CHECK(it == ints_.end() || it->second == v, "union: int field '{}' differs", k);
        ints_[k] = v;
    }
    for (const auto& [k, v] : other.meta_) {
        auto it = meta_.find(k);
        RLPT_CHECK(it == meta_.end() || it->second == v, "union: meta '{}' differs", k);
        meta_[k] = v;
    }
    merge_metrics(metrics_, other.metrics_);
}

void Batch::check() const {
    for (const auto& [k, t] : columns_) {
        RLPT_CHECK(t.defined() && t.dim() >= 1, "column '{}' is undefined or 0-dim", k);
        RLPT_CHECK(t.size(0) == size_, "column '{}' has {} rows, batch has {}", k, t.size(0), size_);
    }
    for (const auto& [k, v] : strings_) {
        RLPT_CHECK(static_cast<int64_t>(v.size()) == size_, "string field '{}' has {} rows, batch has {}", k, v.size(),
                   size_);
    }
    for (const auto& [k, v] : ints_) {
        RLPT_CHECK(static_cast<int64_t>(v.size()) == size_, "int field '{}' has {} rows, batch has {}", k, v.size(),
                   size_);
    }
}

int64_t Batch::nbytes() const {
    int64_t n = 0;
    for (const auto& kv : columns_) n += kv.second.numel() * static_cast<int64_t>(kv.second.element_size());
    return n;
}

std::string Batch::describe() const {
    std::string s = fmt::format("Batch(rows={}", size_);
    for (const auto& [k, t] : columns_) s += fmt::format(", {}:{}{}", k, c10::toString(t.scalar_type()), shape_str(t));
    for (const auto& kv : strings_) s += fmt::format(", {}:str", kv.first);
    for (const auto& kv : ints_) s += fmt::format(", {}:int", kv.first);
    if (!meta_.empty()) s += ", meta: " + key_list(meta_);
    if (!metrics_.empty()) s += fmt::format(", {} metrics", metrics_.size());
    return s + ")";
}

}  // namespace rlpt
