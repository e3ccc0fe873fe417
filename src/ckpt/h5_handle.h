#pragma once
// Private HDF5 helpers of the checkpoint store: RLPT_H5_CHECK and move-only RAII handles.
//
// RLPT_H5_CHECK(call) evaluates an HDF5 call and returns its value (hid_t, herr_t, htri_t,
// ssize_t, ...); a negative value throws IoError carrying the call text and HDF5's own error
// stack, which h5_silence_error_printing() keeps off stderr. It is an expression rather than a
// do/while statement because most HDF5 calls return the handle the caller needs.

#include <hdf5.h>

#include <string>
#include <utility>

namespace rlpt::ckpt::detail {

// Turns off HDF5's automatic error-stack printing for the calling thread (HDF5 keeps that
// setting per thread in thread-safe builds). Cheap; called at every entry point.
void h5_silence_error_printing();

// The current thread's HDF5 error stack as one line ("H5Fopen(): unable to open file: ...; ..."),
// innermost cause last; clears the stack.
std::string h5_error_stack();

[[noreturn]] void h5_fail(const char* call, const char* file, int line);

template <typename T>
T h5_check(T result, const char* call, const char* file, int line) {
    if (result < 0) h5_fail(call, file, line);
    return result;
}

// A move-only owner of one HDF5 identifier, closed with the matching H5*close function.
class H5Id {
  public:
    using Closer = herr_t (*)(hid_t);
    H5Id() = default;
    H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
    ~H5Id() { reset(); }
    H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
    H5Id& operator=(H5Id&& o) noexcept {
        if (this != &o) {
            reset();
            id_ = std::exchange(o.id_, H5I_INVALID_HID);
            closer_ = o.closer_;
        }
        return *this;
    }
    H5Id(const H5Id&) = delete;
    H5Id& operator=(const H5Id&) = delete;

    hid_t get() const { return id_; }
    bool valid() const { return id_ >= 0; }
    // Closes now and reports failure (the destructor ignores it).
    void close();
    void reset() noexcept {
        if (id_ >= 0 && closer_ != nullptr) closer_(id_);
        id_ = H5I_INVALID_HID;
    }

  private:
    hid_t id_ = H5I_INVALID_HID;
    Closer closer_ = nullptr;
};

}  // namespace rlpt::ckpt::detail

#define RLPT_H5_CHECK(call) ::rlpt::ckpt::detail::h5_check((call), #call, __FILE__, __LINE__)

// RLPT_H5_OWN(H5Fopen(...), H5Fclose): checks the call and owns the identifier it returns.
// (Stringises `call` itself: passed on to RLPT_H5_CHECK it would be macro-expanded first.)
#define RLPT_H5_OWN(call, closer) \
    ::rlpt::ckpt::detail::H5Id(::rlpt::ckpt::detail::h5_check((call), #call, __FILE__, __LINE__), closer)
