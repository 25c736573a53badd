// The epoch plan: which samples this rank gets, in which order, in which
// batches. A pure function of its inputs, so a checkpoint is a few integers.
#ifndef STOKER_PLAN_EPOCH_PLAN_H_
#define STOKER_PLAN_EPOCH_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::plan {

// How the shards of a dataset are spread over ranks (SageMaker's
// FullyReplicated and ShardedByS3Key).
enum class Distribution {
  kReplicated,  // every rank may read every shard; samples are split
  kSharded,     // rank r reads only shards s with s % world_size == r
};

struct PlanOptions {
  uint64_t seed = 0;
  bool shuffle = true;
  uint32_t batch_size = 1;  // > 0
  // true: every rank gets floor(N / world_size) samples (the remainder is not
  // seen this epoch) and a short last batch is dropped. false: ranks are
  // padded to ceil(N / world_size) samples by repeating samples from the
  // start of the permutation (reported by padding()), and the last batch may
  // be short.
  bool drop_last = false;
  uint32_t rank = 0;
  uint32_t world_size = 1;  // > rank
  Distribution distribution = Distribution::kReplicated;
  // Records per shard, in shard order, summing to the sample count. Needed
  // by kSharded and shuffle_window; otherwise unused.
  std::vector<uint64_t> shard_records;
  // 0: one global permutation (random access: local files, fastfile).
  // > 0 (streaming, pipe mode): shards in a seeded order, each read front to
  // back, the stream cut into blocks of this many samples, each block
  // shuffled: a sample moves fewer than `window` places either way, samples
  // of one shard stay close together, and a reader needs the shards of about
  // one block at a time.
  uint64_t shuffle_window = 0;
};

// The ordered sample ids (global record indices, 0..N-1) of one rank for one
// epoch. The order depends only on (fingerprint, seed, epoch): with
// kReplicated every rank computes the same one and takes every
// world_size-th element starting at its rank, so ranks are disjoint (apart
// from explicit padding) and together cover the epoch. With kSharded each
// rank orders the samples of its own shards, and ranks are evened out to the
// same count (the smallest with drop_last, else the largest, padded with
// repeats).
//
// Thread-safety: immutable after Make(); safe for concurrent use.
class EpochPlan {
 public:
  // Returns InvalidArgument for batch_size 0, rank >= world_size, (with
  // drop_last) fewer samples than ranks, kSharded with fewer shards than
  // ranks, or shard_records (when needed) not summing to num_samples.
  static absl::StatusOr<EpochPlan> Make(const std::string& fingerprint, uint64_t num_samples,
                                        const PlanOptions& options, uint64_t epoch);

  uint64_t epoch() const { return epoch_; }
  // Samples this rank delivers this epoch (after drop_last, with padding).
  uint64_t size() const { return size_; }
  uint64_t num_batches() const { return num_batches_; }
  // Samples in batch b (batch_size except maybe the last).
  uint32_t batch_length(uint64_t b) const;
  // How many of this rank's samples repeat earlier ones to even out ranks.
  uint64_t padding() const { return padding_; }
  // The global sample id of this rank's i-th sample. REQUIRES: i < size().
  uint64_t SampleAt(uint64_t i) const { return ids_[i]; }
  const PlanOptions& options() const { return options_; }

 private:
  PlanOptions options_;
  uint64_t epoch_ = 0;
  uint64_t size_ = 0;
  uint64_t num_batches_ = 0;
  uint64_t padding_ = 0;
  std::vector<uint64_t> ids_;
};

// A seed for (a dataset fingerprint, a user seed, an epoch): changes with
// each, so epochs differ and two datasets do not share an order.
uint64_t EpochSeed(const std::string& fingerprint, uint64_t seed, uint64_t epoch);

// Counter-based random numbers: the draws for sample `id` of `epoch` depend
// only on (seed, epoch, id) and the draw count, never on thread count or
// timing. Cheap to construct; not thread-safe (make one per sample).
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t id);
  uint64_t NextU64();
  // Uniform in [0, 1).
  double Uniform();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// The resumable position of a loader: enough to rebuild the plan and skip
// what the consumer already received.
struct PlanState {
  std::string fingerprint;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t batches_done = 0;  // batches the consumer received this epoch
  uint64_t num_samples = 0;
  uint32_t batch_size = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  bool shuffle = true;
  bool drop_last = false;
  Distribution distribution = Distribution::kReplicated;
  uint64_t shuffle_window = 0;
};

}  // namespace stoker::plan

#endif  // STOKER_PLAN_EPOCH_PLAN_H_
