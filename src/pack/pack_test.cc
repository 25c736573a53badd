#include "stoker/pack.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "io/byte_source.h"
#include "stoker/dataset.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

class PackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("stoker_pack_test_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes a file of n pseudo-random bytes and returns its content.
  std::string Put(const fs::path& rel, size_t n, uint32_t seed = 1) {
    fs::create_directories((root_ / rel).parent_path());
    std::mt19937 rng(seed);
    std::string data(n, '\0');
    for (char& c : data) c = char(rng());
    std::ofstream(root_ / rel, std::ios::binary) << data;
    return data;
  }
  void PutText(const fs::path& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel, std::ios::binary) << text;
  }
  // All records of a dataset, by key.
  std::map<std::string, Record> ReadBack(const fs::path& dst) {
    auto d = Dataset::Open(dst.string());
    EXPECT_TRUE(d.ok()) << d.status();
    std::map<std::string, Record> out;
    if (!d.ok()) return out;
    for (uint64_t i = 0; i < (*d)->size(); ++i) {
      auto r = (*d)->Read(i);
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) out[r->key] = *r;
    }
    return out;
  }

  fs::path root_;
};

TEST_F(PackTest, ImageFolderRoundTripIsByteIdenticalWithLabels) {
  std::map<std::string, std::string> content;
  std::map<std::string, int> label;
  const std::vector<std::string> classes = {"cat", "dog", "emu"};
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 20; ++i) {
      std::string key = classes[c] + "/img" + std::to_string(i) + ".jpg";
      content[key] = Put(fs::path("src") / key, 100 + (i * 997 + c * 31) % 3000, i * 10 + c);
      label[key] = c;
    }
  }
  PackOptions o;
  o.src = (root_ / "src").string();
  o.dst = (root_ / "ds").string();
  o.shard_size = 8192;  // several shards
  o.workers = 2;
  auto sum = Pack(o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->records, 60u);
  EXPECT_EQ(sum->classes, 3u);
  EXPECT_GT(sum->shards, 3u);
  EXPECT_TRUE(sum->rejected.empty());
  EXPECT_EQ(sum->label_names, classes);
  auto recs = ReadBack(root_ / "ds");
  ASSERT_EQ(recs.size(), content.size());
  for (const auto& [key, data] : content) {
    ASSERT_TRUE(recs.count(key)) << key;
    EXPECT_EQ(recs[key].payload, data) << key;
    EXPECT_EQ(recs[key].label, label[key]) << key;
  }
  auto report = Verify((root_ / "ds").string());
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->records_ok, 60u);
  // Every shard stays within the target size (each has several records).
  auto m = Inspect((root_ / "ds").string());
  ASSERT_TRUE(m.ok());
  for (const ShardInfo& s : m->shards) EXPECT_LE(s.bytes, 8192u) << s.path;
}

TEST_F(PackTest, SplitTreePacksAllSplitsOrOne) {
  Put("src/train/a/1.jpg", 10);
  Put("src/train/b/2.jpg", 10);
  Put("src/validation/a/3.jpg", 10);
  Put("src/test/c/4.jpg", 10);
  PackOptions o;
  o.src = (root_ / "src").string();
  o.dst = (root_ / "all").string();
  auto all = Pack(o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->records, 4u);
  EXPECT_EQ(all->label_names, (std::vector<std::string>{"a", "b", "c"}));
  auto recs = ReadBack(root_ / "all");
  ASSERT_TRUE(recs.count("validation/a/3.jpg"));
  EXPECT_EQ(recs["validation/a/3.jpg"].label, 0);
  EXPECT_EQ(recs["test/c/4.jpg"].label, 2);
  EXPECT_EQ(recs["test/c/4.jpg"].meta, R"({"split":"test"})");

  o.dst = (root_ / "train").string();
  o.split = "train";
  auto train = Pack(o);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->records, 2u);
  o.split = "nope";
  auto bad = Pack(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nope"), std::string::npos);
}

