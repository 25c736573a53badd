// absl::Status -> Python exception, in one place (see bind.h for the table).
#include <string>

#include "bind.h"

namespace stoker::python {
namespace {

// Created once when the module is imported and never released: the classes
// must outlive every call that may raise them, as the built-in ones do.
PyObject* stoker_error = nullptr;
PyObject* data_loss_error = nullptr;

}  // namespace

void BindErrors(nb::module_& m) {
  stoker_error = PyErr_NewExceptionWithDoc(
      "stoker.StokerError",
      "Base class of the errors specific to stoker. Raised itself for failed "
      "preconditions (e.g. a strict pack that rejected inputs) and other engine "
      "errors without a closer built-in exception.",
      PyExc_RuntimeError, nullptr);
  if (!stoker_error) throw nb::python_error();
  nb::object bases = nb::make_tuple(nb::handle(stoker_error), nb::handle(PyExc_OSError));
  data_loss_error = PyErr_NewExceptionWithDoc(
      "stoker.DataLossError",
      "Damaged or truncated data: a checksum mismatch, a truncated shard, a "
      "damaged manifest. The message names the file and, for a record, its "
      "offset and key.",
      bases.ptr(), nullptr);
  if (!data_loss_error) throw nb::python_error();
  m.attr("StokerError") = nb::handle(stoker_error);
  m.attr("DataLossError") = nb::handle(data_loss_error);
}

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  PyObject* type;
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case absl::StatusCode::kInvalidArgument:
      type = PyExc_ValueError;
      break;
    case absl::StatusCode::kOutOfRange:
      type = PyExc_IndexError;
      break;
    case absl::StatusCode::kPermissionDenied:
      type = PyExc_PermissionError;
      break;
    case absl::StatusCode::kDataLoss:
      type = data_loss_error;
      break;
    default:
      type = stoker_error;
      break;
  }
  const std::string message(status.message().data(), status.message().size());
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

nb::str Str(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()),
                                     "surrogateescape");
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

}  // namespace stoker::python
