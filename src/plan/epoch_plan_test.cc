#include "plan/epoch_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
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

// 7 shards of uneven sizes, 100 samples.
std::vector<uint64_t> Shards() { return {20, 5, 15, 10, 30, 12, 8}; }

int ShardOf(uint64_t id) {
  uint64_t first = 0;
  int s = 0;
  for (uint64_t r : Shards()) {
    if (id < first + r) return s;
    first += r;
    ++s;
  }
  return -1;
}

TEST(EpochPlan, ShardedRanksReadOnlyTheirShardsAndAreEvenedOut) {
  for (bool drop_last : {false, true}) {
    std::set<uint64_t> seen;
    std::vector<uint64_t> sizes;
    for (uint32_t rank = 0; rank < 3; ++rank) {
      PlanOptions o;
      o.batch_size = 4;
      o.rank = rank;
      o.world_size = 3;
      o.distribution = Distribution::kSharded;
      o.shard_records = Shards();
      o.drop_last = drop_last;
      auto p = EpochPlan::Make("fp", 100, o, 2);
      ASSERT_TRUE(p.ok()) << p.status();
      for (uint64_t id : Ids(*p)) {
        EXPECT_EQ(ShardOf(id) % 3, static_cast<int>(rank)) << id;
        seen.insert(id);
      }
      sizes.push_back(p->size());
    }
    // Ranks hold 20+10+8=38, 5+30=35, 15+12=27 samples: evened to 27 or 38.
    const uint64_t want = drop_last ? 24 : 38;  // 27 rounded down to whole batches
    EXPECT_EQ(sizes, std::vector<uint64_t>(3, want));
    if (!drop_last) EXPECT_EQ(seen.size(), 100u);  // padding repeats, nothing is lost
  }
}

TEST(EpochPlan, ShardedNeedsAShardPerRank) {
  PlanOptions o;
  o.world_size = 8;
  o.rank = 7;
  o.distribution = Distribution::kSharded;
  o.shard_records = Shards();
  auto p = EpochPlan::Make("fp", 100, o, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
  EXPECT_NE(p.status().message().find("7 shards for 8 ranks"), std::string_view::npos);
  o.world_size = 1;
  o.rank = 0;
  o.shard_records = {1, 2};  // does not sum to 100
  EXPECT_TRUE(absl::IsInvalidArgument(EpochPlan::Make("fp", 100, o, 0).status()));
}

TEST(EpochPlan, ShuffleWindowStreamsShardsInOrderWithBoundedDisplacement) {
  const std::vector<uint64_t> shards = {40, 25, 35, 50, 30};  // 180 samples
  std::vector<uint64_t> first = {0};
  for (uint64_t r : shards) first.push_back(first.back() + r);
  auto shard_of = [&](uint64_t id) {
    return static_cast<int>(std::upper_bound(first.begin(), first.end(), id) - first.begin()) - 1;
  };
  PlanOptions o;
  o.batch_size = 10;
  o.shard_records = shards;
  o.shuffle_window = 6;
  auto p = EpochPlan::Make("fp", 180, o, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<uint64_t> ids = Ids(*p);
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 180u);
  // The shards' streaming order: by mean output position (shards are much
  // longer than the window, so their spans barely overlap).
  std::vector<double> mean(shards.size(), 0);
  for (uint64_t out = 0; out < ids.size(); ++out) {
    mean[shard_of(ids[out])] += static_cast<double>(out) / shards[shard_of(ids[out])];
  }
  std::vector<int> order(shards.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return mean[a] < mean[b]; });
  EXPECT_NE(order, (std::vector<int>{0, 1, 2, 3, 4})) << "shard order not shuffled";
  std::map<uint64_t, uint64_t> stream_pos;
  uint64_t pos = 0;
  for (int s : order) {
    for (uint64_t i = first[s]; i < first[s + 1]; ++i) stream_pos[i] = pos++;
  }
  // Blocks of 6 are permuted in place: a sample stays inside its block of
  // the stream (fewer than 6 places either way), and within a shard the file
  // order is mixed.
  bool mixed = false;
  for (uint64_t out = 0; out < ids.size(); ++out) {
    EXPECT_EQ(out / 6, stream_pos[ids[out]] / 6) << "sample " << ids[out] << " at " << out;
    if (out > 0 && ids[out] < ids[out - 1] && shard_of(ids[out]) == shard_of(ids[out - 1])) {
      mixed = true;
    }
  }
  EXPECT_TRUE(mixed);
  // Unshuffled: exactly file order.
  o.shuffle = false;
  auto q = EpochPlan::Make("fp", 180, o, 1);
  ASSERT_TRUE(q.ok());
  std::vector<uint64_t> plain(180);
  std::iota(plain.begin(), plain.end(), uint64_t{0});
  EXPECT_EQ(Ids(*q), plain);
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
