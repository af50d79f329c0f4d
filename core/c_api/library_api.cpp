// The C ABI's library-wide calls: the version query and log routing.
#include <string>
#include <utility>

#include "common/log.h"
#include "common/log_routing.h"
#include "core/c_api/c_boundary.h"
#include "modelcast/version.h"

using namespace modelcast::c_api;

namespace {

// The ABI version is the SONAME's numbers: "0.1" (0.x) or "1".
constexpr int abi_number(const char* text, int which) {
  int part = 0, value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p == '.') {
      if (part == which) return value;
      ++part;
      value = 0;
    } else {
      value = value * 10 + (*p - '0');
    }
  }
  return part == which ? value : 0;
}

static_assert(MC_LOG_TRACE == static_cast<int>(spdlog::level::trace));
static_assert(MC_LOG_INFO == static_cast<int>(spdlog::level::info));
static_assert(MC_LOG_ERROR == static_cast<int>(spdlog::level::err));
static_assert(MC_LOG_OFF == static_cast<int>(spdlog::level::off));

}  // namespace

extern "C" {

const char* mc_version_string(void) { return MODELCAST_VERSION_STRING; }

void mc_version(int* major, int* minor, int* patch, int* abi_major, int* abi_minor) {
  if (major != nullptr) *major = MODELCAST_VERSION_MAJOR;
  if (minor != nullptr) *minor = MODELCAST_VERSION_MINOR;
  if (patch != nullptr) *patch = MODELCAST_VERSION_PATCH;
  if (abi_major != nullptr) *abi_major = abi_number(MODELCAST_ABI_VERSION_STRING, 0);
  if (abi_minor != nullptr) *abi_minor = abi_number(MODELCAST_ABI_VERSION_STRING, 1);
}

mc_status mc_set_log_handler(mc_log_fn handler, void* user_data) {
  return guarded(__func__, [&] {
    if (handler == nullptr) {
      modelcast::log::set_handler(nullptr);
      return MC_OK;
    }
    modelcast::log::set_handler([handler, user_data](spdlog::level::level_enum level, std::string_view component,
                                                     std::string_view message) {
      // The C side needs NUL-terminated strings; spdlog's views are not.
      const std::string name(component), text(message);
      handler(static_cast<mc_log_level>(level), name.c_str(), text.c_str(), user_data);
    });
    return MC_OK;
  });
}

mc_status mc_set_log_level(mc_log_level level) {
  return guarded(__func__, [&] {
    const int value = raw(level);
    if (value < MC_LOG_TRACE || value > MC_LOG_OFF) {
      invalid("log level " + std::to_string(value) + " is not an mc_log_level (valid: 0 trace .. 6 off)");
    }
    modelcast::log::set_level(static_cast<spdlog::level::level_enum>(value));
    return MC_OK;
  });
}

}  // extern "C"
