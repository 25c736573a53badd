// stoker: the command-line interface. A thin main over the library: a table
// of verbs, `stoker help [VERB]`, and a did-you-mean for typos.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "commands.h"
#include "stoker/version.h"

namespace stoker::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

constexpr Command kCommands[] = {
    {"pack", "pack a folder or a manifest of files into shards", RunPack},
    {"inspect", "print a dataset's manifest summary", RunInspect},
    {"verify", "read every record of a dataset and check every checksum", RunVerify},
    {"bench", "run the loader over a dataset and report samples/s and where time goes", RunBench},
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "stoker %s: keeps GPUs fed.\n\n"
               "usage: stoker <command> [options]   (stoker <command> --help for options)\n\n"
               "commands:\n",
               kVersion);
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "  %-10s %s\n", "help", "this list, or `stoker help <command>`");
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

const Command* Find(const std::string& name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

int RealMain(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    PrintUsage(stderr);
    return kExitUsage;
  }
  const std::string verb = args[0];
  args.erase(args.begin());
  if (verb == "help" || verb == "--help" || verb == "-h") {
    if (!args.empty()) {
      if (const Command* c = Find(args[0])) return c->run({"--help"});
      std::fprintf(stderr, "stoker: no command '%s'\n", args[0].c_str());
      return kExitUsage;
    }
    PrintUsage(stdout);
    return kExitOk;
  }
  if (verb == "--version" || verb == "version") {
    std::printf("stoker %s\n", kVersion);
    return kExitOk;
  }
  if (const Command* c = Find(verb)) return c->run(args);
  const Command* best = nullptr;
  size_t best_d = 3;
  for (const Command& c : kCommands) {
    size_t d = EditDistance(verb, c.name);
    if (d < best_d) best_d = d, best = &c;
  }
  std::fprintf(stderr, "stoker: unknown command '%s'", verb.c_str());
  if (best) std::fprintf(stderr, "; did you mean '%s'?", best->name);
  std::fprintf(stderr, "\n(stoker help lists the commands)\n");
  return kExitUsage;
}

}  // namespace

int ReportError(const std::string& verb, const absl::Status& status) {
  std::fprintf(stderr, "stoker %s: %s\n", verb.c_str(), std::string(status.message()).c_str());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kDataLoss:
      return kExitDataLoss;
    default:
      return kExitFailure;
  }
}

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string HumanBytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return u == 0 ? absl::StrFormat("%.0f %s", b, units[u]) : absl::StrFormat("%.1f %s", b, units[u]);
}

}  // namespace stoker::cli

int main(int argc, char** argv) { return stoker::cli::RealMain(argc, argv); }
