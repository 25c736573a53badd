// Enumerating what `stoker pack` packs: an ImageFolder tree, a flat folder, or
// a CSV/JSONL manifest.
#ifndef STOKER_PACK_SOURCES_H_
#define STOKER_PACK_SOURCES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/pack.h"

namespace stoker::pack {

// One input file to pack.
struct SourceItem {
  std::string path;  // where to read it
  std::string key;   // unique record key (relative path for folders)
  int32_t label = -1;
  std::string meta;  // JSON object text, or empty
};

struct SourceList {
  std::vector<SourceItem> items;            // sorted by key
  std::vector<std::string> label_names;     // index = label; empty for integer labels
  uint64_t num_classes = 0;
  std::vector<Rejection> rejected;          // found bad while listing
  uint64_t skipped_hidden = 0;
};

// Lists the inputs named by options.src/split or options.manifest.
// Returns InvalidArgument/NotFound naming the path when the source itself is
// unusable; problems with single files go to SourceList::rejected.
absl::StatusOr<SourceList> ListSources(const PackOptions& options);

// Splits one CSV line-set into rows (RFC 4180: quotes, doubled quotes,
// commas and newlines inside quotes). Returns InvalidArgument with the line
// number of an unterminated quote.
absl::StatusOr<std::vector<std::vector<std::string>>> ParseCsv(std::string_view text);

}  // namespace stoker::pack

#endif  // STOKER_PACK_SOURCES_H_
