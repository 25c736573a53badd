// stoker inspect: a dataset's manifest summary.
#include <cstdio>

#include "cli_parse.h"
#include "nlohmann/json.hpp"
#include "stoker/dataset.h"

namespace stoker::cli {

int RunInspect(const std::vector<std::string>& args) {
  CLI::App app{"Print the summary of a dataset's manifest: records, shards, bytes, classes "
               "and the packing options.",
               "stoker inspect"};
  std::string uri;
  bool json = false, shards = false;
  app.add_option("uri", uri, "dataset folder")->required();
  app.add_flag("--json", json, "print as JSON");
  app.add_flag("--shards", shards, "also list every shard");
  if (auto code = Parse(app, args)) return *code;
  absl::StatusOr<Manifest> m = Inspect(uri);
  if (!m.ok()) return ReportError("inspect", m.status());
  if (json) {
    nlohmann::json j;
    j["uri"] = uri;
    j["records"] = m->records;
    j["shards"] = m->shards.size();
    j["bytes"] = m->bytes;
    j["payload_bytes"] = m->payload_bytes;
    j["classes"] = m->num_classes;
    j["label_names"] = m->label_names;
    j["unlabeled"] = m->unlabeled;
    j["fingerprint"] = m->fingerprint;
    j["created_by"] = m->created_by;
    j["pack_options"] = m->pack_options;
    if (shards) {
      j["shard_list"] = nlohmann::json::array();
      for (const ShardInfo& s : m->shards) {
        j["shard_list"].push_back({{"path", s.path}, {"bytes", s.bytes}, {"records", s.records}});
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("dataset      %s\n", uri.c_str());
  std::printf("records      %llu\n", (unsigned long long)m->records);
  std::printf("shards       %zu (%s, %.1f MB per shard on average)\n", m->shards.size(),
              HumanBytes(m->bytes).c_str(),
              m->shards.empty() ? 0.0 : m->bytes / 1e6 / m->shards.size());
  std::printf("payload      %s\n", HumanBytes(m->payload_bytes).c_str());
  std::printf("classes      %llu", (unsigned long long)m->num_classes);
  if (!m->label_names.empty()) {
    std::printf(" (");
    for (size_t i = 0; i < m->label_names.size(); ++i) {
      std::printf("%s%zu=%s", i ? ", " : "", i, m->label_names[i].c_str());
    }
    std::printf(")");
  }
  std::printf("\n");
  if (m->unlabeled) std::printf("unlabeled    %llu\n", (unsigned long long)m->unlabeled);
  std::printf("fingerprint  %s\n", m->fingerprint.c_str());
  std::printf("created by   %s\n", m->created_by.c_str());
  std::printf("packed with  %s\n", m->pack_options.dump().c_str());
  if (shards) {
    for (const ShardInfo& s : m->shards) {
      std::printf("  %s  %llu records  %s\n", s.path.c_str(), (unsigned long long)s.records,
                  HumanBytes(s.bytes).c_str());
    }
  }
  return kExitOk;
}

}  // namespace stoker::cli
