#include "ckpt/h5_util.h"

#include <algorithm>

#include "rlpt/core/error.h"

namespace rlpt::ckpt::detail {

// ---- dtypes ------------------------------------------------------------------------------------

bool is_supported(torch::ScalarType t) {
    return std::find(std::begin(kSupportedDtypes), std::end(kSupportedDtypes), t) != std::end(kSupportedDtypes);
}

StoredType stored_type(torch::ScalarType t) {
    switch (t) {
        case torch::kFloat: return {H5T_IEEE_F32LE, "float32", false};
        case torch::kDouble: return {H5T_IEEE_F64LE, "float64", false};
        case torch::kHalf: return {H5T_STD_U16LE, "float16", false};
        case torch::kBFloat16: return {H5T_STD_U16LE, "bfloat16", false};
        case torch::kBool: return {H5T_STD_U8LE, "bool", false};
        case torch::kByte: return {H5T_STD_U8LE, "uint8", false};
        case torch::kChar: return {H5T_STD_I8LE, "int8", false};
        case torch::kShort: return {H5T_STD_I16LE, "int16", false};
        case torch::kInt: return {H5T_STD_I32LE, "int32", false};
        case torch::kLong: return {H5T_STD_I64LE, "int64", false};
        case torch::kComplexFloat: return {H5T_IEEE_F32LE, "complex64", true};
        case torch::kComplexDouble: return {H5T_IEEE_F64LE, "complex128", true};
        default: break;
    }
    RLPT_THROW(ValueError, "dtype {} is not supported by the checkpoint store", c10::toString(t));
}

// ---- names -------------------------------------------------------------------------------------

std::vector<std::string> split_name(const std::string& name) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t slash = name.find('/', start);
        parts.push_back(name.substr(start, slash == std::string::npos ? slash : slash - start));
        if (slash == std::string::npos) break;
        start = slash + 1;
    }
    return parts;
}

void check_name(const std::string& name, const char* what) {
    RLPT_CHECK(!name.empty(), "{} name is empty", what);
    RLPT_CHECK(name.find('\0') == std::string::npos, "{} name '{}' contains a NUL byte", what, name);
    RLPT_CHECK(name.front() != '/' && name.back() != '/', "{} name '{}' must not start or end with '/'", what, name);
    for (const std::string& part : split_name(name)) {
        RLPT_CHECK(!part.empty() && part != "." && part != "..", "{} name '{}' has an empty, '.' or '..' component",
                   what, name);
    }
}

void check_attr_name(const std::string& name) {
    RLPT_CHECK(!name.empty() && name.find('\0') == std::string::npos,
               "attribute name '{}' is empty or contains a NUL byte", name);
    RLPT_CHECK(name.rfind("rlpt_", 0) != 0, "attribute name '{}' uses the reserved prefix rlpt_", name);
}

// ---- attributes --------------------------------------------------------------------------------

void put_attr(hid_t obj, const char* name, hid_t type, const void* value) {
    if (RLPT_H5_CHECK(H5Aexists(obj, name)) > 0) RLPT_H5_CHECK(H5Adelete(obj, name));
    H5Id space = RLPT_H5_OWN(H5Screate(H5S_SCALAR), H5Sclose);
    H5Id attr = RLPT_H5_OWN(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    RLPT_H5_CHECK(H5Awrite(attr.get(), type, value));
    attr.close();
}

void put_string_attr(hid_t obj, const char* name, const std::string& value) {
    H5Id type = RLPT_H5_OWN(H5Tcopy(H5T_C_S1), H5Tclose);
    RLPT_H5_CHECK(H5Tset_size(type.get(), value.size() + 1));
    RLPT_H5_CHECK(H5Tset_strpad(type.get(), H5T_STR_NULLTERM));
    RLPT_H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8));
    put_attr(obj, name, type.get(), value.c_str());
}

