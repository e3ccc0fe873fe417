#include "rlpt/ckpt/h5_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "ckpt/fs_util.h"
#include "ckpt/h5_handle.h"
#include "ckpt/h5_util.h"
#include "rlpt/ckpt/crc32.h"
#include "rlpt/core/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checkpoint store writes host bytes as little endian and checksums them");

namespace rlpt::ckpt {

using namespace detail;  // the private helpers in ckpt/h5_util.h and ckpt/h5_handle.h

namespace {
// A failure while writing `path`, rethrown with the system's cause first when HDF5 reports one
// ("disk full while writing <path> (No space left on device); <context>: <HDF5's stack>").
[[noreturn]] void rethrow_write_error(const std::string& context, const std::string& path, const Error& e) {
    const int err = errno_in_text(e.message());
    if (err != 0) {
        throw IoError(fmt::format("{} while writing {} ({}); {}: {}", io_error_cause(err), path, std::strerror(err),
                                  context, e.message()),
                      nullptr, 0, e.call());
    }
    rethrow_with_context(context, e);
}
}  // namespace

// ================================================================================================
// Writer

struct H5Writer::Impl {
    std::string path;
    std::string tmp_path;
    H5Id file;
    std::set<std::string> datasets;
    std::set<std::string> groups;
    bool committed = false;

    // The open Impl behind a writer; ValueError after commit, failure or move.
    static Impl& live(const std::unique_ptr<Impl>& impl) {
        RLPT_CHECK(impl != nullptr, "H5Writer used after being moved from");
        RLPT_CHECK(impl->file.valid(), "H5Writer for {}: already committed or failed", impl->path);
        return *impl;
    }

