#include "format/shard_writer.h"

#include "util/strings.h"
#include "util/crc32c.h"

namespace stoker::shard {
namespace {
std::string_view AsBytes(const void* p, size_t n) {
  return std::string_view(static_cast<const char*>(p), n);
}
}  // namespace

ShardWriter::ShardWriter(std::unique_ptr<io::WritableFile> file) : file_(std::move(file)) {
  FileHeader h{};
  std::memcpy(h.magic, kFileMagic, sizeof(h.magic));
  h.version = kFormatVersion;
  h.masked_crc = crc32c::Mask(crc32c::Value(&h, offsetof(FileHeader, masked_crc)));
  status_ = Write(AsBytes(&h, sizeof(h)));
}

absl::Status ShardWriter::Write(std::string_view bytes) {
  file_crc_ = crc32c::Extend(file_crc_, bytes.data(), bytes.size());
  return file_->Append(bytes);
}

absl::Status ShardWriter::Add(std::string_view key, int32_t label, std::string_view meta,
                              std::string_view payload) {
  if (!status_.ok()) return status_;
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        stoker::StrCat("key of ", key.size(), " bytes exceeds the cap of ", kMaxKeyBytes));
  }
  if (meta.size() > kMaxMetaBytes) {
    return absl::InvalidArgumentError(stoker::StrCat("metadata of key ", key, " has ",
                                                   meta.size(), " bytes, cap ",
                                                   kMaxMetaBytes));
  }
  if (payload.size() > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        stoker::StrCat("payload of key ", key, " exceeds ", kMaxPayloadBytes, " bytes"));
  }
  if (label < kNoLabel) {
    return absl::InvalidArgumentError(stoker::StrCat("negative label ", label, " for ", key));
  }
  RecordHeader h{};
  h.magic = kRecordMagic;
  h.key_len = static_cast<uint32_t>(key.size());
  h.meta_len = static_cast<uint32_t>(meta.size());
  h.payload_len = payload.size();
  h.label = label;
  uint32_t crc = crc32c::Value(reinterpret_cast<const char*>(&h) + kRecordHeaderCrcStart,
                               kRecordHeaderSize - kRecordHeaderCrcStart);
  crc = crc32c::Extend(crc, key.data(), key.size());
  crc = crc32c::Extend(crc, meta.data(), meta.size());
  crc = crc32c::Extend(crc, payload.data(), payload.size());
  h.masked_crc = crc32c::Mask(crc);

  IndexEntry e{};
  e.offset = file_->size();
  e.size = kRecordHeaderSize + key.size() + meta.size() + payload.size();
  e.label = label;
  // The file CRC joins the record's own CRC (which covers everything after
  // the CRC field) instead of reading the bytes a second time.
  file_crc_ = crc32c::Extend(file_crc_, &h, kRecordHeaderCrcStart);
  file_crc_ = crc32c::Combine(file_crc_, crc, e.size - kRecordHeaderCrcStart);
  for (std::string_view part : {AsBytes(&h, sizeof(h)), key, meta, payload}) {
    status_ = file_->Append(part);
    if (!status_.ok()) return status_;
  }
  index_.push_back(e);
  return absl::OkStatus();
}

absl::Status ShardWriter::Finish() {
  if (!status_.ok()) return status_;
  IndexHeader ih{};
  ih.magic = kIndexMagic;
  ih.entry_size = kIndexEntrySize;
  ih.record_count = index_.size();
  Footer f{};
  f.index_offset = file_->size();
  f.index_size = kIndexHeaderSize + index_.size() * kIndexEntrySize;
  f.record_count = index_.size();
  uint32_t index_crc = crc32c::Value(&ih, sizeof(ih));
  index_crc = crc32c::Extend(index_crc, index_.data(), index_.size() * kIndexEntrySize);
  f.index_masked_crc = crc32c::Mask(index_crc);
  f.version = kFormatVersion;
  f.masked_crc = crc32c::Mask(crc32c::Value(&f, offsetof(Footer, masked_crc)));
  std::memcpy(f.magic, kFooterMagic, sizeof(f.magic));
  for (std::string_view part : {AsBytes(&ih, sizeof(ih)),
                                AsBytes(index_.data(), index_.size() * kIndexEntrySize),
                                AsBytes(&f, sizeof(f))}) {
    status_ = Write(part);
    if (!status_.ok()) return status_;
  }
  status_ = file_->Commit();
  return status_;
}

}  // namespace stoker::shard
