// stoker pack: files -> shards, with a progress bar on a terminal.
#include <cstdio>

#include "absl/strings/str_format.h"
#include "cli_parse.h"
#include "nlohmann/json.hpp"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

void DrawProgress(const PackProgress& p, bool final) {
  double frac = p.files_total ? double(p.files_done) / p.files_total : 1.0;
  int width = 30, filled = static_cast<int>(frac * width);
  double rate = p.seconds > 0 ? p.files_done / p.seconds : 0;
  double eta = rate > 0 ? (p.files_total - p.files_done) / rate : 0;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r[%s] %llu/%llu files  %.0f files/s  %s/s  ETA %.0fs   ", bar.c_str(),
               (unsigned long long)p.files_done, (unsigned long long)p.files_total, rate,
               HumanBytes(p.seconds > 0 ? p.bytes_in / p.seconds : 0).c_str(), eta);
  if (final) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace

int RunPack(const std::vector<std::string>& args) {
  CLI::App app{"Pack many small files into shards of 1-128 MB with an index and per-record "
               "CRC-32C, and write DST/manifest.json last.",
               "stoker pack"};
  PackOptions o;
  std::string shard_size = "64MiB", manifest, split;
  int workers = 0, resize = 0;
  uint64_t seed = 0;
  bool json = false;
  app.add_option("src", o.src, "source folder: ImageFolder tree (class folders, optionally "
                               "under train/validation/test) or a flat folder of files");
  app.add_option("dst", o.dst, "destination dataset folder")->required();
  app.add_option("--manifest", manifest,
                 "CSV (with header) or JSONL file naming the files instead of SRC; paths "
                 "relative to its folder");
  app.add_option("--path-column", o.path_column, "manifest column with the file path")
      ->capture_default_str();
  app.add_option("--label-column", o.label_column, "manifest column with the label")
      ->capture_default_str();
  app.add_option("--path-template", o.path_template,
                 "turns a path value into a path, e.g. images/{}.jpg")
      ->capture_default_str();
  app.add_option("--split", split, "pack only this split folder (e.g. train)");
  app.add_option("--shard-size", shard_size, "target shard size, e.g. 64MiB, 100MB")
      ->capture_default_str();
  auto* w = app.add_option("--workers", workers, "reader threads (default: all cores)");
  auto* r = app.add_option("--resize", resize,
                           "resize JPEGs: shorter side to N pixels, never upscaled");
  app.add_option("--quality", o.quality, "JPEG quality for resized images (1-100)")
      ->capture_default_str();
  auto* s = app.add_option("--shuffle-seed", seed, "mix records across shards with this seed");
  app.add_flag("--strict", o.strict, "any rejected input fails the pack (no manifest)");
  app.add_flag("--json", json, "print the summary as JSON on stdout");
  if (auto code = Parse(app, args)) return *code;

  // The two positionals shift when --manifest replaces SRC.
  if (!manifest.empty()) {
    if (!o.src.empty() && o.dst.empty()) std::swap(o.src, o.dst);
    if (!o.src.empty()) {
      std::fprintf(stderr, "stoker pack: give SRC or --manifest, not both\n");
      return kExitUsage;
    }
    o.manifest = manifest;
  } else if (o.src.empty()) {
    std::fprintf(stderr, "stoker pack: SRC and DST are required (or --manifest FILE DST)\n");
    return kExitUsage;
  }
  if (!split.empty()) o.split = split;
  if (w->count()) o.workers = workers;
  if (r->count()) o.resize = resize;
  if (s->count()) o.shuffle_seed = seed;
  absl::StatusOr<uint64_t> bytes = ParseByteSize(shard_size);
  if (!bytes.ok()) return ReportError("pack", bytes.status());
  o.shard_size = *bytes;
  for (const std::string& warning : o.Warnings()) {
    std::fprintf(stderr, "stoker pack: warning: %s\n", warning.c_str());
  }
  const bool bar = StderrIsTerminal() && !json;
  if (bar) o.progress = [](const PackProgress& p) { DrawProgress(p, p.files_done == p.files_total); };

  absl::StatusOr<PackSummary> sum = Pack(o);
  if (!sum.ok()) return ReportError("pack", sum.status());
  if (json) {
    nlohmann::json j;
    j["records"] = sum->records;
    j["shards"] = sum->shards;
    j["bytes"] = sum->bytes;
    j["payload_bytes"] = sum->payload_bytes;
    j["source_bytes"] = sum->source_bytes;
    j["classes"] = sum->classes;
    j["label_names"] = sum->label_names;
    j["resized"] = sum->resized;
    j["skipped_hidden"] = sum->skipped_hidden;
    j["seconds"] = sum->seconds;
    j["fingerprint"] = sum->fingerprint;
    j["rejected"] = nlohmann::json::array();
    for (const Rejection& rj : sum->rejected) {
      j["rejected"].push_back({{"path", rj.path}, {"reason", rj.reason}});
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    double secs = sum->seconds > 0 ? sum->seconds : 1e-9;
    std::printf("packed %llu records in %llu shards (%s) into %s in %.2f s: %.0f files/s, %s/s\n",
                (unsigned long long)sum->records, (unsigned long long)sum->shards,
                HumanBytes(sum->bytes).c_str(), o.dst.c_str(), sum->seconds,
                sum->records / secs, HumanBytes(sum->source_bytes / secs).c_str());
    std::printf("classes: %llu", (unsigned long long)sum->classes);
    if (!sum->label_names.empty()) {
      std::printf(" (");
      for (size_t i = 0; i < sum->label_names.size(); ++i) {
        std::printf("%s%s", i ? ", " : "", sum->label_names[i].c_str());
      }
      std::printf(")");
    }
    std::printf("\n");
    if (o.resize) std::printf("resized: %llu images to shorter side %d\n",
                              (unsigned long long)sum->resized, *o.resize);
    if (sum->skipped_hidden) std::printf("hidden files and folders skipped: %llu\n",
                                         (unsigned long long)sum->skipped_hidden);
    std::printf("rejected: %zu%s\n", sum->rejected.size(),
                sum->rejected.empty() ? "" : " (listed in rejected.txt)");
    for (size_t i = 0; i < sum->rejected.size() && i < 20; ++i) {
      std::printf("  %s: %s\n", sum->rejected[i].path.c_str(), sum->rejected[i].reason.c_str());
    }
    if (sum->rejected.size() > 20) std::printf("  ... and %zu more\n", sum->rejected.size() - 20);
  }
  return kExitOk;
}

}  // namespace stoker::cli
