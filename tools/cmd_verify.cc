// stoker verify: read every record, check every CRC and the index.
#include <cstdio>

#include "cli_parse.h"
#include "nlohmann/json.hpp"
#include "stoker/dataset.h"

namespace stoker::cli {

int RunVerify(const std::vector<std::string>& args) {
  CLI::App app{"Read every byte of every shard, check every record's CRC-32C, the index and "
               "the manifest's sizes and checksums. Exit 0 only when all is intact; each "
               "problem is reported as shard, offset and key.",
               "stoker verify"};
  std::string uri;
  bool json = false;
  int workers = 0;
  app.add_option("uri", uri, "dataset folder")->required();
  auto* w = app.add_option("--workers", workers, "shards checked in parallel (default: all cores)");
  app.add_flag("--json", json, "print the report as JSON");
  if (auto code = Parse(app, args)) return *code;
  VerifyOptions o;
  if (w->count()) o.workers = workers;
  absl::StatusOr<VerifyReport> r = Verify(uri, o);
  if (!r.ok()) return ReportError("verify", r.status());
  if (json) {
    nlohmann::json j;
    j["uri"] = uri;
    j["ok"] = r->ok();
    j["shards"] = r->shards;
    j["records_ok"] = r->records_ok;
    j["records_bad"] = r->records_bad;
    j["bytes"] = r->bytes;
    j["seconds"] = r->seconds;
    j["corruptions"] = nlohmann::json::array();
    for (const shard::Corruption& c : r->corruptions) {
      j["corruptions"].push_back(
          {{"shard", c.shard}, {"offset", c.offset}, {"key", c.key}, {"reason", c.reason}});
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    double secs = r->seconds > 0 ? r->seconds : 1e-9;
    for (const shard::Corruption& c : r->corruptions) {
      std::printf("CORRUPT %s offset %llu%s%s: %s\n", c.shard.c_str(),
                  (unsigned long long)c.offset, c.key.empty() ? "" : " key ", c.key.c_str(),
                  c.reason.c_str());
    }
    std::printf("%s: %llu shards, %llu records intact, %llu damaged, %s read in %.2f s (%s/s)\n",
                r->ok() ? "OK" : "FAILED", (unsigned long long)r->shards,
                (unsigned long long)r->records_ok, (unsigned long long)r->records_bad,
                HumanBytes(r->bytes).c_str(), r->seconds, HumanBytes(r->bytes / secs).c_str());
  }
  return r->ok() ? kExitOk : kExitFailure;
}

}  // namespace stoker::cli
