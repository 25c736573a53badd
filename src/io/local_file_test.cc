#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "io/byte_source.h"
#include "io/writable_file.h"

namespace stoker::io {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  fs::path d = fs::temp_directory_path() /
               ("stoker_io_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(LocalFile, ReadsExactRangesAndRefusesPastEnd) {
  fs::path d = TempDir();
  ASSERT_TRUE(WriteFileAtomically((d / "f").string(), "0123456789").ok());
  auto src = OpenLocalFile((d / "f").string());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->size(), 10u);
  char buf[4];
  ASSERT_TRUE((*src)->ReadAt(3, 4, buf).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  absl::Status s = (*src)->ReadAt(8, 4, buf);
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_NE(s.message().find((d / "f").string()), std::string::npos);
}

TEST(LocalFile, MissingFileIsNotFoundNamingThePath) {
  auto src = OpenLocalFile("/nonexistent/stoker/x");
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(absl::IsNotFound(src.status()));
  EXPECT_NE(src.status().message().find("/nonexistent/stoker/x"), std::string::npos);
}

TEST(WritableFile, InvisibleUntilCommitAndNothingLeftWithoutIt) {
  fs::path d = TempDir();
  std::string path = (d / "out").string();
  {
    auto f = NewLocalWritableFile(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("abc").ok());
    EXPECT_FALSE(fs::exists(path));
  }  // destroyed without Commit
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(d)) << "temporary file left behind";
  auto f = NewLocalWritableFile(path);
  ASSERT_TRUE(f.ok());
  std::string big(3 << 20, 'x');
  ASSERT_TRUE((*f)->Append("abc").ok());
  ASSERT_TRUE((*f)->Append(big).ok());
  EXPECT_EQ((*f)->size(), big.size() + 3);
  ASSERT_TRUE((*f)->Commit().ok());
  auto back = ReadFileToString(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "abc" + big);
}

TEST(FaultySource, InjectsErrorsAndFlips) {
  auto mem = MakeMemorySource("abcdef", "mem");
  FaultSpec spec;
  spec.fail_from = 4;
  spec.fail_to = 5;
  spec.flip_offset = 1;
  spec.xor_mask = 0x20;
  auto faulty = MakeFaultySource(mem.get(), spec);
  char buf[3];
  ASSERT_TRUE(faulty->ReadAt(0, 3, buf).ok());
  EXPECT_EQ(std::string(buf, 3), "aBc");
  EXPECT_TRUE(absl::IsUnavailable(faulty->ReadAt(3, 2, buf)));
}

}  // namespace
}  // namespace stoker::io