TEST_F(PackTest, ManifestWithMissingEmptyAndDuplicateFilesRejectsEachByName) {
  std::string a = Put("data/a.bin", 50);
  Put("data/b.bin", 60);
  PutText("data/empty.bin", "");
  PutText("list.csv",
          "path,label,note\n"
          "data/a.bin,x,\"first, with comma\"\n"
          "data/b.bin,y,second\n"
          "data/missing.bin,x,gone\n"
          "data/empty.bin,y,zero\n"
          "data/a.bin,y,again\n");
  PackOptions o;
  o.manifest = (root_ / "list.csv").string();
  o.dst = (root_ / "ds").string();
  auto sum = Pack(o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->records, 2u);
  ASSERT_EQ(sum->rejected.size(), 3u);
  std::map<std::string, std::string> why;
  for (const Rejection& r : sum->rejected) why[fs::path(r.path).filename().string()] += r.reason;
  EXPECT_NE(why["missing.bin"].find("does not exist"), std::string::npos);
  EXPECT_NE(why["empty.bin"].find("empty"), std::string::npos);
  EXPECT_NE(why["a.bin"].find("duplicate"), std::string::npos);
  auto listed = io::ReadFileToString((root_ / "ds" / "rejected.txt").string());
  ASSERT_TRUE(listed.ok());
  EXPECT_NE(listed->find("missing.bin\tfile does not exist"), std::string::npos) << *listed;
  auto recs = ReadBack(root_ / "ds");
  EXPECT_EQ(recs["data/a.bin"].payload, a);
  EXPECT_EQ(recs["data/a.bin"].label, 0);
  EXPECT_EQ(recs["data/b.bin"].label, 1);
  EXPECT_EQ(recs["data/a.bin"].meta, R"({"note":"first, with comma"})");

  // --strict: the same input fails and leaves no dataset.
  o.strict = true;
  auto strict = Pack(o);
  ASSERT_FALSE(strict.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(strict.status())) << strict.status();
  EXPECT_FALSE(fs::exists(root_ / "ds" / "manifest.json"));
  EXPECT_TRUE(fs::exists(root_ / "ds" / "rejected.txt"));
}

TEST_F(PackTest, JsonlManifestWithTemplateAndIntegerLabels) {
  std::string one = Put("images/001.jpg", 30);
  Put("images/002.jpg", 40);
  PutText("m.jsonl", "{\"id\": \"001\", \"y\": 7}\n\n{\"id\": \"002\", \"y\": 2, \"w\": 1.5}\n");
  PackOptions o;
  o.manifest = (root_ / "m.jsonl").string();
  o.dst = (root_ / "ds").string();
  o.path_column = "id";
  o.label_column = "y";
  o.path_template = "images/{}.jpg";
  auto sum = Pack(o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->records, 2u);
  EXPECT_EQ(sum->classes, 2u);
  EXPECT_TRUE(sum->label_names.empty());
  auto recs = ReadBack(root_ / "ds");
  EXPECT_EQ(recs["images/001.jpg"].label, 7);
  EXPECT_EQ(recs["images/001.jpg"].payload, one);
  EXPECT_EQ(recs["images/002.jpg"].meta, R"({"w":"1.5"})");
}

TEST_F(PackTest, RerunReplacesCleanlyAndInterruptedPackLeavesNoManifest) {
  for (int i = 0; i < 30; ++i) Put("src/f" + std::to_string(i), 1000, i);
  PackOptions o;
  o.src = (root_ / "src").string();
  o.dst = (root_ / "ds").string();
  o.shard_size = 4096;
  ASSERT_TRUE(Pack(o).ok());
  size_t first = 0;
  for (auto& e : fs::directory_iterator(root_ / "ds")) first += e.path().extension() == ".stk";
  EXPECT_GE(first, 8u);
  // Fewer, bigger shards the second time: no stale shard may survive.
  o.shard_size = 1 << 20;
  auto again = Pack(o);
  ASSERT_TRUE(again.ok());
  size_t second = 0;
  for (auto& e : fs::directory_iterator(root_ / "ds")) second += e.path().extension() == ".stk";
  EXPECT_EQ(second, 1u);
  EXPECT_TRUE(Verify((root_ / "ds").string())->ok());
  // A pack that stops with an error midway (the source vanished) removes the
  // old manifest first and never writes a new one.
  o.src = (root_ / "gone").string();
  ASSERT_FALSE(Pack(o).ok());
  ASSERT_TRUE(fs::exists(root_ / "ds" / "manifest.json")) << "a failed listing must not touch dst";
  o.src = (root_ / "src").string();
  o.progress = [&](const PackProgress& p) {
    if (p.files_done >= 10) throw std::runtime_error("simulated interruption");
  };
  EXPECT_ANY_THROW((void)Pack(o));
  EXPECT_FALSE(fs::exists(root_ / "ds" / "manifest.json"));
  EXPECT_FALSE(Dataset::Open((root_ / "ds").string()).ok());
}

