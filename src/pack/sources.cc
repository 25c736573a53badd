#include "pack/sources.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "util/strings.h"
#include "absl/strings/str_replace.h"
#include "io/byte_source.h"
#include "util/strings.h"
#include "nlohmann/json.hpp"

namespace stoker::pack {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool IsHidden(const fs::path& p) {
  std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool IsSplitName(const std::string& name) {
  static const std::set<std::string> kSplits = {"train", "val", "valid", "validation", "test",
                                                "dev"};
  return kSplits.count(name) > 0;
}

// Sorted subfolders and files directly inside `dir` (hidden ones counted).
struct DirListing {
  std::vector<fs::path> dirs, files;
};
absl::StatusOr<DirListing> ListDir(const fs::path& dir, uint64_t* hidden) {
  DirListing out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (IsHidden(it->path())) {
      ++*hidden;
      continue;
    }
    std::error_code ec2;
    if (it->is_directory(ec2)) {
      out.dirs.push_back(it->path());
    } else {
      out.files.push_back(it->path());
    }
  }
  if (ec) return absl::InvalidArgumentError(stoker::StrCat("cannot list ", dir.string(), ": ",
                                                         ec.message()));
  std::sort(out.dirs.begin(), out.dirs.end());
  std::sort(out.files.begin(), out.files.end());
  return out;
}

// Every non-hidden file below `dir`, recursively, as paths relative to `root`.
absl::Status Walk(const fs::path& dir, const fs::path& root, std::vector<fs::path>* out,
                  uint64_t* hidden) {
  absl::StatusOr<DirListing> l = ListDir(dir, hidden);
  if (!l.ok()) return l.status();
  for (const fs::path& f : l->files) out->push_back(f.lexically_relative(root));
  for (const fs::path& d : l->dirs) {
    if (absl::Status s = Walk(d, root, out, hidden); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<SourceList> ListFolder(const PackOptions& o) {
  fs::path root(o.src);
  std::error_code ec;
  if (!fs::exists(root, ec)) return absl::NotFoundError(stoker::StrCat("source ", o.src,
                                                                     " does not exist"));
  if (!fs::is_directory(root, ec)) {
    return absl::InvalidArgumentError(stoker::StrCat("source ", o.src, " is not a folder"));
  }
  SourceList out;
  absl::StatusOr<DirListing> top = ListDir(root, &out.skipped_hidden);
  if (!top.ok()) return top.status();

  // Which folders hold the classes: SRC itself, SRC/<split>, or every split.
  std::vector<std::pair<std::string, fs::path>> class_roots;  // (split, folder)
  bool split_tree = !top->dirs.empty() &&
                    std::all_of(top->dirs.begin(), top->dirs.end(), [](const fs::path& d) {
                      return IsSplitName(d.filename().string());
                    });
  if (o.split) {
    fs::path s = root / *o.split;
    if (!fs::is_directory(s, ec)) {
      std::string have;
      for (const fs::path& d : top->dirs) stoker::StrAppend(&have, have.empty() ? "" : ", ",
                                                          d.filename().string());
      return absl::NotFoundError(stoker::StrCat("split folder ", s.string(),
                                              " does not exist (folders there: ",
                                              have.empty() ? "none" : have, ")"));
    }
    class_roots.emplace_back(*o.split, s);
  } else if (split_tree) {
    for (const fs::path& d : top->dirs) class_roots.emplace_back(d.filename().string(), d);
  } else {
    class_roots.emplace_back("", root);
  }

  std::set<std::string> class_set;
  struct Pending {
    fs::path abs;
    std::string key, split, cls;
  };
  std::vector<Pending> pending;
  for (const auto& [split, folder] : class_roots) {
    uint64_t hidden_again = 0;  // SRC itself was listed (and counted) above
    absl::StatusOr<DirListing> l =
        ListDir(folder, folder == root ? &hidden_again : &out.skipped_hidden);
    if (!l.ok()) return l.status();
    const std::string prefix = split.empty() ? "" : split + "/";
    if (l->dirs.empty()) {
      // A flat folder: no classes, no labels.
      for (const fs::path& f : l->files) {
        pending.push_back({f, prefix + f.filename().string(), split, ""});
      }
      continue;
    }
    for (const fs::path& f : l->files) {
      out.rejected.push_back({f.string(), "not inside a class folder"});
    }
    for (const fs::path& d : l->dirs) {
      std::string cls = d.filename().string();
      class_set.insert(cls);
      std::vector<fs::path> files;
      if (absl::Status s = Walk(d, folder, &files, &out.skipped_hidden); !s.ok()) return s;
      for (const fs::path& rel : files) {
        pending.push_back({folder / rel, prefix + rel.generic_string(), split, cls});
      }
    }
  }
  out.label_names.assign(class_set.begin(), class_set.end());
  out.num_classes = out.label_names.size();
  std::map<std::string, int32_t> label_of;
  for (size_t i = 0; i < out.label_names.size(); ++i) {
    label_of[out.label_names[i]] = static_cast<int32_t>(i);
  }
  for (Pending& p : pending) {
    SourceItem item;
    item.path = p.abs.string();
    item.key = std::move(p.key);
    item.label = p.cls.empty() ? -1 : label_of[p.cls];
    if (!p.split.empty()) item.meta = json{{"split", p.split}}.dump();
    out.items.push_back(std::move(item));
  }
  return out;
}

// A table of rows, each a column -> value map, from CSV or JSONL.
absl::StatusOr<std::vector<std::map<std::string, std::string>>> ReadTable(
    const std::string& path) {
  absl::StatusOr<std::string> text = io::ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::vector<std::map<std::string, std::string>> rows;
  if (absl::EndsWithIgnoreCase(path, ".jsonl") || absl::EndsWithIgnoreCase(path, ".ndjson")) {
    size_t line_no = 0, start = 0;
    while (start < text->size()) {
      size_t end = text->find('\n', start);
      if (end == std::string::npos) end = text->size();
      std::string_view line = ToStd(absl::StripAsciiWhitespace(
          absl::string_view(*text).substr(start, end - start)));
      start = end + 1;
      ++line_no;
      if (line.empty()) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return absl::InvalidArgumentError(
            stoker::StrCat("manifest ", path, " line ", line_no, ": not a JSON object"));
      }
      std::map<std::string, std::string> row;
      for (auto it = j.begin(); it != j.end(); ++it) {
        row[it.key()] = it->is_string() ? it->get<std::string>()
                        : it->is_null() ? std::string()
                                        : it->dump();
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }
  absl::StatusOr<std::vector<std::vector<std::string>>> csv = ParseCsv(*text);
  if (!csv.ok()) {
    return absl::InvalidArgumentError(stoker::StrCat("manifest ", path, ": ", csv.status().message()));
  }
  if (csv->empty()) return absl::InvalidArgumentError(stoker::StrCat("manifest ", path, " is empty"));
  const std::vector<std::string>& header = (*csv)[0];
  for (size_t r = 1; r < csv->size(); ++r) {
    const std::vector<std::string>& cells = (*csv)[r];
    if (cells.size() == 1 && cells[0].empty()) continue;  // blank line
    if (cells.size() != header.size()) {
      return absl::InvalidArgumentError(stoker::StrCat("manifest ", path, " row ", r + 1, " has ",
                                                     cells.size(), " columns, the header ",
                                                     header.size()));
    }
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < header.size(); ++c) row[header[c]] = cells[c];
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<SourceList> ListManifest(const PackOptions& o) {
  const std::string& path = *o.manifest;
  absl::StatusOr<std::vector<std::map<std::string, std::string>>> rows = ReadTable(path);
  if (!rows.ok()) return rows.status();
  if (!rows->empty() && !(*rows)[0].count(o.path_column)) {
    return absl::InvalidArgumentError(stoker::StrCat("manifest ", path, " has no column '",
                                                   o.path_column, "' (--path-column)"));
  }
  const bool has_labels = !rows->empty() && (*rows)[0].count(o.label_column);
  fs::path base = fs::path(path).parent_path();
  // Labels: plain non-negative integers are kept as they are; anything else
  // is a class name, numbered in sorted order.
  bool all_int = true;
  std::set<std::string> names;
  std::set<int64_t> ints;
  if (has_labels) {
    for (const auto& row : *rows) {
      auto it = row.find(o.label_column);
      if (it == row.end() || it->second.empty()) continue;
      names.insert(it->second);
      int64_t v;
      if (!absl::SimpleAtoi(it->second, &v) || v < 0 || v > INT32_MAX) all_int = false;
      else ints.insert(v);
    }
  }
  SourceList out;
  std::map<std::string, int32_t> label_of;
  if (!all_int) {
    out.label_names.assign(names.begin(), names.end());
    for (size_t i = 0; i < out.label_names.size(); ++i) label_of[out.label_names[i]] = i;
    out.num_classes = out.label_names.size();
  } else {
    out.num_classes = ints.size();
  }
  std::set<std::string> seen;
  size_t row_no = 1;
  for (const auto& row : *rows) {
    ++row_no;
    auto pit = row.find(o.path_column);
    std::string value = pit == row.end() ? "" : pit->second;
    if (value.empty()) {
      out.rejected.push_back({stoker::StrCat(path, ":", row_no),
                              stoker::StrCat("empty '", o.path_column, "' value")});
      continue;
    }
    std::string rel = absl::StrReplaceAll(o.path_template, {{"{}", value}});
    fs::path file = fs::path(rel).is_absolute() ? fs::path(rel) : base / rel;
    std::string key = fs::path(rel).lexically_normal().generic_string();
    if (!seen.insert(key).second) {
      out.rejected.push_back({file.string(), stoker::StrCat("duplicate key '", key,
                                                          "' (row ", row_no, ")")});
      continue;
    }
    SourceItem item;
    item.path = file.string();
    item.key = key;
    if (has_labels) {
      auto lit = row.find(o.label_column);
      if (lit != row.end() && !lit->second.empty()) {
        if (all_int) {
          int64_t v = 0;
          (void)absl::SimpleAtoi(lit->second, &v);
          item.label = static_cast<int32_t>(v);
        } else {
          item.label = label_of[lit->second];
        }
      }
    }
    json meta = json::object();
    for (const auto& [k, v] : row) {
      if (k != o.path_column && k != o.label_column) meta[k] = v;
    }
    if (!meta.empty()) item.meta = meta.dump();
    out.items.push_back(std::move(item));
  }
  std::sort(out.items.begin(), out.items.end(),
            [](const SourceItem& a, const SourceItem& b) { return a.key < b.key; });
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<std::string>>> ParseCsv(std::string_view text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string cell;
  bool in_quotes = false, any = false;
  size_t line = 1, quote_line = 0;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 BOM
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    any = true;
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          cell += '"';
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        if (c == '\n') ++line;
        cell += c;
      }
    } else if (c == '"') {
      in_quotes = true;
      quote_line = line;
    } else if (c == ',') {
      row.push_back(std::move(cell));
      cell.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(std::move(cell));
      cell.clear();
      rows.push_back(std::move(row));
      row.clear();
      any = false;
      ++line;
    } else {
      cell += c;
    }
  }
  if (in_quotes) {
    return absl::InvalidArgumentError(
        stoker::StrCat("unterminated quote opened on line ", quote_line));
  }
  if (any) {
    row.push_back(std::move(cell));
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<SourceList> ListSources(const PackOptions& options) {
  return options.manifest ? ListManifest(options) : ListFolder(options);
}

}  // namespace stoker::pack
