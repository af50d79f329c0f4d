// Paths of the processes the device tests start. The build compiles in absolute paths
// (tests/device/CMakeLists.txt); an environment variable of the same name overrides each one, so
// that a copy of the tests can run where this build tree does not exist: scripts/gpu-bundle.sh
// carries them to a GPU machine and points these at its wrappers (which start each binary through
// a carried loader). Unset or empty, the compiled-in path is used, as before.
#pragma once

#include <cstdlib>
#include <string>

namespace peer_paths {

inline std::string overridable(const char* variable, const char* compiled_in) {
  const char* value = std::getenv(variable);
  return value != nullptr && *value != '\0' ? value : compiled_in;
}

inline std::string device_peer() { return overridable("MODELCAST_DEVICE_PEER", MODELCAST_DEVICE_PEER); }
inline std::string test_peer() { return overridable("MODELCAST_TEST_PEER", MODELCAST_TEST_PEER); }
inline std::string read_safetensors_py() { return overridable("READ_SAFETENSORS_PY", READ_SAFETENSORS_PY); }
// The interpreter for read_safetensors.py (numpy needed): /usr/bin/python3 unless MODELCAST_PYTHON says.
inline std::string python() { return overridable("MODELCAST_PYTHON", "/usr/bin/python3"); }

}  // namespace peer_paths
