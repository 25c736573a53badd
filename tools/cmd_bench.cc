// stoker bench: run the loader over a dataset and report how fast it feeds.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli_parse.h"
#include "nlohmann/json.hpp"
#include "stoker/loader.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double PeakRssBytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss * 1024.0;  // kilobytes on Linux
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  CLI::App app{"Run the loader over a dataset with the training (or eval) transform and "
               "report samples/s, MB/s, time to first batch, time per stage per sample, CPU % "
               "and peak RSS.",
               "stoker bench"};
  LoaderOptions o;
  int threads = 0, epochs = 1, prefetch = 0;
  bool json = false, eval = false, raw = false;
  std::string dtype = "uint8", layout = "NCHW";
  app.add_option("uri", o.uri, "dataset folder")->required();
  app.add_option("--batch-size", o.batch_size, "samples per batch")->capture_default_str();
  app.add_option("--image-size", o.image_size, "output height = width")->capture_default_str();
  app.add_flag("--train", o.train, "training transform: RandomResizedCrop + flip (default)");
  app.add_flag("--eval", eval, "eval transform: resize + centre crop");
  app.add_flag("--raw", raw, "no decode: deliver the payload bytes (measures reading alone)");
  app.add_option("--dtype", dtype, "uint8, float32 or float16")->capture_default_str();
  app.add_option("--layout", layout, "NCHW or NHWC")->capture_default_str();
  auto* t = app.add_option("--threads", threads, "decode threads (default: all cores)");
  auto* p = app.add_option("--prefetch", prefetch, "batches ready ahead (default 2)");
  app.add_option("--epochs", epochs, "epochs to run")->capture_default_str();
  app.add_option("--seed", o.seed, "shuffle and augmentation seed")->capture_default_str();
  std::string mode = "auto", cache_limit;
  app.add_option("--mode", mode, "for s3:// datasets: file, pipe or fastfile (default)")
      ->capture_default_str();
  app.add_option("--local-dir", o.local_dir, "file mode: where shards are downloaded");
  app.add_option("--cache-dir", o.cache_dir, "fastfile mode: the node cache folder");
  app.add_option("--cache-limit", cache_limit, "fastfile mode: cache cap, e.g. 20GiB");
  app.add_flag("--json", json, "print the report as JSON");
  if (auto code = Parse(app, args)) return *code;
  if (eval) o.train = false;
  if (raw) o.decode = Decode::kRaw;
  if (t->count()) o.threads = threads;
  if (p->count()) o.prefetch = prefetch;
  absl::StatusOr<InputMode> m = ParseInputMode(mode);
  if (!m.ok()) return ReportError("bench", m.status());
  o.mode = *m;
  if (o.mode == InputMode::kPipe) o.shuffle_window = 1024;
  if (!cache_limit.empty()) {
    absl::StatusOr<uint64_t> limit = ParseByteSize(cache_limit);
    if (!limit.ok()) return ReportError("bench", limit.status());
    o.cache_limit = *limit;
  }
  absl::StatusOr<DType> d = ParseDType(dtype);
  if (!d.ok()) return ReportError("bench", d.status());
  o.dtype = *d;
  o.normalize = o.dtype != DType::kUint8;
  absl::StatusOr<Layout> l = ParseLayout(layout);
  if (!l.ok()) return ReportError("bench", l.status());
  o.layout = *l;

  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = CpuSeconds();
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(o);
  if (!loader.ok()) return ReportError("bench", loader.status());
  nlohmann::json per_epoch = nlohmann::json::array();
  uint64_t samples = 0;
  for (int e = 0; e < epochs; ++e) {
    const auto e0 = std::chrono::steady_clock::now();
    uint64_t n = 0;
    for (;;) {
      absl::StatusOr<std::shared_ptr<const Batch>> b = (*loader)->Next();
      if (!b.ok()) return ReportError("bench", b.status());
      if (!*b) break;
      n += (*b)->size;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    per_epoch.push_back({{"epoch", e}, {"samples", n}, {"seconds", secs},
                         {"samples_per_s", n / std::max(secs, 1e-9)}});
    samples += n;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  LoaderStats st = (*loader)->stats();
  const double per = st.samples ? 1e6 / st.samples : 0;  // microseconds per sample
  nlohmann::json j;
  j["uri"] = o.uri;
  j["train"] = o.train;
  j["decode"] = raw ? "raw" : "image";
  j["batch_size"] = o.batch_size;
  j["image_size"] = o.image_size;
  j["threads"] = o.threads.value_or(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  j["epochs"] = per_epoch;
  j["samples"] = samples;
  j["seconds"] = wall;
  j["samples_per_s"] = samples / std::max(wall, 1e-9);
  j["mb_per_s"] = st.bytes_read / 1e6 / std::max(wall, 1e-9);
  j["first_batch_s"] = st.first_batch_seconds;
  j["us_per_sample"] = {{"read", st.read_seconds * per},
                        {"decode_transform", st.decode_seconds * per},
                        {"collate", st.collate_seconds * per},
                        {"consumer_wait", st.wait_seconds * per}};
  j["cpu_percent"] = 100.0 * cpu / std::max(wall, 1e-9);
  j["peak_rss_bytes"] = PeakRssBytes();
  j["skipped"] = st.skipped;
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%s: %llu samples in %.2f s: %.0f samples/s, %.1f MB/s read\n", o.uri.c_str(),
              (unsigned long long)samples, wall, j["samples_per_s"].get<double>(),
              j["mb_per_s"].get<double>());
  for (const auto& e : per_epoch) {
    std::printf("  epoch %d: %.0f samples/s\n", e["epoch"].get<int>(), e["samples_per_s"].get<double>());
  }
  std::printf("time to first batch: %.3f s\n", st.first_batch_seconds);
  std::printf("per sample (thread time): read %.1f us, decode+transform %.1f us, collate %.1f us; "
              "consumer waited %.1f us\n",
              st.read_seconds * per, st.decode_seconds * per, st.collate_seconds * per,
              st.wait_seconds * per);
  std::printf("CPU %.0f %%, peak RSS %s, skipped %llu\n", j["cpu_percent"].get<double>(),
              HumanBytes(PeakRssBytes()).c_str(), (unsigned long long)st.skipped);
  return kExitOk;
}

}  // namespace stoker::cli
