// Tests of the node cache, one per row of the cache test matrix in
// RELIABILITY.md (C1-C8, C10, C12) plus LRU and accounting. Tests that need
// several processes fork; children report through pipes and never touch
// GoogleTest.
#include "io/node_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::io {
namespace {

namespace fs = std::filesystem;

// A fresh parent folder per test; the cache folder inside it is created by
// Open, so its mode does not depend on the umask of whoever runs the tests.
fs::path TestRoot() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::temp_directory_path() /
               (std::string("stoker_node_cache_test_") + std::to_string(::getpid()) + "_" +
                info->test_suite_name() + "_" + info->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string Bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

CacheKey Key(std::string name, size_t size, std::string etag = "\"e1\"") {
  return CacheKey{"bkt", std::move(name), std::move(etag), size};
}

// Appends `data` in 64 KiB pieces, as an HTTP body arrives.
absl::Status WriteIn(WritableFile* w, std::string_view data, size_t piece = 64 << 10) {
  for (size_t off = 0; off < data.size(); off += piece) {
    if (absl::Status s = w->Append(data.substr(off, piece)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

NodeCacheOptions Options(const fs::path& dir, uint64_t limit) {
  NodeCacheOptions o;
  o.dir = dir.string();
  o.limit_bytes = limit;
  return o;
}

std::shared_ptr<NodeCache> OpenOrDie(NodeCacheOptions o) {
  auto c = NodeCache::Open(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

std::string ReadSource(const ByteSource& src) {
  auto s = ReadAll(src);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::string();
}

std::vector<std::string> Names(const fs::path& dir, std::string_view suffix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.ends_with(suffix)) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}
std::vector<std::string> Entries(const fs::path& dir) { return Names(dir, ".entry"); }
std::vector<std::string> Temps(const fs::path& dir) { return Names(dir, ".tmp"); }

uint64_t EntryBytesOnDisk(const fs::path& dir) {
  uint64_t sum = 0;
  for (const std::string& n : Entries(dir)) sum += fs::file_size(dir / n);
  return sum;
}

// Fills `key` with `data` and drops the returned source.
void Put(NodeCache& cache, const CacheKey& key, const std::string& data) {
  auto r = cache.Fill(key, [&](WritableFile* w) { return WriteIn(w, data); });
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(*r, nullptr);
}

bool Has(const fs::path& dir, const CacheKey& key) {
  return fs::exists(fs::symlink_status(dir / NodeCache::EntryName(key)));
}

void XorByte(const fs::path& file, uint64_t offset) {
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

void SetMtime(const fs::path& file, std::chrono::seconds ago) {
  struct timespec ts[2];
  ::clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= ago.count();
  ts[1] = ts[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), ts, AT_SYMLINK_NOFOLLOW), 0);
}

// Each test gets a fresh folder, removed afterwards.
class NodeCacheTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  const fs::path root_ = TestRoot();
  const fs::path dir_ = root_ / "cache";
};

TEST_F(NodeCacheTest, FillThenHitHereAndInAnotherInstance) {
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  ASSERT_NE(cache, nullptr);
  const std::string data = Bytes(300'000, 1);
  const CacheKey key = Key("shard-000.stk", data.size());

  auto filled = cache->Fill(key, [&](WritableFile* w) { return WriteIn(w, data); });
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ((*filled)->size(), data.size());
  EXPECT_EQ(ReadSource(**filled), data);

  auto hit = cache->Lookup(key);
  ASSERT_TRUE(hit.ok()) << hit.status();
  ASSERT_NE(*hit, nullptr);
  EXPECT_EQ(ReadSource(**hit), data);
  char buf[8];
  EXPECT_TRUE(absl::IsOutOfRange((*hit)->ReadAt(data.size() - 4, 8, buf)));

  // Another process or job sees the same entry.
  auto other = OpenOrDie(Options(dir, 64 << 20));
  auto hit2 = other->Lookup(key);
  ASSERT_TRUE(hit2.ok() && *hit2 != nullptr);
  EXPECT_EQ(ReadSource(**hit2), data);

  EXPECT_EQ(Entries(dir), std::vector<std::string>{NodeCache::EntryName(key)});
  EXPECT_TRUE(Temps(dir).empty());
  EXPECT_GT(fs::file_size(dir / NodeCache::EntryName(key)), data.size());  // the trailer
  EXPECT_EQ(fs::status(dir).permissions(), fs::perms::owner_all);          // S4
  EXPECT_EQ(fs::status(dir / NodeCache::EntryName(key)).permissions(),
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(NodeCacheTest, StatsCountEachOutcome) {
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const std::string data = Bytes(10'000, 2);
  const CacheKey key = Key("a", data.size());
  int fetches = 0;
  auto fetch = [&](WritableFile* w) {
    ++fetches;
    return WriteIn(w, data);
  };
  for (int i = 0; i < 3; ++i) {
    auto r = cache->GetOrFill(key, fetch);
    ASSERT_TRUE(r.ok() && *r != nullptr) << r.status();
    EXPECT_EQ(ReadSource(**r), data);
  }
  auto miss = cache->Lookup(Key("absent", 5));
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(*miss, nullptr);
  auto failed =
      cache->Fill(Key("b", 5), [](WritableFile*) { return absl::UnavailableError("source down"); });
  EXPECT_TRUE(absl::IsUnavailable(failed.status()));

  EXPECT_EQ(fetches, 1);
  NodeCacheStats s = cache->stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.fills, 1u);
  EXPECT_EQ(s.bytes_filled, data.size());
  EXPECT_EQ(s.fill_failures, 1u);
  EXPECT_EQ(s.fills_joined, 0u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.corrupt_entries, 0u);
  EXPECT_EQ(s.rejected_entries, 0u);
}

TEST_F(NodeCacheTest, EvictsLeastRecentlyUsedAndStaysUnderLimit) {
  const fs::path& dir = dir_;
  constexpr size_t kSize = 64 << 10;
  // Room for three entries (trailers are well under 1 KiB here), not four.
  const uint64_t limit = 3 * kSize + 3 * 1024;
  auto cache = OpenOrDie(Options(dir, limit));
  std::vector<CacheKey> keys;
  std::vector<std::string> data;
  for (int i = 0; i < 5; ++i) {
    keys.push_back(Key("k" + std::to_string(i), kSize));
    data.push_back(Bytes(kSize, 100 + i));
  }
  for (int i = 0; i < 3; ++i) Put(*cache, keys[i], data[i]);
  ASSERT_TRUE(Has(dir, keys[0]) && Has(dir, keys[1]) && Has(dir, keys[2]));

  ASSERT_NE(*cache->Lookup(keys[0]), nullptr);  // 0 becomes the most recent
  Put(*cache, keys[3], data[3]);
  EXPECT_FALSE(Has(dir, keys[1])) << "the least recently used entry must go first";
  EXPECT_TRUE(Has(dir, keys[0]) && Has(dir, keys[2]) && Has(dir, keys[3]));
  EXPECT_LE(EntryBytesOnDisk(dir), limit);

  ASSERT_NE(*cache->Lookup(keys[2]), nullptr);  // order now: 0, 3, 2
  Put(*cache, keys[4], data[4]);
  EXPECT_FALSE(Has(dir, keys[0]));
  EXPECT_TRUE(Has(dir, keys[2]) && Has(dir, keys[3]) && Has(dir, keys[4]));
  EXPECT_LE(EntryBytesOnDisk(dir), limit);
  EXPECT_EQ(cache->stats().evictions, 2u);

  auto gone = cache->Lookup(keys[1]);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, nullptr);
  for (int i : {2, 3, 4}) EXPECT_EQ(ReadSource(**cache->Lookup(keys[i])), data[i]);
}

TEST_F(NodeCacheTest, OpenShrinksToASmallerLimit) {
  const fs::path& dir = dir_;
  constexpr size_t kSize = 32 << 10;
  {
    auto big = OpenOrDie(Options(dir, 64 << 20));
    for (int i = 0; i < 4; ++i) Put(*big, Key("k" + std::to_string(i), kSize), Bytes(kSize, i));
  }
  auto small = OpenOrDie(Options(dir, 2 * kSize + 2048));
  EXPECT_EQ(Entries(dir).size(), 2u);
  EXPECT_TRUE(Has(dir, Key("k2", kSize)) && Has(dir, Key("k3", kSize)));  // the newest two
  EXPECT_EQ(small->stats().evictions, 2u);
}

TEST_F(NodeCacheTest, EvictionSparesEntriesThisProcessHasOpen) {
  const fs::path& dir = dir_;
  constexpr size_t kSize = 64 << 10;
  auto cache = OpenOrDie(Options(dir, 2 * kSize + 2048));
  const std::string a = Bytes(kSize, 1), b = Bytes(kSize, 2), c = Bytes(kSize, 3);
  auto held = cache->Fill(Key("a", kSize), [&](WritableFile* w) { return WriteIn(w, a); });
  ASSERT_TRUE(held.ok());
  Put(*cache, Key("b", kSize), b);
  Put(*cache, Key("c", kSize), c);  // a is older than b, but open
  EXPECT_TRUE(Has(dir, Key("a", kSize)));
  EXPECT_FALSE(Has(dir, Key("b", kSize)));
  EXPECT_TRUE(Has(dir, Key("c", kSize)));
}

// C7: when the only candidate is open, it is unlinked; the reader keeps its
// bytes through the open descriptor.
TEST_F(NodeCacheTest, EvictedEntryStaysReadableThroughOpenSource) {
  const fs::path& dir = dir_;
  constexpr size_t kSize = 256 << 10;
  auto cache = OpenOrDie(Options(dir, kSize + 2048));
  const std::string a = Bytes(kSize, 7), b = Bytes(kSize, 8);
  auto reader = cache->Fill(Key("a", kSize), [&](WritableFile* w) { return WriteIn(w, a); });
  ASSERT_TRUE(reader.ok());
  std::string first(1000, '\0');
  ASSERT_TRUE((*reader)->ReadAt(0, first.size(), first.data()).ok());  // a paused reader

  Put(*cache, Key("b", kSize), b);
  EXPECT_FALSE(Has(dir, Key("a", kSize)));
  EXPECT_EQ(cache->stats().evictions, 1u);
  EXPECT_EQ(first, a.substr(0, first.size()));
  EXPECT_EQ(ReadSource(**reader), a);
  EXPECT_EQ(*cache->Lookup(Key("a", kSize)), nullptr);
}

// C10: a limit below one object is a clear error up front, and Fill refuses
// without downloading.
TEST_F(NodeCacheTest, LimitBelowOneObjectIsAnErrorAtStart) {
  const fs::path& dir = dir_;
  constexpr uint64_t kLimit = 1 << 20;
  auto cache = OpenOrDie(Options(dir, kLimit));
  absl::Status s = cache->CheckFits(2 << 20);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("1048576"), std::string::npos) << s;
  EXPECT_NE(s.message().find("2097152"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(cache->CheckFits(kLimit)));  // no room for the trailer
  EXPECT_TRUE(cache->CheckFits(kLimit - kMaxEntryOverhead).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(cache->CheckFits(UINT64_MAX)));

  bool fetched = false;
  auto r = cache->Fill(Key("big", 2 << 20), [&](WritableFile*) {
    fetched = true;
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_FALSE(fetched);
  EXPECT_TRUE(Entries(dir).empty() && Temps(dir).empty());

  EXPECT_TRUE(absl::IsInvalidArgument(NodeCache::Open(Options(dir, 0)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(NodeCache::Open(Options("", 100)).status()));
}

// C2: one flipped bit anywhere (content, identity, sizes, CRCs, version,
// magic) makes the entry a miss; it is deleted and the refill delivers the
// right bytes.
TEST_F(NodeCacheTest, BitFlipAnywhereIsAMissThenARefill) {
  const fs::path& dir = dir_;
  std::vector<std::string> warnings;
  std::mutex mu;
  NodeCacheOptions o = Options(dir, 64 << 20);
  o.on_warning = [&](std::string_view w) {
    std::lock_guard<std::mutex> l(mu);
    warnings.emplace_back(w);
  };
  auto cache = OpenOrDie(o);
  const std::string data = Bytes(100'000, 3);
  const CacheKey key = Key("flip", data.size());
  const fs::path entry = dir / NodeCache::EntryName(key);
  int fetches = 0;
  auto fetch = [&](WritableFile* w) {
    ++fetches;
    return WriteIn(w, data);
  };
  ASSERT_TRUE(cache->GetOrFill(key, fetch).ok());
  const uint64_t f = fs::file_size(entry);
  const uint64_t n = data.size();
  // Content start/middle/end; identity (bucket length, bucket, key, ETag);
  // footer: size, identity length, content CRC, version, trailer CRC, magic.
  const std::vector<uint64_t> offsets = {0,      n / 2,  n - 1,  n,      n + 4,  n + 12, f - 33,
                                         f - 32, f - 24, f - 20, f - 16, f - 12, f - 8,  f - 1};
  for (uint64_t off : offsets) {
    SCOPED_TRACE(off);
    XorByte(entry, off);
    auto miss = cache->Lookup(key);
    ASSERT_TRUE(miss.ok());
    EXPECT_EQ(*miss, nullptr);
    EXPECT_FALSE(fs::exists(entry)) << "a corrupt entry must be deleted";
    auto refilled = cache->GetOrFill(key, fetch);
    ASSERT_TRUE(refilled.ok() && *refilled != nullptr) << refilled.status();
    EXPECT_EQ(ReadSource(**refilled), data);
  }
  EXPECT_EQ(cache->stats().corrupt_entries, offsets.size());
  EXPECT_EQ(fetches, static_cast<int>(offsets.size()) + 1);
  EXPECT_EQ(warnings.size(), offsets.size());
  EXPECT_NE(warnings[0].find(entry.string()), std::string::npos) << warnings[0];
}

// C3: an entry cut (or grown) to any size is a miss; no short object is
// ever served.
TEST_F(NodeCacheTest, TruncatedEntryIsAMissThenARefill) {
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const std::string data = Bytes(70'000, 4);
  const CacheKey key = Key("cut", data.size());
  const fs::path entry = dir / NodeCache::EntryName(key);
  auto fetch = [&](WritableFile* w) { return WriteIn(w, data); };
  ASSERT_TRUE(cache->GetOrFill(key, fetch).ok());
  const uint64_t f = fs::file_size(entry);
  std::mt19937_64 rng(5);
  std::vector<uint64_t> sizes = {0, 1, data.size() - 1, data.size(), data.size() + 1, f - 1, f + 1};
  for (int i = 0; i < 5; ++i) sizes.push_back(rng() % f);
  for (uint64_t size : sizes) {
    SCOPED_TRACE(size);
    fs::resize_file(entry, size);
    auto miss = cache->Lookup(key);
    ASSERT_TRUE(miss.ok());
    EXPECT_EQ(*miss, nullptr);
    EXPECT_FALSE(fs::exists(entry));
    auto refilled = cache->GetOrFill(key, fetch);
    ASSERT_TRUE(refilled.ok() && *refilled != nullptr) << refilled.status();
    EXPECT_EQ(ReadSource(**refilled), data);
  }
  EXPECT_EQ(cache->stats().corrupt_entries, sizes.size());
}

// C4: the ETag (and size) are part of the identity: an updated object misses
// and the old bytes are never served for it.
TEST_F(NodeCacheTest, ChangedEtagMissesAndOldBytesAreNeverServed) {
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const std::string v1 = Bytes(20'000, 10), v2 = Bytes(20'000, 11);
  const CacheKey k1 = Key("obj", v1.size(), "\"etag-1\"");
  const CacheKey k2 = Key("obj", v2.size(), "\"etag-2\"");
  Put(*cache, k1, v1);
  EXPECT_NE(NodeCache::EntryName(k1), NodeCache::EntryName(k2));
  EXPECT_EQ(*cache->Lookup(k2), nullptr);
  CacheKey other_size = k1;
  other_size.size = v1.size() - 1;
  EXPECT_EQ(*cache->Lookup(other_size), nullptr);
  CacheKey other_bucket = k1;
  other_bucket.bucket = "bkt2";
  EXPECT_EQ(*cache->Lookup(other_bucket), nullptr);

  auto r2 = cache->GetOrFill(k2, [&](WritableFile* w) { return WriteIn(w, v2); });
  ASSERT_TRUE(r2.ok() && *r2 != nullptr);
  EXPECT_EQ(ReadSource(**r2), v2);
  EXPECT_EQ(ReadSource(**cache->Lookup(k1)), v1);
  EXPECT_EQ(ReadSource(**cache->Lookup(k2)), v2);
}

// The trailer's identity guards against a file under the wrong name (a hash
// collision, or a file copied by hand): same size, valid CRC, other object.
TEST_F(NodeCacheTest, EntryOfAnotherObjectUnderThisNameIsAMiss) {
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const CacheKey ka = Key("aaaa", 5000), kb = Key("bbbb", 5000);
  Put(*cache, ka, Bytes(5000, 1));
  Put(*cache, kb, Bytes(5000, 2));
  fs::copy_file(dir / NodeCache::EntryName(ka), dir / NodeCache::EntryName(kb),
                fs::copy_options::overwrite_existing);
  fs::permissions(dir / NodeCache::EntryName(kb), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(*cache->Lookup(kb), nullptr);
  EXPECT_EQ(cache->stats().corrupt_entries, 1u);
  EXPECT_FALSE(Has(dir, kb));
  EXPECT_NE(*cache->Lookup(ka), nullptr);
}

// C5: entries that are symlinks, FIFOs, another uid's files or loosely
// permitted are refused and removed, then fetched again; the symlink's
// target is left alone.
TEST_F(NodeCacheTest, PlantedEntriesAreRefused) {
  const fs::path& root = root_;
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const std::string data = Bytes(4096, 9);
  const CacheKey key = Key("planted", data.size());
  const fs::path entry = dir / NodeCache::EntryName(key);
  int fetches = 0;
  auto fetch = [&](WritableFile* w) {
    ++fetches;
    return WriteIn(w, data);
  };
  auto expect_refused_then_refilled = [&](const char* what) {
    SCOPED_TRACE(what);
    auto miss = cache->Lookup(key);
    ASSERT_TRUE(miss.ok());
    EXPECT_EQ(*miss, nullptr);
    EXPECT_FALSE(fs::exists(fs::symlink_status(entry)));
    auto r = cache->GetOrFill(key, fetch);
    ASSERT_TRUE(r.ok() && *r != nullptr) << r.status();
    EXPECT_EQ(ReadSource(**r), data);
  };
  int expected_rejections = 0;

  // A symlink to a file holding a perfectly valid entry.
  Put(*cache, key, data);
  fs::copy_file(entry, root / "elsewhere");
  fs::remove(entry);
  fs::create_symlink(root / "elsewhere", entry);
  expect_refused_then_refilled("symlink");
  ++expected_rejections;
  EXPECT_TRUE(fs::exists(root / "elsewhere"));

  // A FIFO: the open must not block.
  fs::remove(entry);
  ASSERT_EQ(::mkfifo(entry.c_str(), 0600), 0);
  expect_refused_then_refilled("fifo");
  ++expected_rejections;

  // Group- and world-readable or writable.
  fs::permissions(entry, fs::perms::group_write | fs::perms::others_read, fs::perm_options::add);
  expect_refused_then_refilled("mode");
  ++expected_rejections;

  // Another uid's file; only testable with the right to chown.
  if (::chown(entry.c_str(), 4242, 4242) == 0) {
    expect_refused_then_refilled("foreign owner");
    ++expected_rejections;
  }
  EXPECT_EQ(cache->stats().rejected_entries, static_cast<uint64_t>(expected_rejections));
  EXPECT_EQ(fetches, expected_rejections);
}

// C5: a folder others can write, or owned by another uid, is refused at Open.
TEST_F(NodeCacheTest, UnsafeFolderIsRefused) {
  const fs::path& root = root_;
  const fs::path& dir = dir_;
  ASSERT_NE(OpenOrDie(Options(dir, 1 << 20)), nullptr);
  for (fs::perms extra : {fs::perms::group_write, fs::perms::others_write}) {
    fs::permissions(dir, fs::perms::owner_all | extra);
    auto c = NodeCache::Open(Options(dir, 1 << 20));
    EXPECT_TRUE(absl::IsPermissionDenied(c.status())) << c.status();
    EXPECT_NE(c.status().message().find(dir.string()), std::string::npos);
  }
  fs::permissions(dir, fs::perms::owner_all);
  // A symlink to a safe folder of our own is fine: its target is checked.
  fs::create_symlink(dir, root / "link");
  EXPECT_TRUE(NodeCache::Open(Options(root / "link", 1 << 20)).ok());
  if (::chown(dir.c_str(), 4242, 4242) == 0) {
    auto c = NodeCache::Open(Options(dir, 1 << 20));
    EXPECT_TRUE(absl::IsPermissionDenied(c.status())) << c.status();
    EXPECT_NE(c.status().message().find("4242"), std::string::npos);
    ASSERT_EQ(::chown(dir.c_str(), ::geteuid(), ::getegid()), 0);
  }
}

// C8 (write side): whatever way the fetch fails, the error comes back, no
// temporary file or entry is left, and a later fill works.
TEST_F(NodeCacheTest, FailedOrWrongSizedFetchLeavesNothing) {
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const std::string data = Bytes(200'000, 12);
  const CacheKey key = Key("partial", data.size());
  auto expect_clean = [&] {
    EXPECT_TRUE(Temps(dir).empty());
    EXPECT_TRUE(Entries(dir).empty());
  };

  auto r = cache->Fill(key, [&](WritableFile* w) {
    EXPECT_TRUE(WriteIn(w, std::string_view(data).substr(0, 100'000)).ok());
    EXPECT_EQ(Temps(dir).size(), 1u);  // the fill is in its temporary file
    return absl::UnavailableError("connection reset after 100000 bytes");
  });
  EXPECT_TRUE(absl::IsUnavailable(r.status()));
  EXPECT_EQ(r.status().message(), "connection reset after 100000 bytes");
  expect_clean();

  r = cache->Fill(key, [&](WritableFile* w) {
    return WriteIn(w, std::string_view(data).substr(0, data.size() - 1));
  });
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  expect_clean();

  r = cache->Fill(key, [&](WritableFile* w) { return WriteIn(w, data + "x"); });
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  expect_clean();

  // A fetch that ignores the writer's error still fails the fill.
  r = cache->Fill(key, [&](WritableFile* w) {
    (void)WriteIn(w, data + "extra");
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  expect_clean();

  // Nor does writing the right count after a refused append.
  r = cache->Fill(key, [&](WritableFile* w) {
    (void)w->Append(data + "x");
    return WriteIn(w, data);
  });
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  expect_clean();

  r = cache->Fill(key, [&](WritableFile* w) {
    (void)WriteIn(w, data);
    (void)w->Commit();
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  expect_clean();

  EXPECT_EQ(cache->stats().fill_failures, 6u);
  auto ok = cache->Fill(key, [&](WritableFile* w) { return WriteIn(w, data); });
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ReadSource(**ok), data);
}

// Runs `body` in a forked child and returns its exit status (or 128 + signal).
template <typename F>
int InChild(F body) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// C8: the disk refusing space (here a file size limit, which fails the same
// calls with EFBIG as a full disk with ENOSPC) fails the fill as
// ResourceExhausted and leaves nothing behind.
TEST_F(NodeCacheTest, DiskRefusingSpaceFailsTheFillCleanly) {
  const fs::path& dir = dir_;
  ASSERT_NE(OpenOrDie(Options(dir, 64 << 20)), nullptr);
  const std::string data = Bytes(1 << 20, 13);
  int rc = InChild([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256 << 10, 256 << 10};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) return 10;
    auto cache = NodeCache::Open(Options(dir, 64 << 20));
    if (!cache.ok()) return 11;
    auto r =
        (*cache)->Fill(Key("big", data.size()), [&](WritableFile* w) { return WriteIn(w, data); });
    return absl::IsResourceExhausted(r.status()) ? 0 : 12;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(Temps(dir).empty());
  EXPECT_TRUE(Entries(dir).empty());
}

// Waits for one byte from a child, then kills it.
void KillWhenReady(pid_t pid, int ready_fd) {
  char c;
  ASSERT_EQ(::read(ready_fd, &c, 1), 1);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
}

// C1 + C12: a filler killed with -9 mid-download leaves only an orphan
// temporary file: the name stays absent, its key lock is released by the
// kernel, the next fill succeeds at once, and the orphan is swept once old.
TEST_F(NodeCacheTest, KilledFillerPoisonsNothing) {
  const fs::path& dir = dir_;
  const std::string data = Bytes(1 << 20, 14);
  const CacheKey key = Key("killed", data.size());
  ASSERT_NE(OpenOrDie(Options(dir, 64 << 20)), nullptr);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    auto cache = NodeCache::Open(Options(dir, 64 << 20));
    if (!cache.ok()) ::_exit(1);
    (void)(*cache)->Fill(key, [&](WritableFile* w) {
      (void)WriteIn(w, std::string_view(data).substr(0, data.size() / 2));
      (void)::write(ready[1], "x", 1);
      for (;;) ::pause();  // stalled mid-download, holding the key lock
      return absl::OkStatus();
    });
    ::_exit(2);
  }
  KillWhenReady(pid, ready[0]);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_TRUE(Entries(dir).empty()) << "a killed fill must not publish";
  ASSERT_EQ(Temps(dir).size(), 1u);
  const std::string orphan = Temps(dir)[0];

  NodeCacheOptions o = Options(dir, 64 << 20);
  o.fill_wait = std::chrono::seconds(60);
  auto cache = OpenOrDie(o);
  EXPECT_EQ(*cache->Lookup(key), nullptr);
  const auto start = std::chrono::steady_clock::now();
  auto r = cache->GetOrFill(key, [&](WritableFile* w) { return WriteIn(w, data); });
  ASSERT_TRUE(r.ok() && *r != nullptr) << r.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "the dead filler's lock must not be waited for";
  EXPECT_EQ(ReadSource(**r), data);
  EXPECT_EQ(cache->stats().fills, 1u);
  EXPECT_TRUE(fs::exists(dir / orphan)) << "a young temporary file may be a live fill";

  SetMtime(dir / orphan, std::chrono::hours(2));
  auto later = OpenOrDie(Options(dir, 64 << 20));
  EXPECT_TRUE(Temps(dir).empty());
  EXPECT_EQ(later->stats().orphans_removed, 1u);
  EXPECT_EQ(ReadSource(**later->Lookup(key)), data);
}

// C12: a process killed while it holds the folder lock does not block the
// next one (flock is released by the kernel; there is no lock file to clean).
TEST_F(NodeCacheTest, KilledLockHolderBlocksNobody) {
  const fs::path& dir = dir_;
  ASSERT_NE(OpenOrDie(Options(dir, 64 << 20)), nullptr);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open((dir / "LOCK").c_str(), O_RDWR);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    (void)::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  // The lock is really held before the kill...
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  int probe = ::open((dir / "LOCK").c_str(), O_RDWR);
  ASSERT_GE(probe, 0);
  EXPECT_NE(::flock(probe, LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  ::close(probe);
  ::close(ready[0]);
  ::close(ready[1]);
  // ...and free after it. A leak would hang Open; the alarm turns that into
  // a failure.
  ::alarm(30);
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const std::string data = Bytes(1000, 15);
  auto r = cache->GetOrFill(Key("after", data.size()),
                            [&](WritableFile* w) { return WriteIn(w, data); });
  ::alarm(0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ReadSource(**r), data);
}

// C1: the sweep removes only temporary files older than orphan_age, and
// never files that are not the cache's.
TEST_F(NodeCacheTest, SweepRemovesOnlyOldOrphans) {
  const fs::path& dir = dir_;
  ASSERT_NE(OpenOrDie(Options(dir, 64 << 20)), nullptr);
  const std::string hex(32, 'a');
  const fs::path old_tmp = dir / (hex + ".4096.123.00000000deadbeef.tmp");
  const fs::path young_tmp = dir / (hex + ".4096.124.00000000deadbeef.tmp");
  const fs::path foreign_old = dir / "notes.tmp";
  const fs::path not_entry = dir / "deadbeef.entry";
  for (const fs::path& p : {old_tmp, young_tmp, foreign_old, not_entry}) {
    ASSERT_TRUE(WriteFileAtomically(p.string(), "x").ok());
  }
  for (const fs::path& p : {old_tmp, foreign_old, not_entry}) SetMtime(p, std::chrono::hours(3));
  std::vector<std::string> warnings;
  NodeCacheOptions o = Options(dir, 64 << 20);
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  auto cache = OpenOrDie(o);
  EXPECT_FALSE(fs::exists(old_tmp));
  EXPECT_TRUE(fs::exists(young_tmp));
  EXPECT_TRUE(fs::exists(foreign_old));
  EXPECT_TRUE(fs::exists(not_entry));
  EXPECT_EQ(cache->stats().orphans_removed, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(old_tmp.string()), std::string::npos);

  // Shorter ages sweep sooner (and the name's reservation counted until then).
  o.orphan_age = std::chrono::seconds(0);
  SetMtime(young_tmp, std::chrono::seconds(1));
  auto again = OpenOrDie(o);
  EXPECT_FALSE(fs::exists(young_tmp));
}

// "Entries being filled count against the limit": while one fill is in
// progress its reservation blocks another that would not fit beside it.
TEST_F(NodeCacheTest, FillInProgressHoldsItsShareOfTheLimit) {
  const fs::path& dir = dir_;
  constexpr size_t kSize = 128 << 10;
  auto cache = OpenOrDie(Options(dir, kSize + 2048));
  const std::string a = Bytes(kSize, 16), b = Bytes(kSize, 17);
  std::atomic<bool> started{false}, release{false};
  std::thread filler([&] {
    auto r = cache->Fill(Key("a", kSize), [&](WritableFile* w) {
      absl::Status s = WriteIn(w, std::string_view(a).substr(0, kSize / 2));
      started = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!s.ok()) return s;
      return WriteIn(w, std::string_view(a).substr(kSize / 2));
    });
    EXPECT_TRUE(r.ok()) << r.status();
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool fetched_b = false;
  auto rb = cache->Fill(Key("b", kSize), [&](WritableFile* w) {
    fetched_b = true;
    return WriteIn(w, b);
  });
  EXPECT_TRUE(absl::IsResourceExhausted(rb.status())) << rb.status();
  EXPECT_FALSE(fetched_b);
  EXPECT_EQ(Temps(dir).size(), 1u);  // only a's
  release = true;
  filler.join();
  EXPECT_TRUE(Has(dir, Key("a", kSize)));

  auto rb2 = cache->Fill(Key("b", kSize), [&](WritableFile* w) { return WriteIn(w, b); });
  ASSERT_TRUE(rb2.ok()) << rb2.status();
  EXPECT_FALSE(Has(dir, Key("a", kSize)));
  EXPECT_EQ(ReadSource(**rb2), b);
}

// Threads of one process asking for one cold key download it once.
TEST_F(NodeCacheTest, ThreadsFillingOneKeyFetchOnce) {
  const fs::path& dir = dir_;
  auto cache = OpenOrDie(Options(dir, 64 << 20));
  const std::string data = Bytes(256 << 10, 18);
  const CacheKey key = Key("shared", data.size());
  std::atomic<int> fetches{0};
  std::vector<std::thread> threads;
  std::vector<std::string> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto r = cache->GetOrFill(key, [&](WritableFile* w) {
        ++fetches;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return WriteIn(w, data);
      });
      if (r.ok() && *r) got[t] = ReadSource(**r);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fetches.load(), 1);
  for (const std::string& g : got) EXPECT_EQ(g, data);
  NodeCacheStats s = cache->stats();
  EXPECT_EQ(s.fills, 1u);
  EXPECT_EQ(s.fills_joined + s.hits, 3u);
}

// Many threads, many keys, a limit of a few entries: every read is right, the
// limit holds and nothing temporary is left (run it under TSAN too).
TEST_F(NodeCacheTest, ConcurrentFillsAndEvictionsStayConsistent) {
  const fs::path& dir = dir_;
  constexpr size_t kSize = 32 << 10;
  const uint64_t limit = 4 * kSize + 4096;
  auto cache = OpenOrDie(Options(dir, limit));
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 25; ++i) {
        const int k = static_cast<int>(rng() % 10);
        const std::string data = Bytes(kSize, 1000 + k);
        auto r = cache->GetOrFill(Key("k" + std::to_string(k), kSize),
                                  [&](WritableFile* w) { return WriteIn(w, data); });
        if (!r.ok()) {
          ++errors;  // only ResourceExhausted is allowed: four fills in flight
          if (!absl::IsResourceExhausted(r.status())) ++wrong;
          continue;
        }
        auto got = ReadAll(**r);
        if (!got.ok() || *got != data) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(EntryBytesOnDisk(dir), limit);
  EXPECT_TRUE(Temps(dir).empty());
  EXPECT_GT(cache->stats().evictions, 0u);
}

// C6: eight processes fill one cold key at once. All deliver identical,
// correct bytes and exactly one file is published, also when file locks do
// nothing (as on Lustre): then every process downloads, and link() decides.
void RunEightProcessesOnOneKey(const fs::path& dir, bool file_locks) {
  ASSERT_NE(OpenOrDie(Options(dir, 256 << 20)), nullptr);
  const std::string data = Bytes(1 << 20, 19);
  const CacheKey key = Key("cold-shard", data.size());
  struct Report {
    int ok;
    int fetched;
    uint64_t fills;
    uint64_t joined;
  };
  int go[2], results[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(results), 0);
  constexpr int kProcs = 8;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      NodeCacheOptions o = Options(dir, 256 << 20);
      o.file_locks = file_locks;
      o.fill_wait = std::chrono::seconds(60);
      auto cache = NodeCache::Open(o);
      char c;
      (void)::read(go[0], &c, 1);  // returns when the parent closes the pipe
      Report rep = {0, 0, 0, 0};
      if (cache.ok()) {
        auto r = (*cache)->GetOrFill(key, [&](WritableFile* w) {
          rep.fetched = 1;
          // Slow enough (16 pieces, 5 ms apart) that the fills overlap.
          for (size_t off = 0; off < data.size(); off += 64 << 10) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            if (absl::Status s = w->Append(std::string_view(data).substr(off, 64 << 10)); !s.ok()) {
              return s;
            }
          }
          return absl::OkStatus();
        });
        if (r.ok() && *r != nullptr) {
          auto got = ReadAll(**r);
          rep.ok = got.ok() && *got == data;
        }
        rep.fills = (*cache)->stats().fills;
        rep.joined = (*cache)->stats().fills_joined;
      }
      (void)::write(results[1], &rep, sizeof(rep));
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // start them all at once
  ::close(results[1]);
  int ok = 0, fetched = 0;
  uint64_t fills = 0, joined = 0;
  for (int i = 0; i < kProcs; ++i) {
    Report rep;
    ASSERT_EQ(::read(results[0], &rep, sizeof(rep)), static_cast<ssize_t>(sizeof(rep)));
    ok += rep.ok;
    fetched += rep.fetched;
    fills += rep.fills;
    joined += rep.joined;
  }
  ::close(results[0]);
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(ok, kProcs);
  EXPECT_EQ(fills, 1u) << "exactly one process publishes";
  EXPECT_EQ(Entries(dir), std::vector<std::string>{NodeCache::EntryName(key)});
  EXPECT_TRUE(Temps(dir).empty());
  if (file_locks) {
    EXPECT_EQ(fetched, 1) << "the key lock should make the others wait, not download";
  } else {
    EXPECT_GE(fetched, 2) << "without locks the race must really have happened";
    // Each download but the published one lost the link() race and served
    // the winner's entry (a late starter may join without downloading).
    EXPECT_GE(joined, static_cast<uint64_t>(fetched) - 1);
  }
  auto check = OpenOrDie(Options(dir, 256 << 20));
  EXPECT_EQ(ReadSource(**check->Lookup(key)), data);
}

TEST_F(NodeCacheTest, EightProcessesFillOneKeyWithLocks) { RunEightProcessesOnOneKey(dir_, true); }
TEST_F(NodeCacheTest, EightProcessesFillOneKeyWithLocksDoingNothing) {
  RunEightProcessesOnOneKey(dir_, false);
}

TEST_F(NodeCacheTest, EmptyObjectRoundTrips) {
  auto cache = OpenOrDie(Options(dir_, 64 << 20));
  const CacheKey key = Key("empty", 0);
  auto r = cache->Fill(key, [](WritableFile*) { return absl::OkStatus(); });
  ASSERT_TRUE(r.ok() && *r != nullptr) << r.status();
  EXPECT_EQ((*r)->size(), 0u);
  auto hit = cache->Lookup(key);
  ASSERT_TRUE(hit.ok() && *hit != nullptr);
  EXPECT_EQ((*hit)->size(), 0u);
}

TEST_F(NodeCacheTest, OverlongIdentityOrSizeIsInvalidArgument) {
  auto cache = OpenOrDie(Options(dir_, 64 << 20));
  for (const CacheKey& key :
       {Key(std::string(kMaxIdentityBytes, 'k'), 10), Key("huge", uint64_t{1} << 62)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(cache->Lookup(key).status()));
    auto r = cache->Fill(key, [](WritableFile*) { return absl::OkStatus(); });
    EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  }
}

}  // namespace
}  // namespace stoker::io
