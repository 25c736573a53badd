#include "stoker/loader.h"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "image/transform.h"
#include "pipeline/buffer_pool.h"
#include "stoker/dataset.h"
#include "util/strings.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

size_t DTypeBytes(DType d) { return d == DType::kUint8 ? 1 : d == DType::kFloat16 ? 2 : 4; }

// A batch being filled by the workers; slots are written by different threads,
// each slot by exactly one.
struct BatchBuild {
  std::shared_ptr<Batch> batch;
  std::vector<absl::Status> slot_status;
  std::vector<std::string> slot_key;  // "shard:key" for error reports
};

// One sample on its way through the pipeline.
struct SampleTask {
  BatchBuild* build = nullptr;
  uint32_t slot = 0;
  uint64_t sample_id = 0;
  bool last_in_batch = false;
};

// A bounded, closable FIFO of finished batches (or errors, or the end).
class BatchQueue {
 public:
  explicit BatchQueue(size_t capacity) : capacity_(capacity) {}
  // Blocks while full. Returns false when closed.
  bool Push(absl::StatusOr<std::shared_ptr<const Batch>> item) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  void PushEnd() {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    not_empty_.notify_all();
  }
  // Blocks until an item, the end (returns nullptr) or Close (Cancelled).
  absl::StatusOr<std::shared_ptr<const Batch>> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty() || ended_; });
    if (!items_.empty()) {
      auto item = std::move(items_.front());
      items_.pop_front();
      not_full_.notify_one();
      return item;
    }
    if (closed_) return absl::CancelledError("loader stopped");
    return std::shared_ptr<const Batch>();
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    items_.clear();
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<absl::StatusOr<std::shared_ptr<const Batch>>> items_;
  const size_t capacity_;
  bool ended_ = false;
  bool closed_ = false;
};

struct AtomicStats {
  std::atomic<uint64_t> samples{0}, batches{0}, bytes_read{0}, skipped{0};
  std::atomic<int64_t> read_ns{0}, decode_ns{0}, collate_ns{0}, wait_ns{0};
  std::mutex mu;
  std::vector<std::string> skipped_keys;  // guarded by mu
};

// Per-thread working state of the decode stage.
struct Worker {
  std::string scratch;
  image::ImageTransform transform;
  bool ready = false;
};

class LoaderImpl final : public Loader {
 public:
  LoaderImpl(LoaderOptions o, std::unique_ptr<Dataset> d)
      : o_(std::move(o)),
        dataset_(std::move(d)),
        threads_(o_.threads.value_or(std::max(1u, std::thread::hardware_concurrency()))),
        pool_(std::make_shared<pipeline::BufferPool>(
            o_.decode == Decode::kImage ? o_.batch_size * o_.sample_bytes() : 0)) {
    spec_.image_size = static_cast<int>(o_.image_size);
    spec_.train = o_.train;
    spec_.layout = o_.layout;
    spec_.dtype = o_.dtype;
    spec_.normalize = o_.normalize;
    spec_.mean = o_.mean;
    spec_.std = o_.std;
    spec_.limits.max_pixels = o_.max_pixels;
    spec_.limits.max_scans = o_.max_scans;
  }
  ~LoaderImpl() override { Stop(); }

  absl::Status Init() { return MakePlan(); }

  uint64_t num_batches() const override { return plan_->num_batches(); }
  uint64_t epoch() const override { return epoch_; }
  void SetEpoch(uint64_t epoch) override {
    Stop();
    epoch_ = epoch;
    batches_done_ = 0;
    (void)MakePlan();
  }

