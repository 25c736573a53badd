#include "stoker/loader.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "stoker/pack.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

fs::path Mini() { return fs::path(STOKER_SOURCE_DIR) / "data" / "clothing-mini"; }

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("stoker_loader_test_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Packs `src` into root_/name with small shards and returns the folder.
  std::string PackFolder(const fs::path& src, const std::string& name) {
    PackOptions o;
    o.src = src.string();
    o.dst = (root_ / name).string();
    o.shard_size = 256 << 10;
    auto s = Pack(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return o.dst;
  }
  // A flat-class tree of n random blobs: class = i % 3.
  fs::path Blobs(int n) {
    fs::path src = root_ / "blobs";
    std::mt19937 rng(5);
    for (int i = 0; i < n; ++i) {
      fs::path f = src / ("c" + std::to_string(i % 3)) / ("b" + std::to_string(1000 + i));
      fs::create_directories(f.parent_path());
      std::string data(1 + rng() % 500, '\0');
      for (char& c : data) c = char(rng());
      std::ofstream(f, std::ios::binary) << data;
    }
    return src;
  }

  // Every batch of one epoch.
  static std::vector<std::shared_ptr<const Batch>> Epoch(Loader& l) {
    std::vector<std::shared_ptr<const Batch>> out;
    for (;;) {
      auto b = l.Next();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !*b) break;
      out.push_back(*b);
    }
    return out;
  }

  fs::path root_;
};

TEST_F(LoaderTest, RawEpochDeliversEverySampleOnceWithItsLabel) {
  std::string ds = PackFolder(Blobs(103), "ds");
  LoaderOptions o;
  o.uri = ds;
  o.decode = Decode::kRaw;
  o.batch_size = 10;
  o.threads = 2;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ((*l)->num_batches(), 11u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto batches = Epoch(**l);
    ASSERT_EQ(batches.size(), 11u);
    EXPECT_EQ(batches.back()->size, 3u);  // the short last batch
    std::set<std::string> keys;
    for (const auto& b : batches) {
      for (uint32_t i = 0; i < b->size; ++i) {
        keys.insert(b->keys[i]);
        int cls = std::stoi(b->keys[i].substr(1, 1));
        EXPECT_EQ(b->labels[i], cls) << b->keys[i];
        std::ifstream f(fs::path(root_ / "blobs") / b->keys[i], std::ios::binary);
        std::string want((std::istreambuf_iterator<char>(f)), {});
        EXPECT_EQ(b->payloads[i], want) << b->keys[i];
      }
    }
    EXPECT_EQ(keys.size(), 103u);
  }
  EXPECT_EQ((*l)->epoch(), 2u);
}

TEST_F(LoaderTest, SameSeedGivesBitIdenticalBatchesWithOneOrTwoThreads) {
  if (!fs::exists(Mini())) GTEST_SKIP() << "no sample data at " << Mini();
  std::string ds = PackFolder(Mini(), "mini");
  for (bool train : {true, false}) {
    std::vector<std::vector<char>> runs[2];
    for (int threads : {1, 2}) {
      LoaderOptions o;
      o.uri = ds;
      o.batch_size = 16;
      o.image_size = 64;
      o.train = train;
      o.threads = threads;
      o.seed = 7;
      auto l = Loader::Create(o);
      ASSERT_TRUE(l.ok()) << l.status();
      for (const auto& b : Epoch(**l)) {
        const char* p = static_cast<const char*>(b->images);
        runs[threads - 1].emplace_back(p, p + b->size * o.sample_bytes());
      }
    }
    ASSERT_EQ(runs[0].size(), 7u);
    EXPECT_EQ(runs[0], runs[1]) << "train=" << train;
  }
}

