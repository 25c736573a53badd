#include "io/remote_sources.h"

#include <atomic>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "util/crc32c.h"

namespace stoker::io {
namespace {

namespace fs = std::filesystem;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

fs::path TempDir() {
  fs::path d = fs::temp_directory_path() /
               ("stoker_remote_" +
                std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Counts reads and bytes passed to the wrapped source.
class CountingSource : public ByteSourceWrapper {
 public:
  using ByteSourceWrapper::ByteSourceWrapper;
  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    ++reads;
    bytes += n;
    return ByteSourceWrapper::ReadAt(offset, n, dst);
  }
  mutable std::atomic<uint64_t> reads{0}, bytes{0};
};

TEST(DownloadToLocal, CopiesResumesAndSkipsWhatIsComplete) {
  const fs::path dir = TempDir();
  const std::string data = RandomBytes(1000003, 1);
  auto remote = MakeMemorySource(data, "s3://bucket/shard-00000.stk");
  const std::string path = (dir / "shard-00000.stk").string();

  // An interrupted download: the source fails from byte 600,000 on.
  FaultSpec fault;
  fault.fail_from = 600000;
  fault.fail_to = data.size();
  auto broken = MakeFaultySource(remote.get(), fault);
  DownloadOptions o;
  o.chunk_bytes = 100000;
  o.crc32c = crc32c::Value(data);
  absl::StatusOr<uint64_t> got = DownloadToLocal(*broken, path, o);
  ASSERT_FALSE(got.ok());
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(fs::exists(path + ".part"));
  const uint64_t kept = fs::file_size(path + ".part");
  EXPECT_EQ(kept, 600000u);

  // The next run fetches only the rest, and reports progress up to the total.
  uint64_t last = 0;
  o.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_EQ(total, data.size());
    EXPECT_GT(done, last);
    last = done;
  };
  got = DownloadToLocal(*remote, path, o);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, data.size() - kept);
  EXPECT_EQ(last, data.size());
  EXPECT_FALSE(fs::exists(path + ".part"));
  auto local = ReadFileToString(path);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local, data);

  // Already complete and intact: nothing fetched.
  CountingSource counting(remote.get());
  got = DownloadToLocal(counting, path, o);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 0u);
  EXPECT_EQ(counting.reads.load(), 0u);
}

TEST(DownloadToLocal, BadBytesAreFetchedOnceMoreThenDataLoss) {
  const fs::path dir = TempDir();
  const std::string data = RandomBytes(300000, 2);
  auto remote = MakeMemorySource(data, "s3://bucket/x");
  FaultSpec flip;
  flip.flip_offset = 1234;
  flip.xor_mask = 0x01;
  auto flipping = MakeFaultySource(remote.get(), flip);
  DownloadOptions o;
  o.crc32c = crc32c::Value(data);
  const std::string path = (dir / "x").string();
  absl::StatusOr<uint64_t> got = DownloadToLocal(*flipping, path, o);
  ASSERT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("s3://bucket/x"), std::string_view::npos);
  EXPECT_FALSE(fs::exists(path));
  // A corrupt complete file from an earlier run is replaced.
  ASSERT_TRUE(WriteFileAtomically(path, std::string(data.size(), 'z')).ok());
  got = DownloadToLocal(*remote, path, o);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*ReadFileToString(path), data);
}

TEST(StreamingSource, ForwardScanReadsEachPartOnceWithinTheRing) {
  const std::string data = RandomBytes(10 * 4096 + 77, 3);
  std::shared_ptr<const ByteSource> mem = MakeMemorySource(data, "mem");
  auto counting = std::make_shared<CountingSource>(mem.get());
  StreamingOptions o;
  o.part_bytes = 4096;
  o.parts = 3;
  auto stream = MakeStreamingSource(counting, o);
  std::mt19937 rng(4);
  uint64_t off = 0;
  while (off < data.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 3000, data.size() - off);
    std::string got(n, '\0');
    ASSERT_TRUE(stream->ReadAt(off, n, got.data()).ok());
    ASSERT_EQ(got, data.substr(off, n)) << off;
    off += n;
  }
  stream.reset();  // joins the read-ahead thread
  EXPECT_EQ(counting->bytes.load(), data.size()) << "some part was fetched twice";
  EXPECT_EQ(counting->reads.load(), 11u);
}

TEST(StreamingSource, RandomAndConcurrentReadsAreCorrect) {
  const std::string data = RandomBytes(200000, 5);
  std::shared_ptr<const ByteSource> mem = MakeMemorySource(data, "mem");
  StreamingOptions o;
  o.part_bytes = 5000;
  o.parts = 4;
  auto stream = MakeStreamingSource(mem, o);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 300; ++i) {
        const uint64_t off = rng() % data.size();
        const size_t n = std::min<size_t>(rng() % 30000, data.size() - off);
        std::string got(n, '\0');
        if (!stream->ReadAt(off, n, got.data()).ok() || got != data.substr(off, n)) ++bad;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  std::string tail(10, '\0');
  EXPECT_TRUE(absl::IsOutOfRange(stream->ReadAt(data.size() - 5, 10, tail.data())));
}

TEST(StreamingSource, ErrorsReachTheReaderAndLaterReadsRetry) {
  const std::string data = RandomBytes(50000, 6);
  std::shared_ptr<const ByteSource> mem = MakeMemorySource(data, "mem");
  FaultSpec fault;
  fault.fail_from = 20000;
  fault.fail_to = 20001;
  std::shared_ptr<const ByteSource> faulty = MakeFaultySource(mem.get(), fault);
  StreamingOptions o;
  o.part_bytes = 10000;
  o.parts = 2;
  auto stream = MakeStreamingSource(faulty, o);
  std::string buf(10000, '\0');
  ASSERT_TRUE(stream->ReadAt(0, 10000, buf.data()).ok());
  absl::Status s = stream->ReadAt(20000, 100, buf.data());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  ASSERT_TRUE(stream->ReadAt(30000, 10000, buf.data()).ok());
  EXPECT_EQ(buf, data.substr(30000, 10000));
}

TEST(StreamingSource, BudgetReleasesTheLeastRecentlyUsedRing) {
  const std::string a_data = RandomBytes(40000, 7), b_data = RandomBytes(40000, 8);
  std::shared_ptr<const ByteSource> a_mem = MakeMemorySource(a_data, "a");
  std::shared_ptr<const ByteSource> b_mem = MakeMemorySource(b_data, "b");
  auto a_count = std::make_shared<CountingSource>(a_mem.get());
  auto b_count = std::make_shared<CountingSource>(b_mem.get());
  StreamingOptions o;
  o.part_bytes = 10000;
  o.parts = 2;
  o.budget = MakeStreamBudget(1);
  auto a = MakeStreamingSource(a_count, o);
  auto b = MakeStreamingSource(b_count, o);
  std::string buf(100, '\0');
  ASSERT_TRUE(a->ReadAt(0, 100, buf.data()).ok());
  ASSERT_TRUE(a->ReadAt(100, 100, buf.data()).ok());
  const uint64_t a_reads = a_count->reads.load();
  ASSERT_TRUE(b->ReadAt(0, 100, buf.data()).ok());  // releases a's ring
  EXPECT_EQ(buf, b_data.substr(0, 100));
  ASSERT_TRUE(a->ReadAt(200, 100, buf.data()).ok());  // a refills part 0
  EXPECT_EQ(buf, a_data.substr(200, 100));
  EXPECT_GT(a_count->reads.load(), a_reads);
}

}  // namespace
}  // namespace stoker::io
