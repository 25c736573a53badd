// POSIX helpers shared by the local-file code of src/io/: errno to
// absl::Status, and a write() loop.
#ifndef STOKER_IO_POSIX_IO_H_
#define STOKER_IO_POSIX_IO_H_

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "util/strings.h"

namespace stoker::io {

// "<what> <path>: <strerror>" with the code a caller can act on: NotFound,
// PermissionDenied, ResourceExhausted (disk or quota full, file too large),
// InvalidArgument, else Internal.
inline absl::Status ErrnoToStatus(int err, std::string_view what, std::string_view path) {
  std::string msg = stoker::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(msg);
    case EISDIR:
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// Reads exactly n bytes at `offset` with pread, retrying short reads and
// EINTR; a file that ends early is DataLoss. Errors name `path`.
inline absl::Status ReadFully(int fd, uint64_t offset, size_t n, char* dst,
                              std::string_view path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "cannot read", path);
    }
    if (r == 0) {
      return absl::DataLossError(stoker::StrCat(path, " ended at offset ", offset + done,
                                                " while ", n - done,
                                                " more bytes were expected (file shrank?)"));
    }
    done += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

// Writes all of `data` to fd, retrying short writes and EINTR; errors name
// `path`.
inline absl::Status WriteFully(int fd, std::string_view data, std::string_view path) {
  while (!data.empty()) {
    const ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
  return absl::OkStatus();
}

}  // namespace stoker::io

#endif  // STOKER_IO_POSIX_IO_H_
