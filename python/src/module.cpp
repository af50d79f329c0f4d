// The extension module modelcast._core. The Python package (python/modelcast/) wraps it; users
// import modelcast, not _core.
#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  namespace mp = modelcast::python;
  m.doc() = "modelcast C++ core (use the modelcast package, which wraps it)";
  mp::bind_errors(m);
  mp::bind_types(m);
  mp::bind_device(m);
  mp::bind_view(m);
  mp::bind_producer(m);
  mp::bind_consumer(m);
  auto predictor = m.def_submodule("predictor", "loss-curve forecasting and publish scheduling");
  mp::bind_forecast(predictor);
  mp::bind_online(predictor);
}
