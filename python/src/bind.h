// The parts of the stoker._native extension module, one per area, and the
// one place where an absl::Status becomes a Python exception.
//
// These are shims only: argument conversion, GIL handling and status
// conversion. Defaults, keyword names, iteration and documentation live in
// the Python veneer (python/stoker/*.py).
#ifndef STOKER_PYTHON_BIND_H_
#define STOKER_PYTHON_BIND_H_

#include <nanobind/nanobind.h>

#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::python {

namespace nb = nanobind;

// Adds the exception classes StokerError and DataLossError to `m`.
void BindErrors(nb::module_& m);
// Adds pack() and parse_byte_size().
void BindPack(nb::module_& m);
// Adds inspect(), verify() and the Dataset class.
void BindDataset(nb::module_& m);
// Adds the native Loader class.
void BindLoader(nb::module_& m);

// Raises the Python exception for a non-OK status, message unchanged:
//   NotFound          -> FileNotFoundError
//   InvalidArgument   -> ValueError
//   OutOfRange        -> IndexError
//   PermissionDenied  -> PermissionError
//   DataLoss          -> stoker.DataLossError (a StokerError and an OSError)
//   anything else     -> stoker.StokerError (e.g. FailedPrecondition: a
//                        strict pack with rejections, an unknown format)
// Does nothing for OK. REQUIRES: the GIL is held.
void ThrowIfError(const absl::Status& status);

template <typename T>
T ValueOrThrow(absl::StatusOr<T>&& result) {
  ThrowIfError(result.status());
  return *std::move(result);
}

// Runs f() with the GIL released and returns its result, so other Python
// threads run during blocking or heavy calls. f must not touch Python objects.
template <typename F>
auto WithoutGil(F&& f) {
  nb::gil_scoped_release release;
  return std::forward<F>(f)();
}

// A Python str from bytes that are normally UTF-8 (keys, paths); bytes that
// are not decode as surrogates, as os.fsdecode does, so nothing is lost.
nb::str Str(std::string_view s);

}  // namespace stoker::python

#endif  // STOKER_PYTHON_BIND_H_
