// The C ABI's text copies: NUL-terminated and, as the header promises, UTF-8 even when cut.
#include "core/c_api/c_boundary.h"

#include <gtest/gtest.h>

#include <string>

namespace {

// A 255-byte field cut a two-byte character after its first byte.
TEST(CBoundary, TextCutToItsBufferEndsOnACharacterBoundary) {
  char out[8];
  const std::string text = std::string(6, 'a') + "\xc3\xa9" "b";  // "aaaaaaéb"
  modelcast::c_api::copy_text(text, out, sizeof out);
  EXPECT_EQ(std::string(out), std::string(6, 'a')) << "the cut kept half of 'é'";
  modelcast::c_api::copy_text("\xc3\xa9" "x", out, 3);
  EXPECT_EQ(std::string(out), "\xc3\xa9");
  modelcast::c_api::copy_text("short", out, sizeof out);
  EXPECT_EQ(std::string(out), "short");
}

}  // namespace
