#include "format/shard_reader.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "util/strings.h"
#include "util/crc32c.h"

namespace stoker::shard {
namespace {

std::string Printable(std::string_view key) {
  std::string out;
  for (char c : key.substr(0, 200)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

absl::Status Damaged(std::string_view shard, uint64_t offset, std::string_view what) {
  return absl::DataLossError(stoker::StrCat("shard ", shard, " at offset ", offset, ": ", what));
}

absl::Status CheckFileHeader(std::string_view bytes, std::string_view shard) {
  FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kFileMagic, sizeof(h.magic)) != 0) {
    return Damaged(shard, 0, "not a stoker shard (bad file magic)");
  }
  if (crc32c::Unmask(h.masked_crc) != crc32c::Value(&h, offsetof(FileHeader, masked_crc))) {
    return Damaged(shard, 0, "file header CRC mismatch");
  }
  if (h.version != kFormatVersion) {
    return absl::FailedPreconditionError(stoker::StrCat("shard ", shard, " has format version ",
                                                      h.version, "; this stoker reads version ",
                                                      kFormatVersion));
  }
  return absl::OkStatus();
}

absl::StatusOr<Footer> CheckFooter(std::string_view bytes, uint64_t file_size,
                                   std::string_view shard) {
  const uint64_t at = file_size - kFooterSize;
  Footer f;
  std::memcpy(&f, bytes.data(), sizeof(f));
  if (std::memcmp(f.magic, kFooterMagic, sizeof(f.magic)) != 0) {
    return Damaged(shard, at, "footer magic missing: the shard is truncated or damaged");
  }
  if (crc32c::Unmask(f.masked_crc) != crc32c::Value(&f, offsetof(Footer, masked_crc))) {
    return Damaged(shard, at, "footer CRC mismatch");
  }
  if (f.version != kFormatVersion) {
    return absl::FailedPreconditionError(stoker::StrCat("shard ", shard, " footer has version ",
                                                      f.version));
  }
  if (f.index_offset < kFileHeaderSize || f.index_size != kIndexHeaderSize +
                                                             f.record_count * kIndexEntrySize ||
      f.index_offset + f.index_size != at) {
    return Damaged(shard, at,
                   stoker::StrCat("footer places the index at ", f.index_offset, "+",
                                f.index_size, " but the footer starts at ", at,
                                " (truncated or damaged)"));
  }
  return f;
}

// Checks the index bytes against the footer; on success fills *entries.
absl::Status CheckIndex(std::string_view bytes, const Footer& f, std::string_view shard,
                        std::vector<IndexEntry>* entries) {
  if (crc32c::Unmask(f.index_masked_crc) != crc32c::Value(bytes.data(), bytes.size())) {
    return Damaged(shard, f.index_offset, "index CRC mismatch");
  }
  IndexHeader ih;
  std::memcpy(&ih, bytes.data(), sizeof(ih));
  if (ih.magic != kIndexMagic || ih.entry_size != kIndexEntrySize ||
      ih.record_count != f.record_count) {
    return Damaged(shard, f.index_offset, "index header does not match the footer");
  }
  entries->resize(f.record_count);
  std::memcpy(entries->data(), bytes.data() + kIndexHeaderSize,
              f.record_count * kIndexEntrySize);
  uint64_t expect = kFileHeaderSize;
  for (uint64_t i = 0; i < entries->size(); ++i) {
    const IndexEntry& e = (*entries)[i];
    if (e.offset != expect || e.size < kRecordHeaderSize || e.size > f.index_offset ||
        e.offset + e.size > f.index_offset) {
      return Damaged(shard, f.index_offset + kIndexHeaderSize + i * kIndexEntrySize,
                     stoker::StrCat("index entry ", i, " (offset ", e.offset, ", size ", e.size,
                                  ") does not follow the previous record"));
    }
    expect = e.offset + e.size;
  }
  if (expect != f.index_offset) {
    return Damaged(shard, f.index_offset, "records do not end where the index starts");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseRecord(std::string_view bytes, uint64_t offset, std::string_view shard,
                         RecordView* out) {
  if (bytes.size() < kRecordHeaderSize) {
    return Damaged(shard, offset, "record header cut short");
  }
  RecordHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kRecordMagic) return Damaged(shard, offset, "bad record magic");
  if (h.key_len > kMaxKeyBytes || h.meta_len > kMaxMetaBytes ||
      h.payload_len > kMaxPayloadBytes ||
      kRecordHeaderSize + uint64_t{h.key_len} + h.meta_len + h.payload_len != bytes.size()) {
    return Damaged(shard, offset,
                   stoker::StrCat("record lengths (key ", h.key_len, ", meta ", h.meta_len,
                                ", payload ", h.payload_len, ") do not fit the ", bytes.size(),
                                " bytes the index gives"));
  }
  std::string_view key = bytes.substr(kRecordHeaderSize, h.key_len);
  uint32_t crc = crc32c::Value(bytes.data() + kRecordHeaderCrcStart,
                               bytes.size() - kRecordHeaderCrcStart);
  if (crc != crc32c::Unmask(h.masked_crc)) {
    return Damaged(shard, offset, stoker::StrCat("record CRC mismatch (key '", Printable(key),
                                               "', possibly damaged)"));
  }
  out->key = key;
  out->meta = bytes.substr(kRecordHeaderSize + h.key_len, h.meta_len);
  out->payload = bytes.substr(kRecordHeaderSize + h.key_len + h.meta_len);
  out->label = h.label;
  out->offset = offset;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(
    std::shared_ptr<const io::ByteSource> source, std::optional<uint64_t> expected_records) {
  const std::string& name = source->name();
  const uint64_t size = source->size();
  if (size < kMinShardSize) {
    return Damaged(name, size, stoker::StrCat("file of ", size, " bytes is too short for a shard (",
                                            kMinShardSize, " at least): truncated?"));
  }
  // The tail: the footer, and the index before it when its size is known
  // (from the expected record count), so both come in one read.
  uint64_t tail_len = kFooterSize;
  if (expected_records && *expected_records <= (size - kMinShardSize) / kIndexEntrySize) {
    tail_len += kIndexHeaderSize + *expected_records * kIndexEntrySize;
  }
  // Both in one go (on S3: two requests in flight at once); the tail
  // first, so a read-ahead source streams the head meanwhile.
  std::string tail(tail_len, '\0');
  char head[kFileHeaderSize];
  const io::ByteSource::Range ranges[] = {{size - tail_len, tail_len, tail.data()},
                                          {0, sizeof(head), head}};
  if (absl::Status s = source->ReadRanges(ranges); !s.ok()) return s;
  if (absl::Status s = CheckFileHeader(std::string_view(head, sizeof(head)), name); !s.ok()) {
    return s;
  }
  absl::StatusOr<Footer> footer =
      CheckFooter(std::string_view(tail).substr(tail_len - kFooterSize), size, name);
  if (!footer.ok()) return footer.status();
  std::string index_bytes;
  if (footer->index_size + kFooterSize == tail_len) {
    index_bytes = tail.substr(0, footer->index_size);
  } else {  // the count was not this shard's: read the index the footer names
    index_bytes.resize(footer->index_size);
    if (absl::Status s =
            source->ReadAt(footer->index_offset, index_bytes.size(), index_bytes.data());
        !s.ok()) {
      return s;
    }
  }
  std::vector<IndexEntry> entries;
  if (absl::Status s = CheckIndex(index_bytes, *footer, name, &entries); !s.ok()) return s;
  return std::unique_ptr<ShardReader>(new ShardReader(std::move(source), std::move(entries)));
}

absl::Status ShardReader::ReadRecord(uint64_t i, std::string* scratch, RecordView* out) const {
  return ReadRecordFrom(*source_, i, scratch, out);
}

absl::Status ShardReader::ReadRecordFrom(const io::ByteSource& from, uint64_t i,
                                         std::string* scratch, RecordView* out) const {
  if (i >= index_.size()) {
    return absl::OutOfRangeError(
        stoker::StrCat("record ", i, " of shard ", name(), " which has ", index_.size()));
  }
  const IndexEntry& e = index_[i];
  scratch->resize(e.size);
  if (absl::Status s = from.ReadAt(e.offset, e.size, scratch->data()); !s.ok()) return s;
  absl::Status s = ParseRecord(*scratch, e.offset, name(), out);
  if (s.ok() && out->label != e.label) {
    return Damaged(name(), e.offset, stoker::StrCat("record label ", out->label,
                                                  " disagrees with the index (", e.label, ")"));
  }
  return s;
}

namespace {

// A forward-only window over a source, read in large sequential pieces, that
// also computes the CRC of every byte of the file, in file order. The CRC of
// an intact record is joined from the CRC in its header (ClaimRecord), so
// verify reads the bulk of the bytes once; bytes not claimed are summed
// before the window lets go of them.
class SequentialWindow {
 public:
  // Covers [begin, end) of the source (default: all of it); crc() is the CRC
  // of those bytes alone.
  explicit SequentialWindow(const io::ByteSource& source, uint64_t begin = 0,
                            std::optional<uint64_t> end = std::nullopt)
      : source_(source), end_(end.value_or(source.size())), start_(begin), crc_pos_(begin) {
    // Reuse this thread's buffers: fresh 8 MiB allocations cost page faults
    // and zeroing on every window, as much again as reading the bytes.
    Spare& cache = ThreadSpare();
    buf_ = std::move(cache.a);
    buf_capacity_ = std::exchange(cache.a_capacity, 0);
    spare_ = std::move(cache.b);
    spare_capacity_ = std::exchange(cache.b_capacity, 0);
  }
  ~SequentialWindow() {
    Spare& cache = ThreadSpare();
    if (buf_capacity_ > cache.a_capacity) {
      cache.a = std::move(buf_);
      cache.a_capacity = buf_capacity_;
    }
    if (spare_capacity_ > cache.b_capacity) {
      cache.b = std::move(spare_);
      cache.b_capacity = spare_capacity_;
    }
  }
  SequentialWindow(const SequentialWindow&) = delete;
  SequentialWindow& operator=(const SequentialWindow&) = delete;

  // Makes [off, off+n) available and returns it. Offsets must not go back
  // before the start of the previous call's range.
  absl::StatusOr<std::string_view> Get(uint64_t off, uint64_t n) {
    if (off >= start_ && off + n <= start_ + buf_size_) {
      return std::string_view(buf_.get() + (off - start_), n);
    }
    const uint64_t end = start_ + buf_size_;
    const uint64_t new_start = std::min(off, end);
    const uint64_t want_end = std::min<uint64_t>(end_, std::max(off + n, new_start + kChunk));
    if (off + n > end_) {
      return absl::OutOfRangeError("past the end");
    }
    SumUpTo(new_start);  // bytes about to be dropped
    // Keep [new_start, end), then read [end, want_end), into the spare
    // buffer (reused: no allocation or zero-filling per chunk).
    const uint64_t want = want_end - new_start;
    if (spare_capacity_ < want) {
      spare_.reset(new char[want]);  // uninitialised: only read bytes are used
      spare_capacity_ = want;
    }
    if (new_start < end) {
      std::memcpy(spare_.get(), buf_.get() + (new_start - start_), end - new_start);
    }
    const uint64_t read_from = std::max(end, new_start);
    if (absl::Status s = source_.ReadAt(read_from, want_end - read_from,
                                        spare_.get() + (read_from - new_start));
        !s.ok()) {
      return s;
    }
    std::swap(buf_, spare_);
    std::swap(buf_capacity_, spare_capacity_);
    buf_size_ = want;
    start_ = new_start;
    return std::string_view(buf_.get() + (off - start_), n);
  }

  // Declares that the record at [off, off+size), now in the window, passed
  // its CRC check with `record_crc` (the CRC of its bytes after the header's
  // CRC field). Joins it into the file CRC when it is the next unsummed
  // range; otherwise its bytes are summed one by one later.
  void ClaimRecord(uint64_t off, uint64_t size, uint32_t record_crc) {
    if (off != crc_pos_ || off < start_ || off + size > start_ + buf_size_) return;
    crc_ = crc32c::Extend(crc_, buf_.get() + (off - start_), kRecordHeaderCrcStart);
    crc_ = crc32c::Combine(crc_, record_crc, size - kRecordHeaderCrcStart);
    crc_pos_ = off + size;
  }

  // Reads whatever has not been read yet, so crc() covers the whole file.
  absl::Status Finish() {
    uint64_t end = start_ + buf_size_;
    while (end < end_) {
      uint64_t n = std::min<uint64_t>(kChunk, end_ - end);
      absl::StatusOr<std::string_view> got = Get(end, n);
      if (!got.ok()) return got.status();
      end = start_ + buf_size_;
    }
    SumUpTo(end);
    return absl::OkStatus();
  }
  uint32_t crc() const { return crc_; }

 private:
  // Extends the CRC over the buffered bytes [crc_pos_, pos).
  void SumUpTo(uint64_t pos) {
    if (pos <= crc_pos_) return;
    crc_ = crc32c::Extend(crc_, buf_.get() + (crc_pos_ - start_), pos - crc_pos_);
    crc_pos_ = pos;
  }

  // Two buffers kept per thread between windows.
  struct Spare {
    std::unique_ptr<char[]> a, b;
    uint64_t a_capacity = 0, b_capacity = 0;
  };
  static Spare& ThreadSpare() {
    thread_local Spare spare;
    return spare;
  }

  static constexpr uint64_t kChunk = uint64_t{8} << 20;
  const io::ByteSource& source_;
  const uint64_t end_;
  std::unique_ptr<char[]> buf_, spare_;
  uint64_t buf_size_ = 0, buf_capacity_ = 0, spare_capacity_ = 0;
  uint64_t start_;  // file offset of buf_[0]
  uint64_t crc_pos_;  // the CRC covers [0, crc_pos_); start_ <= crc_pos_
  uint32_t crc_ = 0;
};

// The CRC stored in an intact record's header.
uint32_t RecordCrc(std::string_view bytes) {
  RecordHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  return crc32c::Unmask(h.masked_crc);
}

// The key of a record whose header is intact enough to locate it, else "".
std::string KeyIfReadable(std::string_view bytes) {
  if (bytes.size() < kRecordHeaderSize) return "";
  RecordHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kRecordMagic || h.key_len > kMaxKeyBytes ||
      kRecordHeaderSize + uint64_t{h.key_len} > bytes.size()) {
    return "";
  }
  return Printable(bytes.substr(kRecordHeaderSize, h.key_len));
}

void Report(ShardVerifyResult* r, const absl::Status& s, const std::string& shard, uint64_t off,
            std::string key = "") {
  Corruption c;
  c.shard = shard;
  c.offset = off;
  c.key = std::move(key);
  c.reason = std::string(s.message());
  r->corruptions.push_back(std::move(c));
}

}  // namespace

namespace {

// Whether the index lists records back to back from the header to the index,
// so the record area can be cut into independent byte ranges.
bool ContiguousRecords(const std::vector<IndexEntry>& entries, uint64_t index_offset) {
  uint64_t at = kFileHeaderSize;
  for (const IndexEntry& e : entries) {
    if (e.offset != at) return false;
    at += e.size;
  }
  return at == index_offset;
}

// The record scan of VerifyShard over ranges of about kRange bytes checked
// in parallel (a big shard no longer waits on one thread), their CRCs joined
// in file order with the header's and the index's and footer's.
absl::StatusOr<ShardVerifyResult> VerifyChunked(const io::ByteSource& source,
                                                ShardVerifyResult r, std::string_view head,
                                                const std::vector<IndexEntry>& entries,
                                                uint64_t index_offset) {
  constexpr uint64_t kRange = uint64_t{16} << 20;
  const std::string& name = source.name();
  std::vector<size_t> cut = {0};  // first entry of each range
  for (size_t i = 0, bytes = 0; i < entries.size(); ++i) {
    if (bytes >= kRange) {
      cut.push_back(i);
      bytes = 0;
    }
    bytes += entries[i].size;
  }
  cut.push_back(entries.size());
  const size_t ranges = cut.size() - 1;
  struct Range {
    absl::Status status;
    uint32_t crc = 0;
    uint64_t begin = 0, end = 0;
    ShardVerifyResult part;
  };
  std::vector<Range> out(ranges);
  tbb::parallel_for(size_t{0}, ranges, [&](size_t k) {
    Range& g = out[k];
    g.begin = cut[k] < entries.size() ? entries[cut[k]].offset : index_offset;
    g.end = cut[k + 1] < entries.size() ? entries[cut[k + 1]].offset : index_offset;
    SequentialWindow window(source, g.begin, g.end);
    RecordView view;
    for (size_t i = cut[k]; i < cut[k + 1]; ++i) {
      const IndexEntry& e = entries[i];
      absl::StatusOr<std::string_view> bytes = window.Get(e.offset, e.size);
      if (!bytes.ok()) {
        g.status = bytes.status();
        return;
      }
      absl::Status s = ParseRecord(*bytes, e.offset, name, &view);
      if (s.ok() && view.label != e.label) {
        s = Damaged(name, e.offset, "record label disagrees with the index");
      }
      if (s.ok()) {
        ++g.part.records_ok;
        window.ClaimRecord(e.offset, e.size, RecordCrc(*bytes));
      } else {
        ++g.part.records_bad;
        Report(&g.part, s, name, e.offset, KeyIfReadable(*bytes));
      }
    }
    g.status = window.Finish();
    g.crc = window.crc();
  });
  uint32_t crc = crc32c::Value(head.data(), head.size());
  for (Range& g : out) {
    if (!g.status.ok()) return g.status;
    r.records_ok += g.part.records_ok;
    r.records_bad += g.part.records_bad;
    for (Corruption& c : g.part.corruptions) r.corruptions.push_back(std::move(c));
    crc = crc32c::Combine(crc, g.crc, g.end - g.begin);
  }
  std::string tail(source.size() - index_offset, '\0');
  if (absl::Status s = source.ReadAt(index_offset, tail.size(), tail.data()); !s.ok()) return s;
  r.file_crc32c = crc32c::Combine(crc, crc32c::Value(tail), tail.size());
  return r;
}

}  // namespace

absl::StatusOr<ShardVerifyResult> VerifyShard(const io::ByteSource& source) {
  const std::string& name = source.name();
  const uint64_t size = source.size();
  ShardVerifyResult r;
  r.bytes = size;
  SequentialWindow window(source);
  if (size < kMinShardSize) {
    Report(&r, Damaged(name, 0, stoker::StrCat("file of ", size,
                                             " bytes is too short for a shard: truncated?")),
           name, 0);
    if (absl::Status s = window.Finish(); !s.ok()) return s;
    r.file_crc32c = window.crc();
    return r;
  }
  // The header read alone: the record scan may start elsewhere.
  std::string head(kFileHeaderSize, '\0');
  if (absl::Status s = source.ReadAt(0, head.size(), head.data()); !s.ok()) return s;
  if (absl::Status s = CheckFileHeader(head, name); !s.ok()) Report(&r, s, name, 0);

  // Footer and index are small: read them out of band, then scan records.
  std::string foot(kFooterSize, '\0');
  if (absl::Status s = source.ReadAt(size - kFooterSize, kFooterSize, foot.data()); !s.ok()) {
    return s;
  }
  std::optional<Footer> footer;
  std::vector<IndexEntry> entries;
  bool index_ok = false;
  if (absl::StatusOr<Footer> f = CheckFooter(foot, size, name); f.ok()) {
    footer = *f;
    std::string index_bytes(f->index_size, '\0');
    if (absl::Status s = source.ReadAt(f->index_offset, index_bytes.size(), index_bytes.data());
        !s.ok()) {
      return s;
    }
    absl::Status s = CheckIndex(index_bytes, *f, name, &entries);
    if (s.ok()) {
      index_ok = true;
    } else {
      Report(&r, s, name, f->index_offset);
    }
  } else {
    Report(&r, f.status(), name, size - kFooterSize);
  }

  RecordView view;
  if (index_ok && ContiguousRecords(entries, footer->index_offset)) {
    return VerifyChunked(source, std::move(r), head, entries, footer->index_offset);
  }
  if (index_ok) {
    for (const IndexEntry& e : entries) {
      absl::StatusOr<std::string_view> bytes = window.Get(e.offset, e.size);
      if (!bytes.ok()) return bytes.status();
      absl::Status s = ParseRecord(*bytes, e.offset, name, &view);
      if (s.ok() && view.label != e.label) {
        s = Damaged(name, e.offset, "record label disagrees with the index");
      }
      if (s.ok()) {
        ++r.records_ok;
        window.ClaimRecord(e.offset, e.size, RecordCrc(*bytes));
      } else {
        ++r.records_bad;
        Report(&r, s, name, e.offset, KeyIfReadable(*bytes));
      }
    }
  } else {
    // No trustworthy index: walk the record headers, and after a damaged
    // record look for the next offset where a whole valid record starts.
    const uint64_t limit = footer ? footer->index_offset : size;
    uint64_t off = kFileHeaderSize;
    bool in_damage = false;
    while (off + kRecordHeaderSize <= limit) {
      absl::StatusOr<std::string_view> hb = window.Get(off, kRecordHeaderSize);
      if (!hb.ok()) return hb.status();
      RecordHeader h;
      std::memcpy(&h, hb->data(), sizeof(h));
      uint64_t total = kRecordHeaderSize + uint64_t{h.key_len} + h.meta_len + h.payload_len;
      absl::Status s;
      std::string bad_key;
      if (h.magic != kRecordMagic) {
        s = Damaged(name, off, "bad record magic");
      } else if (h.key_len > kMaxKeyBytes || h.meta_len > kMaxMetaBytes ||
                 h.payload_len > kMaxPayloadBytes || off + total > limit) {
        s = Damaged(name, off, "record lengths run past the end of the record area");
      } else {
        absl::StatusOr<std::string_view> bytes = window.Get(off, total);
        if (!bytes.ok()) return bytes.status();
        s = ParseRecord(*bytes, off, name, &view);
        if (s.ok()) {
          window.ClaimRecord(off, total, RecordCrc(*bytes));
        } else {
          bad_key = KeyIfReadable(*bytes);
        }
      }
      if (s.ok()) {
        ++r.records_ok;
        in_damage = false;
        off += total;
        continue;
      }
      if (!in_damage) {
        ++r.records_bad;
        Report(&r, s, name, off, bad_key);
        in_damage = true;
      }
      ++off;  // resynchronise byte by byte; only damaged shards pay for this
    }
  }
  if (absl::Status s = window.Finish(); !s.ok()) return s;
  r.file_crc32c = window.crc();
  return r;
}

}  // namespace stoker::shard
