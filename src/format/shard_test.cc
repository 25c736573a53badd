#include <filesystem>
#include <random>

#include "format/shard_reader.h"
#include "format/shard_writer.h"
#include "gtest/gtest.h"
#include "io/byte_source.h"
#include "io/writable_file.h"
#include "util/crc32c.h"

namespace stoker::shard {
namespace {

namespace fs = std::filesystem;

struct Rec {
  std::string key, meta, payload;
  int32_t label;
};

fs::path TempFile(const std::string& name) {
  fs::path d = fs::temp_directory_path() / "stoker_shard_test";
  fs::create_directories(d);
  return d / (name + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// Writes recs into a shard and returns its bytes.
std::string WriteShard(const std::vector<Rec>& recs, uint32_t* crc = nullptr) {
  fs::path p = TempFile("s.stk");
  auto f = io::NewLocalWritableFile(p.string());
  EXPECT_TRUE(f.ok());
  ShardWriter w(std::move(*f));
  for (const Rec& r : recs) EXPECT_TRUE(w.Add(r.key, r.label, r.meta, r.payload).ok());
  EXPECT_TRUE(w.Finish().ok());
  if (crc) *crc = w.file_crc32c();
  auto bytes = io::ReadFileToString(p.string());
  EXPECT_TRUE(bytes.ok());
  fs::remove(p);
  return *bytes;
}

std::vector<Rec> SmallRecords() {
  return {{"a/one.jpg", "", "payload-one", 0},
          {"b/two.jpg", R"({"split":"train"})", std::string(40, 'x'), 3},
          {"c/empty", "", "", kNoLabel}};
}

TEST(Shard, RoundTripsEveryField) {
  std::mt19937 rng(1);
  std::vector<Rec> recs;
  for (int i = 0; i < 200; ++i) {
    std::string payload(rng() % 5000, '\0');
    for (char& c : payload) c = char(rng());
    recs.push_back({"key/" + std::to_string(i), i % 3 ? "" : "{\"i\":" + std::to_string(i) + "}",
                    payload, static_cast<int32_t>(i % 7) - 1});
  }
  uint32_t crc = 0;
  std::string bytes = WriteShard(recs, &crc);
  EXPECT_EQ(crc, crc32c::Value(bytes));
  std::shared_ptr<const io::ByteSource> src = io::MakeMemorySource(bytes, "mem.stk");
  auto reader = ShardReader::Open(src);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->records(), recs.size());
  std::string scratch;
  for (size_t i = 0; i < recs.size(); ++i) {
    RecordView v;
    ASSERT_TRUE((*reader)->ReadRecord(i, &scratch, &v).ok());
    EXPECT_EQ(v.key, recs[i].key);
    EXPECT_EQ(v.meta, recs[i].meta);
    EXPECT_EQ(v.payload, recs[i].payload);
    EXPECT_EQ(v.label, recs[i].label);
  }
  RecordView v;
  EXPECT_TRUE(absl::IsOutOfRange((*reader)->ReadRecord(recs.size(), &scratch, &v)));
  auto verified = VerifyShard(*src);
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->corruptions.empty());
  EXPECT_EQ(verified->records_ok, recs.size());
  EXPECT_EQ(verified->file_crc32c, crc);
}

// Counts the reads (a request each on an object store) made through it.
class ReadCounter final : public io::ByteSourceWrapper {
 public:
  using ByteSourceWrapper::ByteSourceWrapper;
  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    reads.push_back({offset, n});
    return base_->ReadAt(offset, n, dst);
  }
  mutable std::vector<std::pair<uint64_t, size_t>> reads;
};

TEST(Shard, OpenWithTheExpectedCountReadsIndexAndFooterInOneRead) {
  std::vector<Rec> recs;
  for (int i = 0; i < 50; ++i) recs.push_back({"k" + std::to_string(i), "", std::string(100, 'p'), i});
  const std::string bytes = WriteShard(recs);
  std::unique_ptr<io::ByteSource> mem = io::MakeMemorySource(bytes, "mem.stk");
  const uint64_t tail = kIndexHeaderSize + 50 * kIndexEntrySize + kFooterSize;

  auto right = std::make_shared<ReadCounter>(mem.get());
  absl::StatusOr<std::unique_ptr<ShardReader>> r = ShardReader::Open(right, 50);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->records(), 50u);
  ASSERT_EQ(right->reads.size(), 2u);  // the tail, then the header
  EXPECT_EQ(right->reads[0], std::make_pair(uint64_t{bytes.size() - tail}, size_t{tail}));
  EXPECT_EQ(right->reads[1], std::make_pair(uint64_t{0}, size_t{kFileHeaderSize}));

