// errno to absl::Status, shared by the local-file code of src/io/.
#ifndef STOKER_IO_ERRNO_STATUS_H_
#define STOKER_IO_ERRNO_STATUS_H_

#include <cerrno>
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

}  // namespace stoker::io

#endif  // STOKER_IO_ERRNO_STATUS_H_
