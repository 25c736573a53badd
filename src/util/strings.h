// String helpers. Debian's Abseil is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW 0), so absl::StrCat does not take a
// std::string_view; these take anything fmt can format, string views of both
// kinds included.
#ifndef STOKER_UTIL_STRINGS_H_
#define STOKER_UTIL_STRINGS_H_

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  auto format(absl::string_view s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};

namespace stoker {

// Concatenates the arguments, each formatted as by fmt's "{}".
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", args), ...);
  return out;
}

// Appends the arguments to *out.
template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (fmt::format_to(std::back_inserter(*out), "{}", args), ...);
}

inline std::string_view ToStd(absl::string_view s) { return {s.data(), s.size()}; }
inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace stoker

#endif  // STOKER_UTIL_STRINGS_H_