  // A wrong count costs one more read and still gives the shard's own index.
  for (uint64_t wrong : {uint64_t{0}, uint64_t{49}, uint64_t{51}, uint64_t{1} << 40}) {
    auto counted = std::make_shared<ReadCounter>(mem.get());
    absl::StatusOr<std::unique_ptr<ShardReader>> w = ShardReader::Open(counted, wrong);
    ASSERT_TRUE(w.ok()) << wrong << ": " << w.status();
    EXPECT_EQ((*w)->records(), 50u);
    EXPECT_EQ((*w)->entry(49).label, 49);
    EXPECT_LE(counted->reads.size(), 3u);
  }
}

TEST(Shard, EmptyShardIsValid) {
  std::string bytes = WriteShard({});
  EXPECT_EQ(bytes.size(), kMinShardSize);
  auto reader = ShardReader::Open(io::MakeMemorySource(bytes, "empty.stk"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->records(), 0u);
}

TEST(Shard, TruncationAtEveryOffsetIsDetected) {
  std::string bytes = WriteShard(SmallRecords());
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::shared_ptr<const io::ByteSource> src =
        io::MakeMemorySource(bytes.substr(0, len), "cut.stk");
    auto reader = ShardReader::Open(src);
    ASSERT_FALSE(reader.ok()) << "truncated to " << len << " bytes was accepted";
    EXPECT_TRUE(absl::IsDataLoss(reader.status())) << reader.status();
    EXPECT_NE(reader.status().message().find("cut.stk"), std::string::npos);
    auto v = VerifyShard(*src);
    ASSERT_TRUE(v.ok());
    EXPECT_FALSE(v->corruptions.empty()) << "verify passed a shard cut to " << len;
  }
}

TEST(Shard, FlippedBitAnywhereIsDetectedByVerify) {
  std::string bytes = WriteShard(SmallRecords());
  for (size_t off = 0; off < bytes.size(); ++off) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[off] ^= char(1 << bit);
      auto v = VerifyShard(*io::MakeMemorySource(bad, "flip.stk"));
      ASSERT_TRUE(v.ok());
      ASSERT_FALSE(v->corruptions.empty()) << "flip of bit " << bit << " at " << off
                                           << " went unnoticed";
    }
  }
}

TEST(Shard, BigShardIsVerifiedInRangesWithTheSameResult) {
  // 40 records of 1 MB: the scan is cut into ranges checked in parallel.
  std::mt19937 rng(9);
  std::vector<Rec> recs;
  for (int i = 0; i < 40; ++i) {
    std::string payload(1 << 20, '\0');
    for (char& c : payload) c = char(rng());
    recs.push_back({"big/" + std::to_string(i), "", std::move(payload), i % 5});
  }
  uint32_t crc = 0;
  const std::string bytes = WriteShard(recs, &crc);
  auto v = VerifyShard(*io::MakeMemorySource(bytes, "big.stk"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->corruptions.empty());
  EXPECT_EQ(v->records_ok, 40u);
  EXPECT_EQ(v->file_crc32c, crc);
  EXPECT_EQ(v->file_crc32c, crc32c::Value(bytes));

  auto reader = ShardReader::Open(io::MakeMemorySource(bytes, "big.stk"));
  ASSERT_TRUE(reader.ok());
  const uint64_t at = (*reader)->entry(30).offset;
  std::string bad = bytes;
  bad[at + (*reader)->entry(30).size - 10] ^= 0x04;  // inside record 30's payload
  v = VerifyShard(*io::MakeMemorySource(bad, "big.stk"));
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->corruptions.size(), 1u);
  EXPECT_EQ(v->corruptions[0].offset, at);
  EXPECT_EQ(v->corruptions[0].key, "big/30");
  EXPECT_EQ(v->records_ok, 39u);
  EXPECT_EQ(v->file_crc32c, crc32c::Value(bad));
}

