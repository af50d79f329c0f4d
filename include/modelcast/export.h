// Symbol visibility: libmodelcast exports only what carries MODELCAST_API.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define MODELCAST_API __attribute__((visibility("default")))
#else
#define MODELCAST_API
#endif