  absl::StatusOr<std::shared_ptr<const Batch>> Next() override {
    if (batches_done_ >= plan_->num_batches()) {
      // End of the epoch: the next call starts the next one.
      Stop();
      epoch_ += 1;
      batches_done_ = 0;
      if (absl::Status s = MakePlan(); !s.ok()) return s;
      return std::shared_ptr<const Batch>();
    }
    if (!running_) Start();
    const auto t0 = Clock::now();
    absl::StatusOr<std::shared_ptr<const Batch>> item = queue_->Pop();
    stats_.wait_ns += NanosSince(t0);
    if (first_batch_seconds_ < 0 && item.ok() && *item) {
      first_batch_seconds_ = std::chrono::duration<double>(Clock::now() - created_).count();
    }
    if (!item.ok()) {
      if (IsTransient(item.status())) {
        // The store was unreachable: the batch was not delivered. Stop, so
        // that the next call (or a state_dict taken now) starts from it.
        Stop();
        return item.status();
      }
      // A damaged batch counts as delivered: the next call gets the batch after it.
      ++batches_done_;
      return item.status();
    }
    if (!*item) {  // the pipeline ended early (cannot happen without an error)
      return absl::InternalError("pipeline ended before the epoch's last batch");
    }
    ++batches_done_;
    return item;
  }

  void Stop() override {
    if (!running_) return;
    stop_.store(true);
    queue_->Close();
    ctx_->cancel_group_execution();
    if (thread_.joinable()) thread_.join();
    // oneTBB keeps its worker threads alive after the work is done; wait for
    // them to exit so a stopped loader leaves no thread behind. finalize
    // declines (and changes nothing) while other TBB work in the process
    // still uses them.
    if (workers_handle_) (void)tbb::finalize(workers_handle_, std::nothrow);
    running_ = false;
    queue_.reset();
    ctx_.reset();
  }

