#include "format/manifest.h"

#include "gtest/gtest.h"
#include "format/shard_format.h"

namespace stoker {
namespace {

Manifest Sample() {
  Manifest m;
  m.shard_format_version = shard::kFormatVersion;
  m.shards = {{"shard-00000.stk", 1000, 3, 0xdeadbeef}, {"shard-00001.stk", 500, 2, 0x01020304}};
  m.records = 5;
  m.bytes = 1500;
  m.payload_bytes = 1200;
  m.label_names = {"cat", "dog"};
  m.num_classes = 2;
  m.pack_options = {{"shard_size", 1000}};
  m.created_by = "stoker test";
  m.fingerprint = ComputeFingerprint(m);
  return m;
}

TEST(Manifest, RoundTrips) {
  Manifest m = Sample();
  auto back = ParseManifest(ManifestToJson(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fingerprint, m.fingerprint);
  ASSERT_EQ(back->shards.size(), 2u);
  EXPECT_EQ(back->shards[0].crc32c, 0xdeadbeefu);
  EXPECT_EQ(back->label_names, m.label_names);
  EXPECT_EQ(back->pack_options["shard_size"], 1000);
}

TEST(Manifest, FingerprintDependsOnContent) {
  Manifest a = Sample(), b = Sample();
  b.shards[1].crc32c ^= 1;
  EXPECT_NE(ComputeFingerprint(a), ComputeFingerprint(b));
  b = Sample();
  b.label_names[0] = "cow";
  EXPECT_NE(ComputeFingerprint(a), ComputeFingerprint(b));
  b = Sample();
  b.pack_options = {{"shard_size", 2}};  // options do not change the content
  EXPECT_EQ(ComputeFingerprint(a), ComputeFingerprint(b));
}

TEST(Manifest, CutShortIsDataLossNamingTheFile) {
  std::string json = ManifestToJson(Sample());
  for (size_t len : {size_t{0}, size_t{10}, json.size() / 2, json.size() - 3}) {
    auto m = ParseManifest(json.substr(0, len), "/data/x/manifest.json");
    ASSERT_FALSE(m.ok()) << len;
    EXPECT_TRUE(absl::IsDataLoss(m.status())) << m.status();
    EXPECT_NE(m.status().message().find("/data/x/manifest.json"), std::string::npos);
  }
}

TEST(Manifest, EditedCountsAreRefused) {
  std::string json = ManifestToJson(Sample());
  std::string edited = json;
  edited.replace(edited.find("\"records\": 3"), 12, "\"records\": 4");
  auto m = ParseManifest(edited, "m.json");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsDataLoss(m.status()));
}

TEST(Manifest, UnsafeShardNamesAreRefused) {
  Manifest m = Sample();
  m.shards[0].path = "../../etc/passwd";
  m.fingerprint = ComputeFingerprint(m);
  auto back = ParseManifest(ManifestToJson(m), "m.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("unsafe"), std::string::npos);
}

TEST(Manifest, MissingDatasetIsNotFound) {
  auto m = LoadManifest("/nonexistent/dataset");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsNotFound(m.status()));
  EXPECT_NE(m.status().message().find("/nonexistent/dataset"), std::string::npos);
}

}  // namespace
}  // namespace stoker
