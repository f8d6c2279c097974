#pragma once
// safetensors (https://github.com/huggingface/safetensors) files: what PyTorch and Hugging Face load with
// `safetensors.torch.load_file`. Written as F32; read from F32, BF16 or F16 (published Llama weights are bf16),
// widened to f32 exactly. Layout: an 8-byte little-endian header
// length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
// "__metadata__": {string: string}}, then the raw little-endian data. Offsets are relative to the
// end of the header. Written to `path.tmp`, fsync'ed, then renamed, so a reader never sees half a file.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::runtime {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, numel = product of shape
};

// InvalidArgument (nothing written) when a name repeats or is "__metadata__", a dim is negative, or a
// tensor's data does not match its shape.
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// The same file, streamed: the tensors' names and shapes (their `data` is ignored), and fill(t, dst), which writes
// tensor t's values (numel of its shape) into dst, a buffer as large as the largest tensor that the writer reuses —
// so a model's weights are written holding one tensor in host memory, not all of them. Tensors are filled and
// written in order; an error from fill stops the write (nothing left at `path`) and is returned.
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& shapes,
                        const std::function<Status(size_t t, float* dst)>& fill,
                        const std::map<std::string, std::string>& metadata = {});

// Reads every tensor as f32: F32 as is, BF16 and F16 widened (exact: every bf16/f16 value is a float32 value;
// inf and NaN stay so); another dtype is InvalidArgument naming the tensor. Sizes and offsets from
// the file are bounds-checked before use: a truncated or corrupt file, or one naming a tensor twice, is
// DataLoss naming the path.
Status ReadSafetensors(const std::string& path, std::vector<NamedTensor>* tensors);

}  // namespace dtrain::runtime
