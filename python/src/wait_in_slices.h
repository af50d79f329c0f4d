// A library wait run in slices, Python's signal handlers run between them: Ctrl-C
// (KeyboardInterrupt) ends a wait within a slice, as it ends time.sleep(). The library's waits
// block in C++ with the GIL released, where Python's handlers never run: a wait_for_version(v,
// math.inf) could only be killed.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>

namespace modelcast::python {

// Calls `wait(slice)` (which releases the GIL itself) until it returns something true or
// `timeout` has passed, and returns its last answer. Needs the GIL; raises what a signal
// handler raised (py::error_already_set). Only the main thread runs handlers, as in Python.
template <typename Wait>
auto wait_in_slices(std::chrono::milliseconds timeout, Wait&& wait) -> decltype(wait(timeout)) {
  constexpr std::chrono::milliseconds kSlice{100};  // how late Ctrl-C may be answered
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const auto left = std::max(timeout - waited, std::chrono::milliseconds(0));
    auto answer = wait(std::min(left, kSlice));
    if (answer || left <= kSlice) return answer;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
  }
}

}  // namespace modelcast::python
