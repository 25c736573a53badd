// Byte sources: the one narrow interface every reader of stoker reads through
// (local files now; S3 and the node cache later), plus the fakes tests use.
#ifndef STOKER_IO_BYTE_SOURCE_H_
#define STOKER_IO_BYTE_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::io {

// A read-only sequence of bytes of known size.
//
// Thread-safety: implementations are safe for concurrent use; ReadAt is
// const and carries no cursor.
class ByteSource {
 public:
  virtual ~ByteSource() = default;

  // Reads exactly n bytes at `offset` into dst.
  // Returns OutOfRange if [offset, offset+n) is not inside [0, size()),
  // DataLoss if the source ended early (a short read is never returned as
  // success), or the underlying I/O error.
  virtual absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const = 0;

  // Reads several ranges, as ReadAt each. Sources that can fetch them
  // concurrently do (S3: one request each, all in flight at once); the
  // default reads them one after another.
  struct Range {
    uint64_t offset = 0;
    size_t n = 0;
    char* dst = nullptr;
  };
  virtual absl::Status ReadRanges(std::span<const Range> ranges) const {
    for (const Range& r : ranges) {
      if (absl::Status s = ReadAt(r.offset, r.n, r.dst); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Total size in bytes, fixed for the life of the object.
  virtual uint64_t size() const = 0;

  // A human-readable name used in every error message (path or URI).
  virtual const std::string& name() const = 0;

  // A read size that uses the medium well; callers may read in larger or
  // smaller pieces. Default: 4 MiB.
  virtual size_t preferred_read_size() const { return size_t{4} << 20; }

  // Identifies this version of the bytes (an object's ETag); "" when the
  // medium has no such notion. Cache keys include it.
  virtual std::string version() const { return ""; }
};

// Opens a local file for reading. Returns NotFound naming the path if it does
// not exist, PermissionDenied if it cannot be opened.
absl::StatusOr<std::unique_ptr<ByteSource>> OpenLocalFile(const std::string& path);

// A source over the first `size` bytes of an open file descriptor, which it
// owns and closes; then calls `on_close` if set. Reads are preads of exactly
// the bytes asked for (a file that ends early is DataLoss naming `name`).
std::unique_ptr<ByteSource> MakeFdSource(int fd, uint64_t size, std::string name,
                                         std::function<void()> on_close = {});

// A source over bytes held in memory; `name` appears in errors. Tests use it
// to feed truncated or corrupted shards to readers.
std::unique_ptr<ByteSource> MakeMemorySource(std::string bytes, std::string name);

// Forwards to a wrapped source; subclass it to intercept some calls.
// `base` must remain live while this wrapper is used.
class ByteSourceWrapper : public ByteSource {
 public:
  explicit ByteSourceWrapper(const ByteSource* base) : base_(base) {}
  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    return base_->ReadAt(offset, n, dst);
  }
  uint64_t size() const override { return base_->size(); }
  const std::string& name() const override { return base_->name(); }
  size_t preferred_read_size() const override { return base_->preferred_read_size(); }
  std::string version() const override { return base_->version(); }

 protected:
  const ByteSource* base_;
};

// A fault injector for tests: fails every read that touches
// [fail_from, fail_to) with `error`, and flips the bits of `xor_mask` at
// `flip_offset` in the bytes returned.
struct FaultSpec {
  uint64_t fail_from = UINT64_MAX;
  uint64_t fail_to = UINT64_MAX;
  absl::Status error = absl::UnavailableError("injected fault");
  uint64_t flip_offset = UINT64_MAX;
  uint8_t xor_mask = 0;
};
std::unique_ptr<ByteSource> MakeFaultySource(const ByteSource* base, FaultSpec spec);

// Reads the whole source into a string (for small sources: manifests, tests).
absl::StatusOr<std::string> ReadAll(const ByteSource& source);

// Reads a whole local file. Returns NotFound / PermissionDenied / DataLoss
// naming the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `data` to `path` atomically: a unique temporary file in the same
// folder, fsync, rename over `path`, fsync of the folder. Readers see either
// the old file or the new one, never a torn one.
absl::Status WriteFileAtomically(const std::string& path, std::string_view data);

}  // namespace stoker::io

#endif  // STOKER_IO_BYTE_SOURCE_H_
