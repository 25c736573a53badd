#include "plan/epoch_plan.h"

#include <map>
#include <set>

#include "gtest/gtest.h"

namespace stoker::plan {
namespace {

std::vector<uint64_t> Ids(const EpochPlan& p) {
  std::vector<uint64_t> v;
  for (uint64_t i = 0; i < p.size(); ++i) v.push_back(p.SampleAt(i));
  return v;
}

TEST(EpochPlan, OneRankCoversEveryIdOnceInShuffledOrder) {
  PlanOptions o;
  o.batch_size = 7;
  auto p = EpochPlan::Make("fp", 100, o, 0);
  ASSERT_TRUE(p.ok());
  auto ids = Ids(*p);
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 100u);
  EXPECT_EQ(p->num_batches(), 15u);
  EXPECT_EQ(p->batch_length(14), 2u);
  EXPECT_EQ(p->padding(), 0u);
  std::vector<uint64_t> sorted(ids);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(ids, sorted);
}

TEST(EpochPlan, PureFunctionOfItsInputs) {
  PlanOptions o;
  o.batch_size = 4;
  o.seed = 3;
  auto a = EpochPlan::Make("fp", 50, o, 1), b = EpochPlan::Make("fp", 50, o, 1);
  EXPECT_EQ(Ids(*a), Ids(*b));
  EXPECT_NE(Ids(*a), Ids(*EpochPlan::Make("fp", 50, o, 2)));       // epoch
  EXPECT_NE(Ids(*a), Ids(*EpochPlan::Make("other", 50, o, 1)));    // dataset
  o.seed = 4;
  EXPECT_NE(Ids(*a), Ids(*EpochPlan::Make("fp", 50, o, 1)));       // seed
  o.shuffle = false;
  auto plain = Ids(*EpochPlan::Make("fp", 50, o, 1));
  EXPECT_TRUE(std::is_sorted(plain.begin(), plain.end()));
}

TEST(EpochPlan, RanksAreDisjointAndCoverTheEpochWithExplicitPadding) {
  for (bool drop : {false, true}) {
    PlanOptions o;
    o.batch_size = 3;
    o.world_size = 4;
    o.drop_last = drop;
    std::map<uint64_t, int> seen;
    uint64_t padding = 0;
    for (uint32_t r = 0; r < 4; ++r) {
      o.rank = r;
      auto p = EpochPlan::Make("fp", 103, o, 5);
      ASSERT_TRUE(p.ok());
      padding += p->padding();
      for (uint64_t id : Ids(*p)) ++seen[id];
      if (drop) {
        EXPECT_EQ(p->size() % 3, 0u);
      } else {
        EXPECT_EQ(p->size(), 26u);
      }
    }
    if (!drop) {
      EXPECT_EQ(seen.size(), 103u);
      EXPECT_EQ(padding, 1u);  // 4 * 26 = 104 = 103 + 1
      int repeats = 0;
      for (auto& [id, c] : seen) repeats += c - 1;
      EXPECT_EQ(repeats, 1);
    } else {
      for (auto& [id, c] : seen) EXPECT_EQ(c, 1) << id;
      EXPECT_EQ(padding, 0u);
    }
  }
}

TEST(EpochPlan, BadOptionsAreRefused) {
  PlanOptions o;
  o.batch_size = 0;
  EXPECT_FALSE(EpochPlan::Make("fp", 10, o, 0).ok());
  o.batch_size = 1;
  o.world_size = 2;
  o.rank = 2;
  EXPECT_FALSE(EpochPlan::Make("fp", 10, o, 0).ok());
  o.rank = 0;
  o.drop_last = true;
  EXPECT_FALSE(EpochPlan::Make("fp", 1, o, 0).ok());
}

TEST(SampleRng, DependsOnlyOnKeyAndCount) {
  SampleRng a(1, 2, 3), b(1, 2, 3), c(1, 2, 4);
  for (int i = 0; i < 10; ++i) {
    uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    EXPECT_NE(x, c.NextU64());
  }
  SampleRng u(9, 9, 9);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    double v = u.Uniform();
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum += v;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace stoker::plan
