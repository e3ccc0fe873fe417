#pragma once
// The wire format between the controller and the workers, defined once (STYLE §5).
// Torch-free, MPI-free: plain structs and constants.
//
// A call is one command message + one data message per non-empty tensor column:
//   [CommandHeader][batch layout bytes]     tag kTagCommand,      controller -> worker
//   [column bytes] ...                      tag kTagCommandData,  controller -> worker
// and a reply is the same shape back:
//   [ReplyHeader][layout bytes | error text] tag kTagReply,       worker -> controller
//   [column bytes] ...                      tag kTagReplyData,    worker -> controller
// All of them travel on the control communicator (a dup of MPI_COMM_WORLD used for nothing
// else). Command and reply messages travel as envelopes (rlpt/protocol/batch_transport.h: inline up to
// 8 KiB into receives posted in advance; longer ones announce their length and follow on
// the tag + 1). MPI keeps
// messages with the same (source, tag, communicator) in order, so data messages need no
// sequence numbers. Every rank answers every call it takes part in (output sources with the
// payload, the others with status only), so an error on any rank reaches the controller.
//
// The batch layout (src/batch/batch_codec.cpp) describes rows, columns (name, dtype code,
// shape, bytes), string and int fields, meta and metrics; column bytes are the tensors'
// storage as is (C-contiguous, host byte order). Both ends are the same binary (the role
// tables' hash is agreed at start-up), so host byte order is fine.

#include <cstdint>

namespace rlpt::wire {

constexpr uint32_t kMagic = 0x544c5052u;  // "RPLT"
constexpr uint16_t kVersion = 1;

constexpr int kTagCommand = 101;  // + 1: long command messages
constexpr int kTagCommandData = 103;
constexpr int kTagReply = 111;  // + 1: long reply messages
constexpr int kTagReplyData = 113;
// Worker -> controller while the worker waits inside a call (a collective, its inputs): "alive,
// waiting in <what>". Lets the watchdog tell a stopped rank from the ranks waiting for it.
constexpr int kTagHeartbeat = 121;  // (+ 1 unused: heartbeats are always short)

enum class CommandKind : uint8_t { kCall = 1, kShutdown = 2 };
enum class ReplyStatus : uint8_t { kOk = 0, kError = 1 };

#pragma pack(push, 1)
struct CommandHeader {
    uint32_t magic = kMagic;
    uint16_t version = kVersion;
    uint8_t kind = 0;        // CommandKind
    uint8_t role = 0;        // index into the role registry
    uint16_t method = 0;     // index into the role's method table
    uint16_t exit_code = 0;  // kShutdown: the code the workers exit with (75 after a stop signal)
    uint64_t seq = 0;        // call sequence number (per controller)
    int64_t step = -1;       // training step, for error messages
};

struct ReplyHeader {
    uint32_t magic = kMagic;
    uint16_t version = kVersion;
    uint8_t status = 0;  // ReplyStatus
    uint8_t role = 0;
    uint16_t method = 0;
    uint8_t has_payload = 0;  // 1: layout bytes + data messages follow
    uint8_t stop_signal = 0;  // SIGTERM/SIGUSR1 this worker's process has received (0: none)
    int32_t world_rank = -1;
    uint64_t seq = 0;
};

// Followed by the text of what the worker waits for ("gradient all-reduce").
struct HeartbeatHeader {
    uint32_t magic = kMagic;
    uint16_t version = kVersion;
    uint16_t reserved = 0;
    uint64_t seq = 0;        // the call the worker is in
    uint32_t waited_ms = 0;  // how long this wait has lasted
};
#pragma pack(pop)

// Stable dtype codes on the wire (independent of torch's enum values).
enum class DType : uint8_t {
    kUInt8 = 1,
    kInt8 = 2,
    kInt16 = 3,
    kInt32 = 4,
    kInt64 = 5,
    kFloat16 = 6,
    kBFloat16 = 7,
    kFloat32 = 8,
    kFloat64 = 9,
    kBool = 10,
    kComplex64 = 11,
    kComplex128 = 12,
};

}  // namespace rlpt::wire
