// stoker._native: the module definition; the bindings live in bind_*.cc.
#include "bind.h"
#include "stoker/version.h"

NB_MODULE(_native, m) {
  m.doc() = "Native core of stoker. Use the `stoker` package, not this module.";
  m.attr("__version__") = stoker::kVersion;
  stoker::python::BindErrors(m);
  stoker::python::BindPack(m);
  stoker::python::BindDataset(m);
  stoker::python::BindLoader(m);
}