TEST(Shard, DamagedPayloadNamesShardOffsetAndKeyAndOthersStillVerify) {
  std::vector<Rec> recs = SmallRecords();
  std::string bytes = WriteShard(recs);
  // Flip a byte inside the second record's payload.
  size_t second = kFileHeaderSize + kRecordHeaderSize + recs[0].key.size() + recs[0].payload.size();
  size_t at = second + kRecordHeaderSize + recs[1].key.size() + recs[1].meta.size() + 5;
  bytes[at] ^= 0x01;
  std::shared_ptr<const io::ByteSource> src = io::MakeMemorySource(bytes, "dmg.stk");
  auto v = VerifyShard(*src);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->corruptions.size(), 1u);
  EXPECT_EQ(v->corruptions[0].offset, second);
  EXPECT_EQ(v->corruptions[0].key, "b/two.jpg");
  EXPECT_EQ(v->corruptions[0].shard, "dmg.stk");
  EXPECT_EQ(v->records_ok, 2u);
  EXPECT_EQ(v->records_bad, 1u);
  // Random access: the damaged record is DataLoss, the others read fine.
  auto reader = ShardReader::Open(src);
  ASSERT_TRUE(reader.ok());
  std::string scratch;
  RecordView rv;
  absl::Status s = (*reader)->ReadRecord(1, &scratch, &rv);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_NE(s.message().find("b/two.jpg"), std::string::npos) << s;
  EXPECT_NE(s.message().find("offset " + std::to_string(second)), std::string::npos) << s;
  EXPECT_TRUE((*reader)->ReadRecord(2, &scratch, &rv).ok());
}

TEST(Shard, DamagedIndexStillScansRecords) {
  std::vector<Rec> recs = SmallRecords();
  std::string bytes = WriteShard(recs);
  bytes[bytes.size() - kFooterSize - 3] ^= 0x40;  // inside the last index entry
  auto v = VerifyShard(*io::MakeMemorySource(bytes, "idx.stk"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->records_ok, recs.size());
  ASSERT_FALSE(v->corruptions.empty());
  EXPECT_NE(v->corruptions[0].reason.find("index"), std::string::npos);
}

TEST(Shard, UnknownVersionIsFailedPrecondition) {
  std::string bytes = WriteShard(SmallRecords());
  FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  h.version = 99;
  h.masked_crc = crc32c::Mask(crc32c::Value(&h, offsetof(FileHeader, masked_crc)));
  std::memcpy(bytes.data(), &h, sizeof(h));
  auto reader = ShardReader::Open(io::MakeMemorySource(bytes, "v99.stk"));
  ASSERT_FALSE(reader.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(reader.status())) << reader.status();
}

TEST(Shard, WriterRefusesOversizedFields) {
  fs::path p = TempFile("big.stk");
  auto f = io::NewLocalWritableFile(p.string());
  ASSERT_TRUE(f.ok());
  ShardWriter w(std::move(*f));
  EXPECT_TRUE(absl::IsInvalidArgument(w.Add(std::string(kMaxKeyBytes + 1, 'k'), 0, "", "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(w.Add("k", -5, "", "x")));
  EXPECT_TRUE(w.Add("k", 0, "", "x").ok());
  EXPECT_TRUE(w.Finish().ok());
  fs::remove(p);
}

TEST(Shard, NotAShardIsRefused) {
  std::string junk(500, 'j');
  auto reader = ShardReader::Open(io::MakeMemorySource(junk, "junk.bin"));
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find("not a stoker shard"), std::string::npos);
}

}  // namespace
}  // namespace stoker::shard