  LoaderStats stats() const override {
    LoaderStats s;
    s.samples = stats_.samples;
    s.batches = stats_.batches;
    s.bytes_read = stats_.bytes_read;
    s.read_seconds = stats_.read_ns * 1e-9;
    s.decode_seconds = stats_.decode_ns * 1e-9;
    s.collate_seconds = stats_.collate_ns * 1e-9;
    s.wait_seconds = stats_.wait_ns * 1e-9;
    s.first_batch_seconds = first_batch_seconds_;
    s.skipped = stats_.skipped;
    {
      std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(stats_.mu));
      s.skipped_keys = stats_.skipped_keys;
    }
    s.pool_buffers = pool_->allocated();
    s.padding = plan_->padding();
    const DatasetIoStats io = dataset_->io_stats();
    s.cache_hits = io.cache_hits;
    s.cache_misses = io.cache_misses;
    s.bytes_downloaded = io.bytes_downloaded;
    return s;
  }

  plan::PlanState state() const override {
    const plan::PlanOptions po = PlanOpts();
    plan::PlanState st;
    st.fingerprint = dataset_->manifest().fingerprint;
    st.seed = po.seed;
    st.epoch = epoch_;
    st.batches_done = batches_done_;
    st.num_samples = dataset_->size();
    st.batch_size = po.batch_size;
    st.rank = po.rank;
    st.world_size = po.world_size;
    st.shuffle = po.shuffle;
    st.drop_last = po.drop_last;
    st.distribution = po.distribution;
    st.shuffle_window = po.shuffle_window;
    return st;
  }

  absl::Status Restore(const plan::PlanState& st) override {
    auto mismatch = [](const char* what, auto have, auto got) {
      return absl::FailedPreconditionError(StrCat("cannot resume: the state's ", what, " (",
                                                  got, ") differs from this loader's (", have,
                                                  ")"));
    };
    const plan::PlanState mine = state();
    if (st.fingerprint != mine.fingerprint) {
      return mismatch("dataset fingerprint", mine.fingerprint, st.fingerprint);
    }
    if (st.num_samples != mine.num_samples) return mismatch("sample count", mine.num_samples, st.num_samples);
    if (st.seed != mine.seed) return mismatch("seed", mine.seed, st.seed);
    if (st.batch_size != mine.batch_size) return mismatch("batch_size", mine.batch_size, st.batch_size);
    if (st.world_size != mine.world_size) return mismatch("world_size", mine.world_size, st.world_size);
    if (st.rank != mine.rank) return mismatch("rank", mine.rank, st.rank);
    if (st.shuffle != mine.shuffle) return mismatch("shuffle", mine.shuffle, st.shuffle);
    if (st.drop_last != mine.drop_last) return mismatch("drop_last", mine.drop_last, st.drop_last);
    if (st.distribution != mine.distribution) {
      return mismatch("distribution", static_cast<int>(mine.distribution),
                      static_cast<int>(st.distribution));
    }
    if (st.shuffle_window != mine.shuffle_window) {
      return mismatch("shuffle window (input mode)", mine.shuffle_window, st.shuffle_window);
    }
    Stop();
    epoch_ = st.epoch;
    if (absl::Status s = MakePlan(); !s.ok()) return s;
    if (st.batches_done > plan_->num_batches()) {
      return absl::FailedPreconditionError(StrCat("cannot resume: the state has ",
                                                  st.batches_done, " batches done of ",
                                                  plan_->num_batches()));
    }
    batches_done_ = st.batches_done;
    return absl::OkStatus();
  }

 private:
  // The plan's inputs from the options (shard sizes from the manifest).
  plan::PlanOptions PlanOpts() const {
    plan::PlanOptions po;
    po.seed = o_.seed;
    po.shuffle = o_.shuffle;
    po.batch_size = o_.batch_size;
    po.drop_last = o_.drop_last;
    po.rank = o_.rank;
    po.world_size = o_.world_size;
    po.distribution = o_.distribution;
    po.shuffle_window = o_.shuffle_window;
    for (const ShardInfo& s : dataset_->manifest().shards) po.shard_records.push_back(s.records);
    return po;
  }

  absl::Status MakePlan() {
    const plan::PlanOptions po = PlanOpts();
    absl::StatusOr<plan::EpochPlan> p =
        plan::EpochPlan::Make(dataset_->manifest().fingerprint, dataset_->size(), po, epoch_);
    if (!p.ok()) return p.status();
    plan_ = std::make_shared<const plan::EpochPlan>(std::move(*p));
    return absl::OkStatus();
  }

  void Start() {
    // Fastfile read-ahead: shards in the order the plan first needs them.
    std::vector<uint64_t> shard_order;
    std::vector<bool> seen(dataset_->manifest().shards.size(), false);
    for (uint64_t i = batches_done_ * o_.batch_size; i < plan_->size(); ++i) {
      const uint64_t s = ShardOf(plan_->SampleAt(i));
      if (!seen[s]) {
        seen[s] = true;
        shard_order.push_back(s);
      }
    }
    dataset_->Prefetch(std::move(shard_order));
    stop_.store(false);
    queue_ = std::make_unique<BatchQueue>(static_cast<size_t>(o_.prefetch.value_or(2)));
    ctx_ = std::make_unique<tbb::task_group_context>();
    workers_handle_ = tbb::task_scheduler_handle{tbb::attach{}};
    running_ = true;
    thread_ = std::thread([this, plan = plan_, first = batches_done_, q = queue_.get(),
                           ctx = ctx_.get()] { Run(*plan, first, q, ctx); });
  }

  uint64_t ShardOf(uint64_t sample) const {
    const auto& shards = dataset_->manifest().shards;
    if (shard_starts_.empty()) {
      uint64_t first = 0;
      for (const ShardInfo& s : shards) {
        shard_starts_.push_back(first);
        first += s.records;
      }
    }
    return static_cast<uint64_t>(std::upper_bound(shard_starts_.begin(), shard_starts_.end(),
                                                  sample) -
                                 shard_starts_.begin()) -
           1;
  }

  // The epoch's pipeline, on its own thread inside an arena of threads_.
  void Run(const plan::EpochPlan& plan, uint64_t first_batch, BatchQueue* q,
           tbb::task_group_context* ctx) {
    const uint64_t end = plan.size();
    uint64_t pos = first_batch * o_.batch_size;
    std::unique_ptr<BatchBuild> current;
    std::vector<std::unique_ptr<BatchBuild>> open;  // owned until emitted
    std::mutex open_mu;
    tbb::enumerable_thread_specific<Worker> workers;
    const size_t sample_bytes = o_.sample_bytes();
    tbb::task_arena arena(threads_);
    const size_t tokens = static_cast<size_t>(std::max(threads_ * 4, 8));
    arena.execute([&] {
      tbb::parallel_pipeline(
          tokens,
          tbb::make_filter<void, SampleTask>(
              tbb::filter_mode::serial_in_order,
              [&](tbb::flow_control& fc) -> SampleTask {
                if (pos >= end || stop_.load()) {
                  fc.stop();
                  return {};
                }
                const uint64_t b = pos / o_.batch_size;
                const uint32_t slot = static_cast<uint32_t>(pos % o_.batch_size);
                if (slot == 0) {
                  auto build = std::make_unique<BatchBuild>();
                  const uint32_t n = plan.batch_length(b);
                  auto* raw = new Batch();
                  raw->epoch = plan.epoch();
                  raw->index = b;
                  raw->size = n;
                  if (o_.decode == Decode::kImage) {
                    raw->images = pool_->Acquire();
                    const int64_t s = o_.image_size;
                    raw->shape = o_.layout == Layout::kNCHW ? std::vector<int64_t>{n, 3, s, s}
                                                            : std::vector<int64_t>{n, s, s, 3};
                  } else {
                    raw->payloads.resize(n);
                  }
                  raw->labels.assign(n, -1);
                  raw->sample_ids.assign(n, 0);
                  raw->keys.assign(n, "");
                  std::weak_ptr<pipeline::BufferPool> pool = pool_;
                  build->batch = std::shared_ptr<Batch>(raw, [pool](Batch* bt) {
                    if (bt->images) {
                      if (auto p = pool.lock()) p->Release(bt->images);
                      else std::free(bt->images);
                    }
                    delete bt;
                  });
                  build->slot_status.assign(n, absl::OkStatus());
                  build->slot_key.assign(n, "");
                  std::lock_guard<std::mutex> lock(open_mu);
                  open.push_back(std::move(build));
                  current_build_ = open.back().get();
                }
                SampleTask t;
                t.build = current_build_;
                t.slot = slot;
                t.sample_id = plan.SampleAt(pos);
                t.last_in_batch = slot + 1 == plan.batch_length(b);
                ++pos;
                return t;
              }) &
              tbb::make_filter<SampleTask, SampleTask>(
                  tbb::filter_mode::parallel,
                  [&](SampleTask t) -> SampleTask {
                    Worker& w = workers.local();
                    Process(t, w, plan.epoch(), sample_bytes);
                    return t;
                  }) &
              tbb::make_filter<SampleTask, void>(
                  tbb::filter_mode::serial_in_order, [&](SampleTask t) {
                    if (!t.last_in_batch) return;
                    const auto t0 = Clock::now();
                    std::unique_ptr<BatchBuild> build;
                    {
                      std::lock_guard<std::mutex> lock(open_mu);
                      for (auto it = open.begin(); it != open.end(); ++it) {
                        if (it->get() == t.build) {
                          build = std::move(*it);
                          open.erase(it);
                          break;
                        }
                      }
                    }
                    absl::StatusOr<std::shared_ptr<const Batch>> out = Finish(*build, sample_bytes);
                    stats_.collate_ns += NanosSince(t0);
                    if (!q->Push(std::move(out))) ctx->cancel_group_execution();
                  }),
          *ctx);
    });
    if (!stop_.load()) q->PushEnd();
  }

  void Process(const SampleTask& t, Worker& w, uint64_t epoch, size_t sample_bytes) {
    Batch& b = *t.build->batch;
    auto t0 = Clock::now();
    shard::RecordView view;
    uint64_t shard_index = 0;
    absl::Status s = dataset_->ReadView(t.sample_id, &w.scratch, &view, &shard_index);
    stats_.read_ns += NanosSince(t0);
    b.sample_ids[t.slot] = t.sample_id;
    if (!s.ok()) {
      t.build->slot_status[t.slot] = s;
      t.build->slot_key[t.slot] = StrCat(dataset_->shard_path(shard_index), ": sample ",
                                         t.sample_id);
      return;
    }
    stats_.bytes_read += view.key.size() + view.meta.size() + view.payload.size();
    b.labels[t.slot] = view.label;
    b.keys[t.slot] = std::string(view.key);
    t0 = Clock::now();
    if (o_.decode == Decode::kRaw) {
      b.payloads[t.slot] = std::string(view.payload);
    } else {
      if (!w.ready) {
        s = w.transform.Setup(spec_);
        w.ready = s.ok();
      }
      if (s.ok()) {
        plan::SampleRng rng(o_.seed, epoch, t.sample_id);
        s = w.transform.Run(view.payload,
                            &rng, static_cast<char*>(b.images) + t.slot * sample_bytes);
      }
      if (!s.ok()) {
        // A sample that is not a decodable image is damaged data, whatever
        // the decoder called it; caps (ResourceExhausted) keep their code.
        const absl::StatusCode code = s.code() == absl::StatusCode::kInvalidArgument
                                          ? absl::StatusCode::kDataLoss
                                          : s.code();
        s = absl::Status(code, StrCat("shard ", dataset_->shard_path(shard_index),
                                          " offset ", view.offset, " key '", view.key,
                                          "': ", s.message()));
      }
    }
    stats_.decode_ns += NanosSince(t0);
    if (!s.ok()) {
      t.build->slot_status[t.slot] = s;
      t.build->slot_key[t.slot] = StrCat(dataset_->shard_path(shard_index), ":", view.key);
    }
  }

  // Applies the error policy to a filled batch: kRaise returns the first
  // error; kSkip closes the gaps and counts what it left out.
  absl::StatusOr<std::shared_ptr<const Batch>> Finish(BatchBuild& build, size_t sample_bytes) {
    Batch& b = *build.batch;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < b.size; ++i) {
      const absl::Status& s = build.slot_status[i];
      if (!s.ok()) {
        // An unreachable store is not a damaged sample: never skipped.
        if (o_.on_error == OnError::kRaise || IsTransient(s)) return s;
        ++stats_.skipped;
        std::lock_guard<std::mutex> lock(stats_.mu);
        stats_.skipped_keys.push_back(StrCat(build.slot_key[i], ": ", s.message()));
        continue;
      }
      if (kept != i) {
        if (b.images) {
          std::memmove(static_cast<char*>(b.images) + kept * sample_bytes,
                       static_cast<char*>(b.images) + i * sample_bytes, sample_bytes);
        } else {
          b.payloads[kept] = std::move(b.payloads[i]);
        }
        b.labels[kept] = b.labels[i];
        b.sample_ids[kept] = b.sample_ids[i];
        b.keys[kept] = std::move(b.keys[i]);
      }
      ++kept;
    }
    if (kept != b.size) {
      b.size = kept;
      if (!b.shape.empty()) b.shape[0] = kept;
      if (!b.images) b.payloads.resize(kept);
      b.labels.resize(kept);
      b.sample_ids.resize(kept);
      b.keys.resize(kept);
    }
    stats_.samples += kept;
    ++stats_.batches;
    return std::shared_ptr<const Batch>(build.batch);
  }

  const LoaderOptions o_;
  const std::unique_ptr<Dataset> dataset_;
  const int threads_;
  std::shared_ptr<pipeline::BufferPool> pool_;
  image::TransformSpec spec_;
  const Clock::time_point created_ = Clock::now();

  // Consumer-side state (Next / SetEpoch / Restore run on the consumer thread).
  uint64_t epoch_ = 0;
  uint64_t batches_done_ = 0;
  std::shared_ptr<const plan::EpochPlan> plan_;
  double first_batch_seconds_ = -1;
  bool running_ = false;
  std::thread thread_;
  std::unique_ptr<BatchQueue> queue_;
  std::unique_ptr<tbb::task_group_context> ctx_;
  tbb::task_scheduler_handle workers_handle_;
  std::atomic<bool> stop_{false};
  BatchBuild* current_build_ = nullptr;  // touched by the serial input stage only
  mutable std::vector<uint64_t> shard_starts_;  // consumer thread only

  AtomicStats stats_;
};

}  // namespace

absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "uint8") return DType::kUint8;
  if (name == "float32") return DType::kFloat32;
  if (name == "float16") return DType::kFloat16;
  return absl::InvalidArgumentError(
      StrCat("dtype '", name, "' is not one of uint8, float32, float16"));
}

absl::StatusOr<Layout> ParseLayout(std::string_view name) {
  if (name == "NCHW") return Layout::kNCHW;
  if (name == "NHWC") return Layout::kNHWC;
  return absl::InvalidArgumentError(StrCat("layout '", name, "' is not one of NCHW, NHWC"));
}

absl::StatusOr<OnError> ParseOnError(std::string_view name) {
  if (name == "raise") return OnError::kRaise;
  if (name == "skip") return OnError::kSkip;
  return absl::InvalidArgumentError(StrCat("on_error '", name, "' is not one of raise, skip"));
}

absl::StatusOr<Decode> ParseDecode(std::string_view name) {
  if (name == "image") return Decode::kImage;
  if (name == "raw") return Decode::kRaw;
  return absl::InvalidArgumentError(StrCat("decode '", name, "' is not one of image, raw"));
}

absl::StatusOr<plan::Distribution> ParseDistribution(std::string_view name) {
  if (name == "replicated") return plan::Distribution::kReplicated;
  if (name == "sharded") return plan::Distribution::kSharded;
  return absl::InvalidArgumentError(
      StrCat("distribution '", name, "' is not one of replicated, sharded"));
}

