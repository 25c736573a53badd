#include "pack/sources.h"

#include "gtest/gtest.h"

namespace stoker::pack {
namespace {

TEST(ParseCsv, QuotesCommasNewlinesAndCrLf) {
  auto rows = ParseCsv("a,b\r\n\"x, y\",\"say \"\"hi\"\"\"\n\"two\nlines\",3");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[1][0], "x, y");
  EXPECT_EQ((*rows)[1][1], "say \"hi\"");
  EXPECT_EQ((*rows)[2][0], "two\nlines");
  EXPECT_EQ((*rows)[2][1], "3");
}

TEST(ParseCsv, UnterminatedQuoteNamesTheLine) {
  auto rows = ParseCsv("a,b\n1,2\n\"oops,3\n");
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("line 3"), std::string::npos) << rows.status();
}

TEST(ListSources, ManifestWithoutPathColumnIsRefused) {
  PackOptions o;
  o.manifest = "/nonexistent/list.csv";
  o.dst = "/tmp/x";
  auto l = ListSources(o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("/nonexistent/list.csv"), std::string::npos);
}

}  // namespace
}  // namespace stoker::pack