TEST_F(PackTest, ShuffleSeedMixesDeterministically) {
  for (int i = 0; i < 50; ++i) Put("src/f" + std::to_string(100 + i), 10, i);
  auto order = [&](std::optional<uint64_t> seed, const std::string& name) {
    PackOptions o;
    o.src = (root_ / "src").string();
    o.dst = (root_ / name).string();
    o.shuffle_seed = seed;
    EXPECT_TRUE(Pack(o).ok());
    auto d = Dataset::Open(o.dst);
    std::vector<std::string> keys;
    for (uint64_t i = 0; i < (*d)->size(); ++i) keys.push_back((*d)->Read(i)->key);
    return keys;
  };
  auto sorted = order(std::nullopt, "a");
  EXPECT_TRUE(std::is_sorted(sorted.begin(), sorted.end()));
  auto s1 = order(1, "b"), s1again = order(1, "c"), s2 = order(2, "d");
  EXPECT_EQ(s1, s1again);
  EXPECT_NE(s1, s2);
  EXPECT_NE(s1, sorted);
  EXPECT_EQ(std::set<std::string>(s1.begin(), s1.end()),
            std::set<std::string>(sorted.begin(), sorted.end()));
}

TEST_F(PackTest, FlatFolderHasNoLabelsAndHiddenFilesAreCounted) {
  Put("src/a.txt", 5);
  Put("src/b.txt", 6);
  Put("src/.DS_Store", 6);
  PackOptions o;
  o.src = (root_ / "src").string();
  o.dst = (root_ / "ds").string();
  auto sum = Pack(o);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->records, 2u);
  EXPECT_EQ(sum->skipped_hidden, 1u);
  EXPECT_EQ(sum->classes, 0u);
  EXPECT_EQ(ReadBack(root_ / "ds")["a.txt"].label, -1);
}

TEST_F(PackTest, ResizeRejectsNonJpegByName) {
  Put("src/a/noise.jpg", 500);
  PackOptions o;
  o.src = (root_ / "src").string();
  o.dst = (root_ / "ds").string();
  o.resize = 64;
  auto sum = Pack(o);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->records, 0u);
  ASSERT_EQ(sum->rejected.size(), 1u);
  EXPECT_NE(sum->rejected[0].path.find("noise.jpg"), std::string::npos);
  EXPECT_NE(sum->rejected[0].reason.find("JPEG"), std::string::npos);
}

TEST_F(PackTest, BadOptionsAreInvalidArgument) {
  PackOptions o;
  o.src = "x";
  EXPECT_TRUE(absl::IsInvalidArgument(Pack(o).status()));  // no dst
  o.dst = "y";
  o.quality = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Pack(o).status()));
  o.quality = 90;
  o.manifest = "m.csv";
  EXPECT_TRUE(absl::IsInvalidArgument(Pack(o).status()));  // both src and manifest
}

TEST(ParseByteSize, Units) {
  EXPECT_EQ(*ParseByteSize("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseByteSize("64M"), 64u << 20);
  EXPECT_EQ(*ParseByteSize("100MB"), 100000000u);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_FALSE(ParseByteSize("lots").ok());
  EXPECT_FALSE(ParseByteSize("12 parsecs").ok());
}

// The shared real-photo set: all splits, every class.
TEST(PackClothing, PacksAllPhotosInTenClasses) {
  fs::path src = fs::path(STOKER_SOURCE_DIR) / ".." / "shared" / "datasets" / "clothing-small";
  if (!fs::exists(src)) GTEST_SKIP() << "clothing-small not found at " << src;
  fs::path dst = fs::temp_directory_path() / "stoker_pack_clothing";
  PackOptions o;
  o.src = src.string();
  o.dst = dst.string();
  o.shard_size = 16 << 20;
  auto sum = Pack(o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->records, 3781u);
  EXPECT_EQ(sum->classes, 10u);
  EXPECT_TRUE(sum->rejected.empty());
  auto report = Verify(dst.string());
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->records_ok, 3781u);
  fs::remove_all(dst);
}

}  // namespace
}  // namespace stoker
