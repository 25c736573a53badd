// The version of stoker, as printed by `stoker --version` and stoker.__version__.
#ifndef STOKER_VERSION_H_
#define STOKER_VERSION_H_

namespace stoker {
inline constexpr char kVersion[] = "0.1.0";
}  // namespace stoker

#endif  // STOKER_VERSION_H_