    // Rejects a name that was written, is a group, or lies below a dataset; records it.
    void claim(const std::string& name) {
        RLPT_CHECK(datasets.count(name) == 0, "{}: '{}' was already written", path, name);
        RLPT_CHECK(groups.count(name) == 0, "{}: '{}' is already a group of other entries", path, name);
        const std::vector<std::string> parts = split_name(name);
        std::string prefix;
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
            prefix += (i == 0 ? "" : "/") + parts[i];
            RLPT_CHECK(datasets.count(prefix) == 0, "{}: cannot write '{}': '{}' is a dataset", path, name, prefix);
        }
        prefix.clear();
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
            prefix += (i == 0 ? "" : "/") + parts[i];
            groups.insert(prefix);
        }
        datasets.insert(name);
    }

    void write_dataset(const std::string& name, hid_t type, const std::vector<hsize_t>& dims, bool scalar,
                       const void* data, size_t nbytes, const char* kind, const char* dtype_name) {
        H5Id space = scalar ? RLPT_H5_OWN(H5Screate(H5S_SCALAR), H5Sclose)
                            : RLPT_H5_OWN(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
        H5Id lcpl = RLPT_H5_OWN(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
        RLPT_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1));
        H5Id dset =
            RLPT_H5_OWN(H5Dcreate2(file.get(), name.c_str(), type, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
                        H5Dclose);
        if (nbytes > 0) {
            RLPT_H5_CHECK(H5Dwrite(dset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
        }
        put_string_attr(dset.get(), kAttrKind, kind);
        if (dtype_name != nullptr) put_string_attr(dset.get(), kAttrDtype, dtype_name);
        const uint32_t crc = crc32(data, nbytes);
        put_attr(dset.get(), kAttrCrc, H5T_STD_U32LE, &crc);
        dset.close();
    }
};

H5Writer::H5Writer(std::string path) : impl_(std::make_unique<Impl>()) {
    detail::h5_silence_error_printing();
    RLPT_CHECK(!path.empty(), "H5Writer: empty path");
    impl_->path = std::move(path);
    impl_->tmp_path = impl_->path + ".tmp";
    const std::string dir = detail::parent_dir(impl_->path);
    RLPT_CHECK_KIND(IoError, std::filesystem::is_directory(dir),
                    "cannot write checkpoint file {}: directory {} does not exist", impl_->path, dir);
    try {
        H5Id fapl = RLPT_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
        // v1.8 object headers carry checksums of the metadata; readable by HDF5 >= 1.8.
        RLPT_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18));
        // SEMI: closing the file fails loudly if an object is still open instead of deferring.
        RLPT_H5_CHECK(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_SEMI));
        // Locks protect nothing here (unique temporary names) and fail on some parallel FS.
        RLPT_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
        impl_->file = RLPT_H5_OWN(H5Fcreate(impl_->tmp_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
        put_string_attr(impl_->file.get(), kAttrMagic, kMagic);
        put_int_attr(impl_->file.get(), kAttrVersion, kFormatVersion);
    } catch (const Error& e) {
        impl_->file.reset();
        std::remove(impl_->tmp_path.c_str());
        rethrow_write_error("creating the file", impl_->tmp_path, e);
    }
}

H5Writer::~H5Writer() {
    if (!impl_ || impl_->committed) return;
    impl_->file.reset();
    H5Eclear2(H5E_DEFAULT);
    std::remove(impl_->tmp_path.c_str());
}

H5Writer::H5Writer(H5Writer&&) noexcept = default;
H5Writer& H5Writer::operator=(H5Writer&& o) noexcept {
    if (this != &o) {
        H5Writer old(std::move(*this));  // an uncommitted old file is discarded
        impl_ = std::move(o.impl_);
    }
    return *this;
}

const std::string& H5Writer::path() const {
    RLPT_CHECK(impl_ != nullptr, "H5Writer used after being moved from");
    return impl_->path;
}

void H5Writer::write_tensor(const std::string& name, const torch::Tensor& tensor) {
    detail::h5_silence_error_printing();
    Impl::live(impl_);
    check_name(name, "tensor");
    RLPT_CHECK(tensor.defined(), "{}: tensor '{}' is undefined", impl_->path, name);
    RLPT_CHECK(is_supported(tensor.scalar_type()),
               "{}: tensor '{}' has dtype {}, which the checkpoint store does not support", impl_->path, name,
               c10::toString(tensor.scalar_type()));
    impl_->claim(name);
    const StoredType st = stored_type(tensor.scalar_type());
    const torch::Tensor t = tensor.detach().to(torch::kCPU).resolve_conj().resolve_neg().contiguous();
    std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
    if (st.complex) dims.push_back(2);
    const size_t nbytes = size_t(t.numel()) * t.element_size();
    try {
        impl_->write_dataset(name, st.h5, dims, dims.empty(), t.data_ptr(), nbytes, kKindTensor, st.name);
    } catch (const Error& e) {
        rethrow_write_error(fmt::format("writing tensor '{}'", name), impl_->tmp_path, e);
    }
}

void H5Writer::write_blob(const std::string& name, std::string_view bytes) {
    detail::h5_silence_error_printing();
    Impl::live(impl_);
    check_name(name, "blob");
    impl_->claim(name);
    try {
        impl_->write_dataset(name, H5T_STD_U8LE, {hsize_t(bytes.size())}, false, bytes.data(), bytes.size(), kKindBlob,
                             nullptr);
    } catch (const Error& e) {
        rethrow_write_error(fmt::format("writing blob '{}'", name), impl_->tmp_path, e);
    }
}

void H5Writer::set_int_attr(const std::string& name, int64_t value) {
    detail::h5_silence_error_printing();
    Impl::live(impl_);
    check_attr_name(name);
    put_int_attr(impl_->file.get(), name.c_str(), value);
}

void H5Writer::set_double_attr(const std::string& name, double value) {
    detail::h5_silence_error_printing();
    Impl::live(impl_);
    check_attr_name(name);
    put_attr(impl_->file.get(), name.c_str(), H5T_IEEE_F64LE, &value);
}

void H5Writer::set_string_attr(const std::string& name, const std::string& value) {
    detail::h5_silence_error_printing();
    Impl::live(impl_);
    check_attr_name(name);
    RLPT_CHECK(value.find('\0') == std::string::npos,
               "{}: string attribute '{}' contains a NUL byte (store binary data as a blob)", impl_->path, name);
    put_string_attr(impl_->file.get(), name.c_str(), value);
}

FileDigest H5Writer::commit() {
    detail::h5_silence_error_printing();
    Impl::live(impl_);
    try {
        RLPT_H5_CHECK(H5Fflush(impl_->file.get(), H5F_SCOPE_GLOBAL));
        impl_->file.close();
    } catch (const Error& e) {
        impl_->file.reset();
        rethrow_write_error("closing the file", impl_->tmp_path, e);
    }
    detail::fsync_file(impl_->tmp_path);
    const FileDigest digest = file_digest(impl_->tmp_path);
    detail::rename_file(impl_->tmp_path, impl_->path);
    impl_->committed = true;
    fsync_directory(detail::parent_dir(impl_->path));
    return digest;
}

// ================================================================================================
// Reader

struct H5Reader::Impl {
    std::string path;
    H5Id file;
    int64_t version = 0;

    static const Impl& live(const std::unique_ptr<Impl>& impl) {
        RLPT_CHECK(impl != nullptr, "H5Reader used after being moved from");
        return *impl;
    }

    std::string where(const std::string& name) const { return fmt::format("{}: '{}'", path, name); }

    // Opens dataset `name` and checks its rlpt_kind.
    H5Id open_entry(const std::string& name, const char* want_kind) const {
        check_name(name, "entry");
        const Node node = node_at(file.get(), name);
        RLPT_CHECK_KIND(IoError, node != Node::kMissing, "{}: no {} named '{}'", path,
                        want_kind != nullptr ? want_kind : "entry", name);
        RLPT_CHECK_KIND(IoError, node == Node::kDataset, "{}: '{}' is a group, not a {}", path, name,
                        want_kind != nullptr ? want_kind : "dataset");
        H5Id dset = RLPT_H5_OWN(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
        if (want_kind != nullptr) {
            const std::string kind = get_string_attr(dset.get(), kAttrKind, where(name));
            RLPT_CHECK_KIND(IoError, kind == want_kind, "{}: '{}' is a {}, not a {}", path, name, kind, want_kind);
        }
        return dset;
    }

    // dtype, stored type and logical sizes of a tensor dataset, validated against each other.
    TensorMeta meta(hid_t dset, const std::string& name) const {
        const std::string dtype_name = get_string_attr(dset, kAttrDtype, where(name));
        torch::ScalarType dtype = torch::kFloat;
        bool known = false;
        for (torch::ScalarType t : kSupportedDtypes) {
            if (dtype_name == stored_type(t).name) {
                dtype = t;
                known = true;
            }
        }
        RLPT_CHECK_KIND(IoError, known, "{}: tensor '{}' has unknown rlpt_dtype '{}'", path, name, dtype_name);
        const StoredType st = stored_type(dtype);
        H5Id type = RLPT_H5_OWN(H5Dget_type(dset), H5Tclose);
        RLPT_CHECK_KIND(IoError, RLPT_H5_CHECK(H5Tequal(type.get(), st.h5)) > 0,
                        "{}: tensor '{}': the stored HDF5 type does not match rlpt_dtype {}", path, name, dtype_name);
        H5Id space = RLPT_H5_OWN(H5Dget_space(dset), H5Sclose);
        const int rank = RLPT_H5_CHECK(H5Sget_simple_extent_ndims(space.get()));
        std::vector<hsize_t> dims(size_t(rank), 0);
        RLPT_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
        TensorMeta m{dtype, std::vector<int64_t>(dims.begin(), dims.end())};
        if (st.complex) {
            RLPT_CHECK_KIND(IoError, !m.sizes.empty() && m.sizes.back() == 2,
                            "{}: complex tensor '{}' lacks its trailing dimension of 2", path, name);
            m.sizes.pop_back();
        }
        return m;
    }

    void read_checked(hid_t dset, hid_t type, void* data, size_t nbytes, const std::string& name) const {
        if (nbytes > 0) RLPT_H5_CHECK(H5Dread(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
        const int64_t stored = get_int_attr(dset, kAttrCrc, where(name));
        const uint32_t actual = crc32(data, nbytes);
        if (stored != int64_t(actual)) {
            RLPT_THROW(IoError,
                       "{}: checksum mismatch in dataset '{}' (stored CRC-32 {:08x}, computed "
                       "{:08x}): the file is corrupt",
                       path, name, uint32_t(stored), actual);
        }
    }
};

H5Reader::H5Reader(std::string path) : impl_(std::make_unique<Impl>()) {
    detail::h5_silence_error_printing();
    impl_->path = std::move(path);
    const std::string& p = impl_->path;
    RLPT_CHECK_KIND(IoError, std::filesystem::exists(p), "checkpoint file {} does not exist", p);
    RLPT_CHECK_KIND(IoError, std::filesystem::is_regular_file(p), "checkpoint path {} is not a regular file", p);
    try {
        const htri_t is_h5 = RLPT_H5_CHECK(H5Fis_hdf5(p.c_str()));
        RLPT_CHECK_KIND(IoError, is_h5 > 0, "{} is not an HDF5 file", p);
        H5Id fapl = RLPT_H5_OWN(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
        RLPT_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
        impl_->file = RLPT_H5_OWN(H5Fopen(p.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    } catch (const Error& e) {
        rethrow_with_context(fmt::format("opening checkpoint file {}", p), e);
    }
    const hid_t root = impl_->file.get();
    RLPT_CHECK_KIND(IoError, RLPT_H5_CHECK(H5Aexists(root, kAttrMagic)) > 0,
                    "{} is an HDF5 file but not an rlpt checkpoint (no {} attribute)", p, kAttrMagic);
    const std::string magic = get_string_attr(root, kAttrMagic, p);
    RLPT_CHECK_KIND(IoError, magic == kMagic, "{}: wrong magic '{}' (expected '{}')", p, magic, kMagic);
    impl_->version = get_int_attr(root, kAttrVersion, p);
    RLPT_CHECK_KIND(IoError, impl_->version == kFormatVersion,
                    "{}: checkpoint format version {} is not supported (this build reads version {})", p,
                    impl_->version, kFormatVersion);
}

H5Reader::~H5Reader() = default;
H5Reader::H5Reader(H5Reader&&) noexcept = default;
H5Reader& H5Reader::operator=(H5Reader&&) noexcept = default;

const std::string& H5Reader::path() const { return Impl::live(impl_).path; }
int64_t H5Reader::format_version() const { return Impl::live(impl_).version; }

bool H5Reader::contains(const std::string& name) const {
    detail::h5_silence_error_printing();
    check_name(name, "entry");
    return node_at(Impl::live(impl_).file.get(), name) == Node::kDataset;
}

EntryKind H5Reader::kind(const std::string& name) const {
    detail::h5_silence_error_printing();
    const H5Id dset = Impl::live(impl_).open_entry(name, nullptr);
    const std::string kind = get_string_attr(dset.get(), kAttrKind, Impl::live(impl_).where(name));
    if (kind == kKindTensor) return EntryKind::kTensor;
    RLPT_CHECK_KIND(IoError, kind == kKindBlob, "{}: '{}' has unknown rlpt_kind '{}'", Impl::live(impl_).path, name,
                    kind);
    return EntryKind::kBlob;
}

namespace {

struct VisitState {
    std::string prefix;
    std::vector<std::string>* names;
};

herr_t collect_datasets(hid_t group, const char* name, const H5L_info_t* info, void* data) {
    if (info->type != H5L_TYPE_HARD) return 0;
    const hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) return -1;
    const H5I_type_t type = H5Iget_type(obj);
    H5Oclose(obj);
    if (type == H5I_DATASET) {
        auto* st = static_cast<VisitState*>(data);
        st->names->push_back(st->prefix + name);
    }
    return 0;
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
    if (std::string(name).rfind("rlpt_", 0) != 0) {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
    }
    return 0;
}

}  // namespace

std::vector<std::string> H5Reader::list(const std::string& group) const {
    detail::h5_silence_error_printing();
    std::vector<std::string> names;
    VisitState st{group.empty() ? "" : group + "/", &names};
    if (group.empty()) {
        RLPT_H5_CHECK(H5Lvisit(Impl::live(impl_).file.get(), H5_INDEX_NAME, H5_ITER_INC, collect_datasets, &st));
    } else {
        check_name(group, "group");
        const Node node = node_at(Impl::live(impl_).file.get(), group);
        if (node != Node::kGroup) return names;
        const H5Id g = RLPT_H5_OWN(H5Gopen2(Impl::live(impl_).file.get(), group.c_str(), H5P_DEFAULT), H5Gclose);
        RLPT_H5_CHECK(H5Lvisit(g.get(), H5_INDEX_NAME, H5_ITER_INC, collect_datasets, &st));
    }
    std::sort(names.begin(), names.end());
    return names;
}

TensorMeta H5Reader::tensor_meta(const std::string& name) const {
    detail::h5_silence_error_printing();
    const H5Id dset = Impl::live(impl_).open_entry(name, kKindTensor);
    return Impl::live(impl_).meta(dset.get(), name);
}

torch::Tensor H5Reader::read_tensor(const std::string& name) const {
    detail::h5_silence_error_printing();
    try {
        const H5Id dset = Impl::live(impl_).open_entry(name, kKindTensor);
        const TensorMeta m = Impl::live(impl_).meta(dset.get(), name);
        torch::Tensor t = torch::empty(m.sizes, torch::TensorOptions().dtype(m.dtype));
        Impl::live(impl_).read_checked(dset.get(), stored_type(m.dtype).h5, t.data_ptr(),
                                       size_t(t.numel()) * t.element_size(), name);
        return t;
    } catch (const IoError&) {
        throw;
    } catch (const Error& e) {
        rethrow_with_context(fmt::format("reading tensor '{}' from {}", name, Impl::live(impl_).path), e);
    } catch (const c10::Error& e) {  // e.g. a corrupt shape too large to allocate
        RLPT_THROW(IoError, "reading tensor '{}' from {}: {}", name, Impl::live(impl_).path,
                   e.what_without_backtrace());
    }
}

torch::Tensor H5Reader::read_tensor_range(const std::string& name, int64_t begin, int64_t count) const {
    detail::h5_silence_error_printing();
    const auto& impl = Impl::live(impl_);
    const H5Id dset = impl.open_entry(name, kKindTensor);
    const TensorMeta m = impl.meta(dset.get(), name);
    const StoredType st = stored_type(m.dtype);
    RLPT_CHECK_KIND(IoError, m.sizes.size() == 1 && !st.complex, "{}: tensor '{}' is not a 1-D real tensor", impl.path,
                    name);
    RLPT_CHECK_KIND(IoError, begin >= 0 && count >= 0 && begin + count <= m.sizes[0],
                    "{}: elements [{}, {}) of tensor '{}' are outside its {} elements", impl.path, begin, begin + count,
                    name, m.sizes[0]);
    torch::Tensor t = torch::empty({count}, torch::TensorOptions().dtype(m.dtype));
    if (count == 0) return t;
    H5Id file_space = RLPT_H5_OWN(H5Dget_space(dset.get()), H5Sclose);
    const hsize_t start = hsize_t(begin), n = hsize_t(count);
    RLPT_H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &n, nullptr));
    H5Id mem_space = RLPT_H5_OWN(H5Screate_simple(1, &n, nullptr), H5Sclose);
    RLPT_H5_CHECK(H5Dread(dset.get(), st.h5, mem_space.get(), file_space.get(), H5P_DEFAULT, t.data_ptr()));
    return t;
}

std::string H5Reader::read_blob(const std::string& name) const {
    detail::h5_silence_error_printing();
    const H5Id dset = Impl::live(impl_).open_entry(name, kKindBlob);
    H5Id space = RLPT_H5_OWN(H5Dget_space(dset.get()), H5Sclose);
    RLPT_CHECK_KIND(IoError, RLPT_H5_CHECK(H5Sget_simple_extent_ndims(space.get())) == 1, "{}: blob '{}' is not 1-D",
                    Impl::live(impl_).path, name);
    std::string bytes(size_t(RLPT_H5_CHECK(H5Sget_simple_extent_npoints(space.get()))), '\0');
    Impl::live(impl_).read_checked(dset.get(), H5T_STD_U8LE, bytes.data(), bytes.size(), name);
    return bytes;
}

bool H5Reader::has_attr(const std::string& name) const {
    detail::h5_silence_error_printing();
    return !name.empty() && RLPT_H5_CHECK(H5Aexists(Impl::live(impl_).file.get(), name.c_str())) > 0;
}

std::vector<std::string> H5Reader::attr_names() const {
    detail::h5_silence_error_printing();
    std::vector<std::string> names;
    hsize_t idx = 0;
    RLPT_H5_CHECK(H5Aiterate2(Impl::live(impl_).file.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names));
    std::sort(names.begin(), names.end());
    return names;
}

int64_t H5Reader::int_attr(const std::string& name) const {
    detail::h5_silence_error_printing();
    return get_int_attr(Impl::live(impl_).file.get(), name.c_str(), Impl::live(impl_).path);
}

double H5Reader::double_attr(const std::string& name) const {
    detail::h5_silence_error_printing();
    return get_double_attr(Impl::live(impl_).file.get(), name.c_str(), Impl::live(impl_).path);
}

std::string H5Reader::string_attr(const std::string& name) const {
    detail::h5_silence_error_printing();
    return get_string_attr(Impl::live(impl_).file.get(), name.c_str(), Impl::live(impl_).path);
}

}  // namespace rlpt::ckpt
