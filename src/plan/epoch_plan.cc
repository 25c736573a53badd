#include "plan/epoch_plan.h"

#include <xxhash.h>

#include <algorithm>
#include <numeric>

#include "util/strings.h"

namespace stoker::plan {
namespace {

uint64_t SplitMix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t EpochSeed(const std::string& fingerprint, uint64_t seed, uint64_t epoch) {
  uint64_t h = XXH3_64bits_withSeed(fingerprint.data(), fingerprint.size(), seed);
  return SplitMix(h ^ SplitMix(epoch + 0x5851f42d4c957f2dull));
}

SampleRng::SampleRng(uint64_t seed, uint64_t epoch, uint64_t id)
    : key_(SplitMix(SplitMix(seed ^ 0x243f6a8885a308d3ull) ^ SplitMix(epoch) * 3 ^
                    SplitMix(id + 0x13198a2e03707344ull))) {}

uint64_t SampleRng::NextU64() { return SplitMix(key_ ^ SplitMix(++counter_)); }

double SampleRng::Uniform() { return (NextU64() >> 11) * 0x1.0p-53; }

uint64_t SampleRng::Below(uint64_t n) {
  // Lemire's nearly-divisionless method would be faster; n is small here and
  // a rejection loop keeps the draw exactly uniform.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t v;
  do {
    v = NextU64();
  } while (v >= limit);
  return v % n;
}

absl::StatusOr<EpochPlan> EpochPlan::Make(const std::string& fingerprint, uint64_t n,
                                          const PlanOptions& o, uint64_t epoch) {
  if (o.batch_size == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (o.world_size == 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        StrCat("rank ", o.rank, " is not in [0, world_size ", o.world_size, ")"));
  }
  if (o.drop_last && n < o.world_size) {
    return absl::InvalidArgumentError(StrCat("dataset has ", n, " samples, fewer than the ",
                                             o.world_size, " ranks (drop_last)"));
  }
  const bool need_shards = o.distribution == Distribution::kSharded || o.shuffle_window > 0;
  if (need_shards) {
    uint64_t total = 0;
    for (uint64_t r : o.shard_records) total += r;
    if (o.shard_records.empty() || total != n) {
      return absl::InvalidArgumentError(StrCat("shard_records sum to ", total, " over ",
                                               o.shard_records.size(), " shards, not the ", n,
                                               " samples"));
    }
  }
  if (o.distribution == Distribution::kSharded && o.shard_records.size() < o.world_size) {
    return absl::InvalidArgumentError(
        StrCat("distribution \"sharded\" needs at least one shard per rank: ",
               o.shard_records.size(), " shards for ", o.world_size, " ranks"));
  }
  EpochPlan p;
  p.options_ = o;
  p.epoch_ = epoch;
  SampleRng rng(EpochSeed(fingerprint, o.seed, epoch), epoch, UINT64_MAX);
  std::vector<uint64_t> first(o.shard_records.size() + 1, 0);
  for (size_t s = 0; s < o.shard_records.size(); ++s) first[s + 1] = first[s] + o.shard_records[s];

  // The samples of `shards` in the epoch's order.
  auto order = [&](std::vector<uint64_t> shards) {
    std::vector<uint64_t> ids;
    if (o.shuffle_window == 0) {
      for (uint64_t s : shards) {
        for (uint64_t i = first[s]; i < first[s + 1]; ++i) ids.push_back(i);
      }
      if (o.shuffle) {  // Fisher-Yates over a counter-based stream
        for (uint64_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.Below(i)]);
      }
      return ids;
    }
    if (o.shuffle) {
      for (uint64_t i = shards.size(); i > 1; --i) {
        std::swap(shards[i - 1], shards[rng.Below(i)]);
      }
    }
    // Block shuffle: the stream is cut into consecutive blocks of
    // shuffle_window samples and each block is permuted. A sample moves
    // fewer than shuffle_window places either way, and a block spans a
    // bounded number of shards, so a streaming reader needs only the shards
    // of about one block at a time (a reservoir-style buffer would let
    // stragglers of long-finished shards come out at any later time).
    std::vector<uint64_t> block;
    auto flush = [&] {
      for (uint64_t i = block.size(); i > 1; --i) std::swap(block[i - 1], block[rng.Below(i)]);
      ids.insert(ids.end(), block.begin(), block.end());
      block.clear();
    };
    for (uint64_t s : shards) {
      for (uint64_t i = first[s]; i < first[s + 1]; ++i) {
        if (!o.shuffle) {
          ids.push_back(i);
          continue;
        }
        block.push_back(i);
        if (block.size() == o.shuffle_window) flush();
      }
    }
    flush();
    return ids;
  };

  const uint64_t w = o.world_size;
  uint64_t per_rank = 0;
  if (o.distribution == Distribution::kSharded) {
    std::vector<uint64_t> mine;
    uint64_t smallest = UINT64_MAX, largest = 0;
    for (uint32_t r = 0; r < w; ++r) {
      uint64_t count = 0;
      for (size_t s = r; s < o.shard_records.size(); s += w) {
        count += o.shard_records[s];
        if (r == o.rank) mine.push_back(s);
      }
      smallest = std::min(smallest, count);
      largest = std::max(largest, count);
    }
    std::vector<uint64_t> ids = order(std::move(mine));
    per_rank = o.drop_last ? smallest : largest;
    if (per_rank > 0 && ids.empty()) {
      return absl::InvalidArgumentError(StrCat("rank ", o.rank, "'s shards hold no samples"));
    }
    p.ids_.reserve(per_rank);
    for (uint64_t j = 0; j < per_rank; ++j) {
      if (j >= ids.size()) ++p.padding_;
      p.ids_.push_back(ids[j % ids.size()]);
    }
  } else {
    std::vector<uint64_t> perm;
    if (need_shards) {
      std::vector<uint64_t> all(o.shard_records.size());
      std::iota(all.begin(), all.end(), uint64_t{0});
      perm = order(std::move(all));
    } else {
      perm.resize(n);
      std::iota(perm.begin(), perm.end(), uint64_t{0});
      if (o.shuffle && n > 1) {
        // Fisher-Yates over a counter-based stream: the same on every platform.
        for (uint64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
      }
    }
    per_rank = o.drop_last ? n / w : (n + w - 1) / w;
    if (n == 0) per_rank = 0;
    p.ids_.reserve(per_rank);
    for (uint64_t j = 0; j < per_rank; ++j) {
      uint64_t g = j * w + o.rank;  // position in the (padded) global order
      if (g >= n) {
        ++p.padding_;
        g %= n;  // padding repeats the start of the permutation
      }
      p.ids_.push_back(perm[g]);
    }
  }
  p.size_ = per_rank;
  if (o.drop_last) {
    p.num_batches_ = per_rank / o.batch_size;
    p.size_ = p.num_batches_ * o.batch_size;
    p.ids_.resize(p.size_);
  } else {
    p.num_batches_ = (per_rank + o.batch_size - 1) / o.batch_size;
  }
  return p;
}

uint32_t EpochPlan::batch_length(uint64_t b) const {
  const uint64_t start = b * options_.batch_size;
  if (start >= size_) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(options_.batch_size, size_ - start));
}

}  // namespace stoker::plan
