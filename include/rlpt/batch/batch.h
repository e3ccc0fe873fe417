#pragma once
// Batch: the data that flows between the controller and the roles (DESIGN §3).
//
// A Batch has `size()` rows and holds
//   * columns: named torch::Tensors whose dim 0 is the row dimension (input_ids [B,T],
//     response_mask [B,R], values [B,R], rewards [B], ...); any dtype, CPU or device;
//   * per-sample fields: strings (uid, data_source, ground_truth, raw prompt; any bytes,
//     embedded zeros included) and int64s, one entry per row;
//   * meta: batch-wide values (int64, double, string or a list of int64), e.g. temperature,
//     global step, stop token ids;
//   * metrics: typed scalars with an explicit reduction rule (mean, sum, max, min). A metric
//     holds every value contributed (one per rank or micro-batch) until it is reduced.
//
// Row operations (slice, index, chunk, split, repeat_interleave, pad) keep meta and drop
// metrics (metrics are not per row); concat keeps the first part's meta (and checks the
// others agree) and merges metrics by appending their values. Columns are stored by name in
// sorted order, so every rank iterates them in the same order.
//
// Values are shared, not copied: ops that can return views (slice, chunk, split, select)
// do; index/repeat/concat/pad allocate. Batches are not thread-safe.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace rlpt {

enum class Reduce : uint8_t { kMean = 0, kSum = 1, kMax = 2, kMin = 3 };
const char* reduce_name(Reduce r);

struct Metric {
    Reduce reduce = Reduce::kMean;
    std::vector<double> values;
    // The reduced value (NaN when there are no values).
    double value() const;
};
using MetricMap = std::map<std::string, Metric>;
// Adds `value` under `name`; if the metric exists its rule must match (else ValueError).
void add_metric(MetricMap& m, const std::string& name, double value, Reduce reduce = Reduce::kMean);
// Appends all values of `from` into `into` (rules must match).
void merge_metrics(MetricMap& into, const MetricMap& from);
// name -> reduced value.
std::map<std::string, double> reduce_metrics(const MetricMap& m);

using MetaValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

class Batch {
  public:
    Batch() = default;
    // An empty batch with `rows` rows and nothing in it yet.
    explicit Batch(int64_t rows) : size_(rows), sized_(true) {}

    // Rows. A default-constructed batch has 0 rows until something is added.
    int64_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

    // ---- columns ----
    // The tensor's dim 0 must equal size() (the first column/field added sets size()
    // when the batch has none yet).
    void set(const std::string& name, torch::Tensor t);
    bool has(const std::string& name) const { return columns_.count(name) != 0; }
    // Throws ValueError naming the missing column and listing the present ones.
    const torch::Tensor& at(const std::string& name) const;
    void erase(const std::string& name);
    const std::map<std::string, torch::Tensor>& columns() const { return columns_; }
    std::vector<std::string> column_names() const;

    // ---- per-sample fields ----
    void set_strings(const std::string& name, std::vector<std::string> v);
    void set_ints(const std::string& name, std::vector<int64_t> v);
    bool has_strings(const std::string& name) const { return strings_.count(name) != 0; }
    bool has_ints(const std::string& name) const { return ints_.count(name) != 0; }
    const std::vector<std::string>& strings(const std::string& name) const;
    const std::vector<int64_t>& ints(const std::string& name) const;
    const std::map<std::string, std::vector<std::string>>& string_fields() const { return strings_; }
    const std::map<std::string, std::vector<int64_t>>& int_fields() const { return ints_; }

    // ---- meta ----
    void set_meta(const std::string& name, MetaValue v) { meta_[name] = std::move(v); }
    bool has_meta(const std::string& name) const { return meta_.count(name) != 0; }
    int64_t meta_int(const std::string& name) const;
    double meta_double(const std::string& name) const;  // int64 meta converts
    const std::string& meta_string(const std::string& name) const;
    const std::vector<int64_t>& meta_ints(const std::string& name) const;
    int64_t meta_int(const std::string& name, int64_t fallback) const;
    double meta_double(const std::string& name, double fallback) const;
    const std::map<std::string, MetaValue>& meta() const { return meta_; }

    // ---- metrics ----
    MetricMap& metrics() { return metrics_; }
    const MetricMap& metrics() const { return metrics_; }
    void add_metric(const std::string& name, double v, Reduce r = Reduce::kMean) {
        rlpt::add_metric(metrics_, name, v, r);
    }

    // ---- operations ----
    // Only the named columns / fields (meta and metrics kept). Missing names: ValueError.
    Batch select(const std::vector<std::string>& columns, const std::vector<std::string>& fields = {}) const;
    // Rows [begin, end) as views.
    Batch slice(int64_t begin, int64_t end) const;
    // Rows by int64 indices (any order, repeats allowed) or by a bool mask of length size();
    // the indices or mask may be on any device, each column stays on its own.
    Batch index(const torch::Tensor& indices_or_mask) const;
    Batch index(const std::vector<int64_t>& indices) const;
    // n consecutive parts. Refuses size() % n != 0 unless allow_uneven (then the first
    // size() % n parts get one extra row, as torch.chunk would not: sizes differ by <= 1).
    std::vector<Batch> chunk(int64_t n, bool allow_uneven = false) const;
    // Parts of `rows` rows each (the last may be shorter).
    std::vector<Batch> split(int64_t rows) const;
    // Rows of all parts in order. Parts must have the same columns (names, dtypes, trailing
    // shapes, devices) and fields; an empty list gives an empty batch.
    static Batch concat(const std::vector<Batch>& parts);
    // Pads to a multiple of k by repeating the first rows (verl's convention: real data,
    // so no NaNs from all-masked padding rows); returns the number of rows added.
    int64_t pad_to_multiple(int64_t k);
    // Drops the last `pad` rows (inverse of pad_to_multiple).
    void unpad(int64_t pad);
    // Each row repeated n times consecutively (n samples per prompt).
    Batch repeat_interleave(int64_t n) const;
    // The same batch with every column on `device` (a column already there is shared, not
    // copied; a copy to the CPU waits for the device). Fields, meta and metrics are copied.
    // The protocol's one device crossing (rlpt/protocol/role_spec.h, "Devices").
    Batch to(const torch::Device& device) const;
    // Devices the columns live on, each once, in column order ("cpu" for a batch without columns).
    std::vector<torch::Device> devices() const;
    // Union with a batch of the same rows: adds its columns/fields/meta/metrics. A name in
    // both must hold equal values (torch::equal / ==), else ValueError.
    void update(const Batch& other);
    // Throws ValueError describing the first inconsistency (row counts, ...).
    void check() const;
    // Bytes of tensor storage in the columns (for logging and benchmarks).
    int64_t nbytes() const;
    // One line: "Batch(rows=8, input_ids:int64[8,16], uid:str, ...)".
    std::string describe() const;

  private:
    void adopt_rows(int64_t rows, const std::string& what);
    int64_t size_ = 0;
    bool sized_ = false;
    std::map<std::string, torch::Tensor> columns_;
    std::map<std::string, std::vector<std::string>> strings_;
    std::map<std::string, std::vector<int64_t>> ints_;
    std::map<std::string, MetaValue> meta_;
    MetricMap metrics_;
};

}  // namespace rlpt