void put_int_attr(hid_t obj, const char* name, int64_t value) { put_attr(obj, name, H5T_STD_I64LE, &value); }

namespace {

// Opens a scalar attribute of the expected class. `where` names the object for messages.
H5Id open_attr(hid_t obj, const char* name, H5T_class_t want, const char* want_name, const std::string& where) {
    RLPT_CHECK_KIND(IoError, RLPT_H5_CHECK(H5Aexists(obj, name)) > 0, "{}: no attribute '{}'", where, name);
    H5Id attr = RLPT_H5_OWN(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    H5Id type = RLPT_H5_OWN(H5Aget_type(attr.get()), H5Tclose);
    H5Id space = RLPT_H5_OWN(H5Aget_space(attr.get()), H5Sclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    const char* got = cls == H5T_INTEGER  ? "int64"
                      : cls == H5T_FLOAT  ? "double"
                      : cls == H5T_STRING ? "string"
                                          : "non-scalar type";
    RLPT_CHECK_KIND(IoError, cls == want, "{}: attribute '{}' is a {}, not a {}", where, name, got, want_name);
    RLPT_CHECK_KIND(IoError, RLPT_H5_CHECK(H5Sget_simple_extent_npoints(space.get())) == 1,
                    "{}: attribute '{}' is not a scalar", where, name);
    return attr;
}

}  // namespace

int64_t get_int_attr(hid_t obj, const char* name, const std::string& where) {
    const H5Id attr = open_attr(obj, name, H5T_INTEGER, "int64", where);
    int64_t value = 0;
    RLPT_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &value));
    return value;
}

double get_double_attr(hid_t obj, const char* name, const std::string& where) {
    const H5Id attr = open_attr(obj, name, H5T_FLOAT, "double", where);
    double value = 0;
    RLPT_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value));
    return value;
}

std::string get_string_attr(hid_t obj, const char* name, const std::string& where) {
    const H5Id attr = open_attr(obj, name, H5T_STRING, "string", where);
    H5Id type = RLPT_H5_OWN(H5Aget_type(attr.get()), H5Tclose);
    if (RLPT_H5_CHECK(H5Tis_variable_str(type.get())) > 0) {  // e.g. written by h5py
        H5Id mem = RLPT_H5_OWN(H5Tcopy(H5T_C_S1), H5Tclose);
        RLPT_H5_CHECK(H5Tset_size(mem.get(), H5T_VARIABLE));
        char* buf = nullptr;
        RLPT_H5_CHECK(H5Aread(attr.get(), mem.get(), &buf));
        std::string value = buf != nullptr ? buf : "";
        H5free_memory(buf);
        return value;
    }
    const size_t size = H5Tget_size(type.get());
    std::string buf(size, '\0');
    RLPT_H5_CHECK(H5Aread(attr.get(), type.get(), buf.data()));
    buf.resize(std::min(buf.find('\0'), buf.size()));
    return buf;
}

// ---- objects -----------------------------------------------------------------------------------

Node node_at(hid_t file, const std::string& name) {
    std::string prefix;
    const std::vector<std::string> parts = split_name(name);
    for (size_t i = 0; i < parts.size(); ++i) {
        prefix += (i == 0 ? "" : "/") + parts[i];
        if (RLPT_H5_CHECK(H5Lexists(file, prefix.c_str(), H5P_DEFAULT)) <= 0) return Node::kMissing;
        const H5Id obj = RLPT_H5_OWN(H5Oopen(file, prefix.c_str(), H5P_DEFAULT), H5Oclose);
        const H5I_type_t type = H5Iget_type(obj.get());
        if (i + 1 < parts.size()) {
            if (type != H5I_GROUP) return Node::kMissing;
            continue;
        }
        return type == H5I_DATASET ? Node::kDataset : type == H5I_GROUP ? Node::kGroup : Node::kOther;
    }
    return Node::kMissing;
}

}  // namespace rlpt::ckpt::detail