absl::Status LoaderOptions::Validate() const {
  if (batch_size == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (decode == Decode::kImage && (image_size == 0 || image_size > 8192)) {
    return absl::InvalidArgumentError(StrCat("image_size ", image_size, " is not in 1-8192"));
  }
  if (world_size == 0 || rank >= world_size) {
    return absl::InvalidArgumentError(StrCat("rank ", rank, " is not in [0, world_size ",
                                             world_size, ")"));
  }
  if (normalize && dtype == DType::kUint8) {
    return absl::InvalidArgumentError("normalize needs dtype float32 or float16, not uint8");
  }
  if (threads && (*threads < 1 || *threads > 1024)) {
    return absl::InvalidArgumentError(StrCat("threads ", *threads, " is not in 1-1024"));
  }
  if (prefetch && (*prefetch < 1 || *prefetch > 1024)) {
    return absl::InvalidArgumentError(StrCat("prefetch ", *prefetch, " is not in 1-1024"));
  }
  for (float s : std) {
    if (!(s > 0)) return absl::InvalidArgumentError("std values must be positive");
  }
  return absl::OkStatus();
}

size_t LoaderOptions::sample_bytes() const {
  return size_t{3} * image_size * image_size * DTypeBytes(dtype);
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(const LoaderOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  DatasetOptions dopt;
  dopt.mode = options.mode;
  dopt.local_dir = options.local_dir;
  dopt.cache_dir = options.cache_dir;
  dopt.cache_limit = options.cache_limit;
  dopt.pipe_window_samples = options.shuffle_window;
  dopt.storage.endpoint_url = options.endpoint_url;
  if (options.distribution == plan::Distribution::kSharded) {
    dopt.needed = [rank = options.rank, world = options.world_size](uint64_t s, uint64_t) {
      return s % world == rank;
    };
  }
  if (::isatty(STDERR_FILENO)) {
    // File mode downloads before the first batch: show how far it got.
    dopt.progress = [last = std::make_shared<std::atomic<int64_t>>(-1)](uint64_t done,
                                                                       uint64_t total) {
      const int64_t pct = total ? static_cast<int64_t>(100 * done / total) : 100;
      if (last->exchange(pct) == pct) return;
      std::fprintf(stderr, "\rstoker: downloading shards %3lld%% (%.1f of %.1f MB)%s",
                   static_cast<long long>(pct), done / 1e6, total / 1e6,
                   done >= total ? "\n" : "");
    };
  }
  absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open(options.uri, dopt);
  if (!d.ok()) return d.status();
  auto loader = std::make_unique<LoaderImpl>(options, std::move(*d));
  if (absl::Status s = loader->Init(); !s.ok()) return s;
  return std::unique_ptr<Loader>(std::move(loader));
}

}  // namespace stoker
