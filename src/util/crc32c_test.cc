#include "util/crc32c.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace stoker::crc32c {
namespace {

TEST(Crc32c, StandardVectors) {
  // RFC 3720 (iSCSI) test vectors.
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, '\0'), dec(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = char(i), dec[i] = char(31 - i);
  EXPECT_EQ(Value(zeros), 0x8a9136aau);
  EXPECT_EQ(Value(ones), 0x62a8ab43u);
  EXPECT_EQ(Value(inc), 0x46dd794eu);
  EXPECT_EQ(Value(dec), 0x113fdb5cu);
  EXPECT_EQ(Value("123456789"), 0xe3069283u);
  EXPECT_EQ(Value(""), 0u);
}

TEST(Crc32c, ExtendEqualsWholeAcrossLaneBoundaries) {
  // Long inputs take the three-lane path; every split must agree.
  std::mt19937 rng(7);
  std::string data(3 * 4096 * 3 + 123, '\0');
  for (char& c : data) c = char(rng());
  const uint32_t whole = Value(data);
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{12288},
                       size_t{12289}, data.size() - 1, data.size()}) {
    uint32_t c = Extend(0, data.data(), split);
    c = Extend(c, data.data() + split, data.size() - split);
    EXPECT_EQ(c, whole) << "split at " << split;
  }
  // Byte-at-a-time reference over a prefix that spans a lane block.
  uint32_t bytewise = 0;
  for (size_t i = 0; i < 40000; ++i) bytewise = Extend(bytewise, data.data() + i, 1);
  EXPECT_EQ(bytewise, Value(data.data(), 40000));
}

TEST(Crc32c, CombineEqualsConcatenation) {
  std::mt19937 rng(11);
  std::string data(50000, '\0');
  for (char& c : data) c = char(rng());
  const uint32_t whole = Value(data);
  for (size_t split : {size_t{0}, size_t{1}, size_t{8}, size_t{4095}, size_t{12288},
                       size_t{33333}, data.size()}) {
    const uint32_t a = Value(data.data(), split);
    const uint32_t b = Value(data.data() + split, data.size() - split);
    EXPECT_EQ(Combine(a, b, data.size() - split), whole) << "split at " << split;
  }
  // A wrong length gives a wrong CRC: the length is part of the answer.
  const uint32_t a = Value(data.data(), 100);
  const uint32_t b = Value(data.data() + 100, data.size() - 100);
  EXPECT_NE(Combine(a, b, data.size() - 99), whole);
}

TEST(Crc32c, MaskRoundTripsAndDiffers) {
  uint32_t crc = Value("hello");
  EXPECT_NE(Mask(crc), crc);
  EXPECT_EQ(Unmask(Mask(crc)), crc);
}

}  // namespace
}  // namespace stoker::crc32c
