// The verbs of the `stoker` CLI: one cmd_<verb>.cc each, listed in main.cc.
#ifndef STOKER_TOOLS_COMMANDS_H_
#define STOKER_TOOLS_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace stoker::cli {

// Process exit codes of the CLI.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,    // the command ran and found a problem (corrupt data, rejections under --strict)
  kExitUsage = 2,      // bad command line
  kExitNotFound = 3,   // no such dataset, file or folder
  kExitDataLoss = 4,   // damaged input that stopped the command
};

// Maps a library status to an exit code and prints it as "stoker <verb>: <message>".
int ReportError(const std::string& verb, const absl::Status& status);

// True when stderr is a terminal (progress bars are drawn only then).
bool StderrIsTerminal();

// Formats bytes as "12.3 MB" and rates as "45.6 MB/s".
std::string HumanBytes(double bytes);

// Each verb: args are the words after the verb. Returns the exit code.
int RunPack(const std::vector<std::string>& args);
int RunInspect(const std::vector<std::string>& args);
int RunVerify(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);

}  // namespace stoker::cli

#endif  // STOKER_TOOLS_COMMANDS_H_
