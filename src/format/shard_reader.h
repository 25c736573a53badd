// Reads stoker shards (see shard_format.h): random access through the index,
// and a front-to-back verification scan.
#ifndef STOKER_FORMAT_SHARD_READER_H_
#define STOKER_FORMAT_SHARD_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "format/shard_format.h"
#include "io/byte_source.h"

namespace stoker::shard {

// One record's fields; the views point into a buffer owned by the caller and
// stay valid while that buffer is unchanged.
struct RecordView {
  std::string_view key;
  std::string_view meta;
  std::string_view payload;
  int32_t label = kNoLabel;
  uint64_t offset = 0;  // of the record header within the shard
};

// Parses and checks the record whose bytes are exactly `bytes` (header, key,
// meta, payload). Returns DataLoss naming `shard`, `offset` and, when the
// header is readable, the key, if the magic, the lengths or the CRC are wrong.
absl::Status ParseRecord(std::string_view bytes, uint64_t offset, std::string_view shard,
                         RecordView* out);

// Random access to the records of one shard.
//
// Open() checks the file header, the footer and the index (magic numbers,
// versions, CRCs, and that the index lies exactly before the footer and its
// entries tile the record area), so a truncated or damaged shard is refused
// before any record is read.
//
// Thread-safety: ReadRecord is const and safe for concurrent use.
class ShardReader {
 public:
  // Returns DataLoss naming the shard when its structure is damaged or
  // truncated, FailedPrecondition for an unknown format version. With
  // `expected_records` (the manifest's count) the index and the footer come
  // in one read of the shard's tail (one request on an object store); a
  // wrong count costs one more read, never a wrong index.
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(
      std::shared_ptr<const io::ByteSource> source,
      std::optional<uint64_t> expected_records = std::nullopt);

  // A reader with the same (already checked) index that reads records from
  // `source`, which must hold the same bytes: how the input modes move a
  // shard opened remotely onto a cache or read-ahead source without reading
  // its index again.
  std::unique_ptr<ShardReader> WithSource(std::shared_ptr<const io::ByteSource> source) const {
    return std::unique_ptr<ShardReader>(new ShardReader(std::move(source), index_));
  }

  uint64_t records() const { return index_.size(); }
  const IndexEntry& entry(uint64_t i) const { return index_[i]; }
  const std::string& name() const { return source_->name(); }
  const io::ByteSource& source() const { return *source_; }

  // Reads record i into *scratch (resized as needed) and points *out into it.
  // Returns OutOfRange for i >= records(), DataLoss (shard, offset, key) for a
  // CRC mismatch.
  absl::Status ReadRecord(uint64_t i, std::string* scratch, RecordView* out) const;

  // ReadRecord with the bytes read from `from` (the same shard through
  // another path: the store directly rather than a read-ahead ring).
  absl::Status ReadRecordFrom(const io::ByteSource& from, uint64_t i, std::string* scratch,
                              RecordView* out) const;

 private:
  ShardReader(std::shared_ptr<const io::ByteSource> source, std::vector<IndexEntry> index)
      : source_(std::move(source)), index_(std::move(index)) {}
  std::shared_ptr<const io::ByteSource> source_;
  std::vector<IndexEntry> index_;
};

// One problem found by VerifyShard.
struct Corruption {
  std::string shard;
  uint64_t offset = 0;  // byte offset in the shard of the damaged structure
  std::string key;      // the record's key when readable, else empty
  std::string reason;
};

struct ShardVerifyResult {
  uint64_t records_ok = 0;
  uint64_t records_bad = 0;
  uint64_t bytes = 0;           // size of the shard
  uint32_t file_crc32c = 0;     // CRC-32C of the whole file (unmasked)
  std::vector<Corruption> corruptions;  // empty when the shard is intact
};

// Reads the whole shard front to back in large sequential reads, checks the
// file header, every record's CRC, the index (CRC and agreement with the
// records actually found) and the footer, and computes the CRC of the whole
// file. Damaged records are listed and the scan goes on with the next record
// the index (or, when the index is damaged, the next valid record) points to.
// Returns a non-OK status only when the source itself cannot be read; damage
// is reported in the result.
absl::StatusOr<ShardVerifyResult> VerifyShard(const io::ByteSource& source);

}  // namespace stoker::shard

#endif  // STOKER_FORMAT_SHARD_READER_H_
