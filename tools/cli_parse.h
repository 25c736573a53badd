// Shared CLI11 glue for the verbs.
#ifndef STOKER_TOOLS_CLI_PARSE_H_
#define STOKER_TOOLS_CLI_PARSE_H_

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "commands.h"

namespace stoker::cli {

// Parses args into app. Returns the exit code to stop with (help printed, or
// a usage error), or nullopt to go on.
inline std::optional<int> Parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes the words in reverse
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace stoker::cli

#endif  // STOKER_TOOLS_CLI_PARSE_H_
