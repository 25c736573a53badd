// Sequential writers for output files (shards, manifests).
#ifndef STOKER_IO_WRITABLE_FILE_H_
#define STOKER_IO_WRITABLE_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::io {

// An append-only file that becomes visible under its final name only when
// Commit() succeeds: the bytes go to a unique temporary file beside it, and
// Commit() fsyncs and renames. Destroying it without Commit() removes the
// temporary file, so an interrupted writer never leaves a half file under the
// final name.
//
// Thread-safety: not safe for concurrent use; one writer per file.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(std::string_view data) = 0;
  // Bytes appended so far.
  virtual uint64_t size() const = 0;
  // Flushes, fsyncs and publishes under the final name. REQUIRES: called once.
  virtual absl::Status Commit() = 0;
  virtual const std::string& name() const = 0;
};

// Creates a writer for local `path`; the folder must exist.
absl::StatusOr<std::unique_ptr<WritableFile>> NewLocalWritableFile(const std::string& path);

}  // namespace stoker::io

#endif  // STOKER_IO_WRITABLE_FILE_H_
