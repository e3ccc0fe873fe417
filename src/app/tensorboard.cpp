#include "tensorboard.h"

#include <time.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "rlpt/core/error.h"

namespace rlpt::app {
namespace {

const std::array<uint32_t, 256>& crc_table() {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;  // reflected 0x1EDC6F41
            t[i] = c;
        }
        return t;
    }();
    return table;
}

uint32_t masked_crc(const std::string& s) {
    const uint32_t c = crc32c(s.data(), s.size());
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// Protobuf wire format: varints, fixed little-endian numbers, length-delimited fields.
void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out += static_cast<char>((v & 0x7f) | 0x80);
        v >>= 7;
    }
    out += static_cast<char>(v);
}

template <typename T>
void put_fixed(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // x86/ARM little-endian, as protobuf's fixed types
    out.append(b, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
    put_varint(out, static_cast<uint64_t>(field) << 3 | 2);
    put_varint(out, bytes.size());
    out += bytes;
}

std::string event_header(double wall_time) {
    std::string e;
    put_varint(e, 1 << 3 | 1);
    put_fixed(e, wall_time);
    put_bytes(e, 3, "brain.Event:2");
    return e;
}

double wall_time_now() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
    const auto& t = crc_table();
    const auto* p = static_cast<const unsigned char*>(data);
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    char host[256] = "localhost";
    ::gethostname(host, sizeof(host) - 1);
    const double now = wall_time_now();
    path_ = (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(now), host))
                .string();
    out_.open(path_, std::ios::binary | std::ios::trunc);
    RLPT_CHECK_KIND(IoError, out_.good(), "cannot write the TensorBoard event file {}", path_);
    write_record(event_header(now));
}

void TensorBoardWriter::add_scalars(int64_t step, const std::map<std::string, double>& metrics) {
    std::string summary;
    for (const auto& [tag, v] : metrics) {
        if (!std::isfinite(v)) continue;
        std::string value;
        put_bytes(value, 1, tag);
        put_varint(value, 2 << 3 | 5);
        put_fixed(value, static_cast<float>(v));
        put_bytes(summary, 1, value);
    }
    std::string e;
    put_varint(e, 1 << 3 | 1);
    put_fixed(e, wall_time_now());
    put_varint(e, 2 << 3 | 0);
    put_varint(e, static_cast<uint64_t>(step));
    put_bytes(e, 5, summary);
    write_record(e);
}

void TensorBoardWriter::write_record(const std::string& data) {
    std::string len;
    put_fixed(len, static_cast<uint64_t>(data.size()));
    std::string rec = len;
    put_fixed(rec, masked_crc(len));
    rec += data;
    put_fixed(rec, masked_crc(data));
    out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
    out_.flush();
    RLPT_CHECK_KIND(IoError, out_.good(), "cannot write the TensorBoard event file {}", path_);
}

}  // namespace rlpt::app
