// The stoker shard format, shared by ShardWriter and ShardReader.
// docs/formats/shard.md has the grammar, a worked example and the trade-offs.
//
// A shard is one file:
//
//   shard   := file_header record* index footer
//   file_header (32 bytes)
//     0  u8[8]  magic "STKSHRD\x01"
//     8  u32    format version (kFormatVersion)
//    12  u32    flags (0; reserved)
//    16  u64    reserved (0)
//    24  u32    reserved (0)
//    28  u32    masked CRC-32C of bytes [0, 28)
//   record  := record_header key meta payload
//   record_header (32 bytes)
//     0  u32    magic "STKR" (0x524b5453 little endian)
//     4  u32    masked CRC-32C of bytes [8, 32) of the header, then key,
//               meta and payload
//     8  u32    key length   (<= kMaxKeyBytes)
//    12  u32    meta length  (<= kMaxMetaBytes)
//    16  u64    payload length (<= kMaxPayloadBytes)
//    24  i32    label (kNoLabel when the record has none)
//    28  u32    flags (0; reserved)
//   index   := index_header index_entry[record_count]
//   index_header (16 bytes)
//     0  u32    magic "STKI" (0x494b5453)
//     4  u32    entry size (sizeof(IndexEntry))
//     8  u64    record count
//   index_entry (24 bytes): u64 record offset, u64 record size (header +
//               key + meta + payload), i32 label, u32 reserved
//   footer (48 bytes), always the last bytes of the file
//     0  u64    index offset
//     8  u64    index size (index_header + entries)
//    16  u64    record count
//    24  u32    masked CRC-32C of the whole index
//    28  u32    format version
//    32  u32    reserved (0)
//    36  u32    masked CRC-32C of footer bytes [0, 36)
//    40  u8[8]  magic "STKSHEND"
//
// All integers are little endian. Every byte of a shard is covered by one
// CRC, so any flipped bit is detected; the footer magic sits in the last 8
// bytes and the footer must place the index exactly before it, so any
// truncation is detected. Records can also be read front to back without
// the index (streaming), since each header carries its own magic and lengths.
#ifndef STOKER_FORMAT_SHARD_FORMAT_H_
#define STOKER_FORMAT_SHARD_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace stoker::shard {

// Bumped on any incompatible change; readers refuse versions they do not know.
inline constexpr uint32_t kFormatVersion = 1;

// "STKSHRD" plus a version-of-magic byte; chosen to be printable in a hex dump
// and unlike the magic of JPEG, PNG, tar, zip, gzip and TFRecord.
inline constexpr char kFileMagic[8] = {'S', 'T', 'K', 'S', 'H', 'R', 'D', '\x01'};
inline constexpr char kFooterMagic[8] = {'S', 'T', 'K', 'S', 'H', 'E', 'N', 'D'};
inline constexpr uint32_t kRecordMagic = 0x524b5453;  // "STKR"
inline constexpr uint32_t kIndexMagic = 0x494b5453;   // "STKI"

inline constexpr int32_t kNoLabel = -1;

// Hard caps checked before any allocation driven by a length field.
inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxMetaBytes = 1 << 20;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 32;

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t flags;
  uint64_t reserved0;
  uint32_t reserved1;
  uint32_t masked_crc;  // over bytes [0, offsetof(masked_crc))
};
struct RecordHeader {
  uint32_t magic;
  uint32_t masked_crc;  // over bytes [8, 32) then key, meta, payload
  uint32_t key_len;
  uint32_t meta_len;
  uint64_t payload_len;
  int32_t label;
  uint32_t flags;
};
struct IndexHeader {
  uint32_t magic;
  uint32_t entry_size;
  uint64_t record_count;
};
struct IndexEntry {
  uint64_t offset;  // of the record header, from the start of the shard
  uint64_t size;    // header + key + meta + payload
  int32_t label;
  uint32_t reserved;
};
struct Footer {
  uint64_t index_offset;
  uint64_t index_size;
  uint64_t record_count;
  uint32_t index_masked_crc;
  uint32_t version;
  uint32_t reserved;
  uint32_t masked_crc;  // over bytes [0, offsetof(masked_crc))
  char magic[8];
};
#pragma pack(pop)

inline constexpr size_t kFileHeaderSize = sizeof(FileHeader);
inline constexpr size_t kRecordHeaderSize = sizeof(RecordHeader);
inline constexpr size_t kIndexHeaderSize = sizeof(IndexHeader);
inline constexpr size_t kIndexEntrySize = sizeof(IndexEntry);
inline constexpr size_t kFooterSize = sizeof(Footer);
// Bytes of the record header covered by its CRC (everything after the CRC).
inline constexpr size_t kRecordHeaderCrcStart = offsetof(RecordHeader, key_len);

static_assert(kFileHeaderSize == 32);
static_assert(kRecordHeaderSize == 32);
static_assert(kIndexHeaderSize == 16);
static_assert(kIndexEntrySize == 24);
static_assert(kFooterSize == 48);
static_assert(kRecordHeaderCrcStart == 8);
// The format is little endian; so are all the machines we build for.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);

// Smallest valid shard: header, empty index, footer.
inline constexpr size_t kMinShardSize = kFileHeaderSize + kIndexHeaderSize + kFooterSize;

// File names inside a dataset folder.
inline constexpr std::string_view kShardSuffix = ".stk";
inline constexpr std::string_view kManifestName = "manifest.json";
inline constexpr std::string_view kRejectedName = "rejected.txt";

}  // namespace stoker::shard

#endif  // STOKER_FORMAT_SHARD_FORMAT_H_
