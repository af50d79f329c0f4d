// A C++ sidecar client from a CMake project that sets no C++ standard: find_package(modelcast)
// and modelcast::sidecar bring what its headers need. No daemon runs: the connect fails, named.
// Built and run by tests/abi/install_package_test.cmake.
#include <cstdio>

#include <modelcast/error.h>
#include <modelcast/sidecar.h>

int main(int argc, char** argv) {
  try {
    modelcast::sidecar::Client client({argc > 1 ? argv[1] : "/nonexistent/attach.sock", "model"});
  } catch (const modelcast::Error& e) {
    std::printf("tiny_sidecar_cpp: ok, no daemon (%s)\n", e.what());
    return 0;
  }
  std::printf("tiny_sidecar_cpp: connected with no daemon\n");
  return 1;
}
