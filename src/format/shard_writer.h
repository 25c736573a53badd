// Writes one stoker shard (see shard_format.h).
#ifndef STOKER_FORMAT_SHARD_WRITER_H_
#define STOKER_FORMAT_SHARD_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "format/shard_format.h"
#include "io/writable_file.h"

namespace stoker::shard {

// Appends records to a shard file and, on Finish(), writes the index and
// footer and publishes the file (write to a temporary name, then rename).
// A writer destroyed before Finish() leaves nothing under the final name.
//
// Thread-safety: not safe for concurrent use.
class ShardWriter {
 public:
  explicit ShardWriter(std::unique_ptr<io::WritableFile> file);

  // Appends one record. Returns InvalidArgument if a field exceeds its cap
  // (kMaxKeyBytes, kMaxMetaBytes, kMaxPayloadBytes) or the label is < -1.
  absl::Status Add(std::string_view key, int32_t label, std::string_view meta,
                   std::string_view payload);

  // Writes index and footer, then publishes. REQUIRES: called at most once.
  absl::Status Finish();

  uint64_t records() const { return index_.size(); }
  // Bytes written so far, header included (index and footer excluded until
  // Finish()).
  uint64_t bytes() const { return file_->size(); }
  // Masked-free CRC-32C of every byte of the finished shard; valid after Finish().
  uint32_t file_crc32c() const { return file_crc_; }

 private:
  absl::Status Write(std::string_view bytes);

  std::unique_ptr<io::WritableFile> file_;
  std::vector<IndexEntry> index_;
  uint32_t file_crc_ = 0;
  absl::Status status_;
};

}  // namespace stoker::shard

#endif  // STOKER_FORMAT_SHARD_WRITER_H_
