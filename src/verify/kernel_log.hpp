#pragma once
// The kernel log since boot, as /dev/kmsg hands it out, read through util::HostFs so that a --root
// fixture stands in for the machine.
//
// /dev/kmsg (the kernel's Documentation/ABI/testing/dev-kmsg): every read(2) returns one record,
// "PRI,SEQ,USEC,FLAGS[,...];MESSAGE\n", followed by continuation lines " KEY=VALUE\n" (the record's
// dictionary); USEC is the record's timestamp in microseconds since boot (the kernel's monotonic
// log clock), unprintable bytes of MESSAGE come escaped as \xNN. Opened with O_NONBLOCK, a read
// after the last record fails with EAGAIN; a record overwritten in the ring buffer since the reader
// opened it gives EPIPE once (the next read returns the oldest record still there). Opening it
// needs CAP_SYSLOG when kernel.dmesg_restrict is 1 (Documentation/admin-guide/sysctl/kernel.rst).
//
// Under a fixture root /dev/kmsg is a regular file holding records in the same text form, one per
// line, read whole. No seam in HostFs is needed: HostFs::open opens the character device on the
// real root (O_NONBLOCK), and this file reads it record by record.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::verify {

inline constexpr const char* kKmsgPath = "/dev/kmsg";
// How much of the kernel log is read at most. The ring buffer is 2^CONFIG_LOG_BUF_SHIFT bytes
// (12 to 25: at most 32 MiB, init/Kconfig) unless log_buf_len= enlarges it; the text form is a
// little larger than the stored records. Our choice: 64 MiB, so a kernel logging faster than it is
// read cannot keep the reader going for ever.
inline constexpr util::FileBound kKernelLogBound{64 * 1024 * 1024, "the kernel log"};

struct KernelRecord {
  int priority = 0;       // syslog facility * 8 + level
  std::uint64_t seq = 0;  // the record's sequence number
  std::uint64_t usec = 0; // microseconds since boot
  std::string message;    // MESSAGE as the kernel wrote it (\xNN escapes kept)
};

// One record's first line, "PRI,SEQ,USEC,FLAGS[,...];MESSAGE" (a trailing newline and continuation
// lines are ignored); nullopt when it is not one.
std::optional<KernelRecord> parse_kmsg_record(std::string_view text);
// A text of records, one per line (a fixture, a saved copy): continuation lines (" KEY=VALUE") and
// lines that are not records are skipped.
std::vector<KernelRecord> parse_kmsg_text(std::string_view text);

struct KernelLog {
  std::vector<KernelRecord> records;
  std::string source;                   // "/dev/kmsg", or the fixture file's path
  std::optional<double> uptime_seconds; // /proc/uptime when read: "now" on the records' clock
  std::uint64_t lost = 0;               // records overwritten while they were read (EPIPE)
};

// The kernel log still in the ring buffer. Errors: no /dev/kmsg, not allowed to open it (saying
// why: CAP_SYSLOG and kernel.dmesg_restrict), a read error, more than kKernelLogBound.
Result<KernelLog> read_kernel_log(const util::HostFs& fs);

// The records no older than `window` before now (/proc/uptime); all of them when now is unknown.
std::vector<const KernelRecord*> records_within(const KernelLog& log, std::chrono::seconds window);

} // namespace hpcbake::verify
