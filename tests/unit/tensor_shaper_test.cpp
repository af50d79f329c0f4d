// Which conversion applies to a tensor: a named one always, "*" to floats only, and "*" not to a
// tensor already in its target dtype (a copy into shaped memory that changes nothing).
#include <gtest/gtest.h>

#include "core/consumer/tensor_shaper.h"

namespace modelcast {
namespace {

TensorSpec float_spec(std::string name, DType dtype) { return TensorSpec{std::move(name), dtype, {4}}; }

TEST(TensorShaper, StarLeavesTensorsOfItsTargetDtypeAndNonFloatsAlone) {
  const consumer::TensorShaper shaper({{"*", DType::kF32, 0}});
  const auto* to_f32 = &shaper.conversions().front();
  EXPECT_EQ(shaper.conversion_for(float_spec("h", DType::kBF16)), to_f32);
  EXPECT_EQ(shaper.conversion_for(float_spec("g", DType::kF16)), to_f32);
  EXPECT_EQ(shaper.conversion_for(float_spec("w", DType::kF32)), nullptr) << "f32 to f32 would be a copy for nothing";
  EXPECT_EQ(shaper.conversion_for(float_spec("i", DType::kI32)), nullptr);
}

TEST(TensorShaper, ANamedConversionAppliesAsAsked) {
  const consumer::TensorShaper shaper({{"*", DType::kBF16, 0}, {"w", DType::kF32, 0}});
  EXPECT_EQ(shaper.conversion_for(float_spec("w", DType::kF32)), &shaper.conversions()[1]);
  EXPECT_EQ(shaper.conversion_for(float_spec("x", DType::kF32)), &shaper.conversions()[0]);
  EXPECT_EQ(shaper.conversion_for(float_spec("b", DType::kBF16)), nullptr);
}

}  // namespace
}  // namespace modelcast
