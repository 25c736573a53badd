// Where datasets live, by URI: a local path or s3://bucket/prefix. Every
// reader and writer of stoker goes through these functions, so `stoker pack`,
// `inspect`, `verify`, `bench` and the Loader take either kind of location.
#ifndef STOKER_IO_STORAGE_H_
#define STOKER_IO_STORAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "io/byte_source.h"
#include "io/s3.h"
#include "io/writable_file.h"

namespace stoker::io {

// How to reach S3 (ignored for local paths). Unset fields come from the
// environment (see S3Config::FromEnvironment).
struct StorageOptions {
  std::optional<std::string> endpoint_url;  // else AWS_ENDPOINT_URL(_S3)
  bool anonymous = false;                   // unsigned requests, only when asked
};

// The process's S3 client for these options: created on first use and
// shared, so connections and the retry budget are shared too.
absl::StatusOr<std::shared_ptr<S3Client>> SharedS3Client(const StorageOptions& options);

// Opens a file or object for reading. For S3, `size` and `etag` (from a
// manifest or a listing) save a HEAD; the ETag is pinned either way.
absl::StatusOr<std::unique_ptr<ByteSource>> OpenUri(const std::string& uri,
                                                    const StorageOptions& options = {});

// The whole content of a small file or object (a manifest).
absl::StatusOr<std::string> ReadUri(const std::string& uri, const StorageOptions& options = {});

// A writer that publishes `uri` only on Commit (a renamed temporary file, or
// a completed multipart upload).
absl::StatusOr<std::unique_ptr<WritableFile>> NewUriWriter(const std::string& uri,
                                                           const StorageOptions& options = {});

absl::Status WriteUriAtomically(const std::string& uri, std::string_view data,
                                const StorageOptions& options = {});

// Removes a file or object; one that does not exist is not an error.
absl::Status RemoveUri(const std::string& uri, const StorageOptions& options = {});

// Creates a local folder and its parents; nothing to do for S3 prefixes.
absl::Status MakeFolder(const std::string& uri);

// Joins a folder or prefix URI and a name with one '/'.
std::string JoinUri(std::string_view base, std::string_view name);

}  // namespace stoker::io

#endif  // STOKER_IO_STORAGE_H_
