#pragma once
// Element types and device kinds of dtrain tensors.

#include <cstddef>
#include <cstdint>

namespace dtrain {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kU8 };
enum class DeviceType : uint8_t { kCPU, kCUDA };

inline size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kU8:
      return 1;
  }
  return 0;
}

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

inline const char* DeviceName(DeviceType d) { return d == DeviceType::kCPU ? "cpu" : "cuda"; }

// Compile-time map from C++ element type to DType (for Tensor::data<T>() checks).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};

}  // namespace dtrain