TEST_F(LoaderTest, CorruptJpegIsSkippedAndNamedOrRaisedInOrder) {
  if (!fs::exists(Mini())) GTEST_SKIP() << "no sample data at " << Mini();
  fs::path src = root_ / "src";
  fs::copy(Mini() / "train", src, fs::copy_options::recursive);
  {
    std::ofstream(src / "hat" / "zz-broken.jpg", std::ios::binary) << "\xff\xd8\xff\xe0 garbage";
  }
  std::string ds = PackFolder(src, "ds");
  LoaderOptions o;
  o.uri = ds;
  o.batch_size = 8;
  o.image_size = 32;
  o.threads = 2;
  o.shuffle = false;
  o.on_error = OnError::kSkip;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok());
  uint64_t n = 0;
  for (const auto& b : Epoch(**l)) n += b->size;
  EXPECT_EQ(n, 80u);
  LoaderStats st = (*l)->stats();
  EXPECT_EQ(st.skipped, 1u);
  ASSERT_EQ(st.skipped_keys.size(), 1u);
  EXPECT_NE(st.skipped_keys[0].find("hat/zz-broken.jpg"), std::string::npos) << st.skipped_keys[0];

  o.on_error = OnError::kRaise;
  auto r = Loader::Create(o);
  ASSERT_TRUE(r.ok());
  bool raised = false;
  uint64_t after = 0;
  for (;;) {
    auto b = (*r)->Next();
    if (!b.ok()) {
      raised = true;
      EXPECT_NE(b.status().message().find("hat/zz-broken.jpg"), std::string::npos) << b.status();
      EXPECT_NE(b.status().message().find("shard-"), std::string::npos) << b.status();
      continue;  // the loader goes on with the next batch
    }
    if (!*b) break;
    if (raised) after += (*b)->size;
  }
  EXPECT_TRUE(raised);
  EXPECT_GT(after, 0u);
}

TEST_F(LoaderTest, StopMidEpochReturnsQuicklyAndRestartWorks) {
  std::string ds = PackFolder(Blobs(300), "ds");
  LoaderOptions o;
  o.uri = ds;
  o.decode = Decode::kRaw;
  o.batch_size = 4;
  o.threads = 2;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE((*l)->Next().ok());
  const auto t0 = std::chrono::steady_clock::now();
  l->reset();  // destroy mid-epoch
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST_F(LoaderTest, StateTakenMidEpochResumesExactlyTheRemainingBatches) {
  std::string ds = PackFolder(Blobs(97), "ds");
  LoaderOptions o;
  o.uri = ds;
  o.decode = Decode::kRaw;
  o.batch_size = 8;
  o.seed = 3;
  auto full = Loader::Create(o);
  ASSERT_TRUE(full.ok());
  (*full)->SetEpoch(1);
  std::vector<std::vector<uint64_t>> expect;
  for (const auto& b : Epoch(**full)) expect.push_back(b->sample_ids);

  auto first = Loader::Create(o);
  (*first)->SetEpoch(1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*first)->Next().ok());
  plan::PlanState st = (*first)->state();
  EXPECT_EQ(st.batches_done, 5u);
  first->reset();

  auto second = Loader::Create(o);
  ASSERT_TRUE((*second)->Restore(st).ok());
  std::vector<std::vector<uint64_t>> rest;
  for (const auto& b : Epoch(**second)) rest.push_back(b->sample_ids);
  EXPECT_EQ(rest, std::vector<std::vector<uint64_t>>(expect.begin() + 5, expect.end()));

  // A state from another seed is refused, never silently restarted.
  o.seed = 4;
  auto other = Loader::Create(o);
  absl::Status s = (*other)->Restore(st);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("seed"), std::string::npos);
}

TEST_F(LoaderTest, BuffersArePooledAcrossEpochs) {
  if (!fs::exists(Mini())) GTEST_SKIP() << "no sample data at " << Mini();
  std::string ds = PackFolder(Mini(), "mini");
  LoaderOptions o;
  o.uri = ds;
  o.batch_size = 4;
  o.image_size = 16;
  o.threads = 2;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok());
  // Each batch is dropped as soon as it arrives, as a training loop does.
  auto drain = [&] {
    for (;;) {
      auto b = (*l)->Next();
      ASSERT_TRUE(b.ok()) << b.status();
      if (!*b) return;
    }
  };
  for (int e = 0; e < 4; ++e) drain();
  // 100 batches went through; buffers in use at once are bounded by the
  // samples in flight (8 tokens: at most 3 open batches of 4), the batch
  // waiting to enter the prefetch queue, the queue (2) and the one the
  // consumer holds, whatever the timing.
  EXPECT_LE((*l)->stats().pool_buffers, 3u + 1u + 2u + 1u);
}

TEST(LoaderOptions, BadOptionsAreInvalidArgument) {
  LoaderOptions o;
  o.uri = "x";
  o.batch_size = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate()));
  o.batch_size = 2;
  o.normalize = true;
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate()));
  o.dtype = DType::kFloat32;
  EXPECT_TRUE(o.Validate().ok());
  o.rank = 3;
  o.world_size = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate()));
  auto l = Loader::Create(LoaderOptions{.uri = "/nonexistent/ds"});
  EXPECT_TRUE(absl::IsNotFound(l.status())) << l.status();
}

}  // namespace
}  // namespace stoker
