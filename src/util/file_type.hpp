#pragma once
// The name of a file type for messages that refuse a file which is not a regular one ("is a
// FIFO, not a regular file"): HostFs's reads and the initramfs reader say it the same way.
#include <sys/stat.h>

namespace hpcbake::util {

inline const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

} // namespace hpcbake::util
