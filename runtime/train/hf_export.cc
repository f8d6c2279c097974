#include "runtime/train/hf_export.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/file_guard.h"
#include "data/manifest.h"
#include "data/tokenizer.h"
#include "models/model_registry.h"
#include "runtime/train/hf_import.h"
#include "runtime/train/model_factory.h"

namespace dtrain::runtime {
namespace {

// The [rows, cols] matrix `t` as [cols, rows].
std::vector<float> Transposed(const NamedTensor& t) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> out(t.data.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = t.data[r * cols + c];
  }
  return out;
}

// The HF tensor `h` of the plan, made from its parameter in `by_name`: the row slice, then the transpose.
Status MakeTensor(const models::HfTensor& h, const std::map<std::string, const NamedTensor*>& by_name,
                  const std::string& kind, NamedTensor* out) {
  const auto it = by_name.find(h.param);
  if (it == by_name.end()) return Status::InvalidArgument(kind + " parameter '" + h.param + "' is missing");
  const NamedTensor& t = *it->second;
  if (t.shape != h.param_shape) return Status::InvalidArgument(kind + " parameter '" + h.param + "' has another shape");
  if ((h.transpose && t.shape.size() != 2) || t.shape.empty()) {
    return Status::Internal(kind + " HF export: parameter '" + h.param + "' is no matrix to slice or transpose");
  }
  const int64_t rows = h.keep_rows >= 0 ? h.keep_rows : t.shape[0] - h.row_begin;
  if (h.row_begin < 0 || rows < 0 || h.row_begin + rows > t.shape[0]) {
    return Status::Internal(kind + " HF export: rows of '" + h.param + "' outside its shape");
  }
  int64_t row = 1;  // values per row
  for (size_t d = 1; d < t.shape.size(); ++d) row *= t.shape[d];
  NamedTensor slice{h.name, t.shape, {}};
  slice.shape[0] = rows;
  slice.data.assign(t.data.begin() + h.row_begin * row, t.data.begin() + (h.row_begin + rows) * row);
  if (h.transpose) {
    out->name = h.name;
    out->shape = {slice.shape[1], slice.shape[0]};
    out->data = Transposed(slice);
  } else {
    *out = std::move(slice);
  }
  return Status::OK();
}

Status WriteText(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IoError("cannot create '" + tmp + "': " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("writing '" + path + "': " + std::strerror(errno));
  }
  return Status::OK();
}

// Copies the tokenizer files that the run's hf: source still holds into `dir`.
Status CopyTokenizerFiles(const proto::Config& cfg, const std::string& dir, HfExportReport* report) {
  std::string src;
  if (!HfInitDir(cfg.model().init_from(), &src)) return Status::OK();
  struct stat st;
  if (::stat(src.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    report->warning = "the run started from model.init_from hf:" + src + ", which is gone: no tokenizer files copied";
    return Status::OK();
  }
  for (const std::string& name : HfTokenizerFiles()) {
    const std::string from = src + "/" + name;
    if (::stat(from.c_str(), &st) != 0) continue;
    std::string text;
    DT_RETURN_IF_ERROR(ReadRegularFile(from, "tokenizer file", &text));
    DT_RETURN_IF_ERROR(WriteText(dir + "/" + name, text));
    report->tokenizer_files.push_back(name);
  }
  return Status::OK();
}

// The tokenizer files of the run's training dataset (its schema's TokenizerInfo, written by `convert-text
// --tokenizer`) under the names and with the tokenizer_config.json of data::HfTokenizerLayoutOf. Nothing when the
// dataset is not a local directory or its tokens have no tokenizer file; a warning when its files are gone or changed
// since the conversion (CRC32C), since copying another tokenizer would pair the weights with the wrong ids.
Status CopyDatasetTokenizer(const proto::Config& cfg, const std::string& dir, HfExportReport* report) {
  const std::string& data = cfg.data().train_shards();
  if (cfg.data().dataset() != "shards" || data.empty() || data.find("://") != std::string::npos) return Status::OK();
  proto::DatasetManifest m;
  if (!data::ReadManifest(data, &m).ok() || !m.schema().has_tokenizer()) return Status::OK();
  const proto::TokenizerInfo& t = m.schema().tokenizer();
  data::HfTokenizerLayout layout;
  const Status st = data::HfTokenizerLayoutOf(t, &layout);
  if (st.code() == Status::Code::kNotFound) return Status::OK();  // byte tokens: nothing to write
  if (!st.ok()) return Status::DataLoss(data + ": the schema's tokenizer: " + st.message());
  std::vector<std::string> texts;
  uint32_t crc = 0;
  for (const std::string& f : t.files()) {
    std::string text;
    if (!ReadRegularFile(f, "tokenizer file", &text).ok()) {
      report->warning = "the dataset's tokenizer file " + f + " is gone: no tokenizer files written";
      return Status::OK();
    }
    crc = Crc32cExtend(crc, text.data(), text.size());
    texts.push_back(std::move(text));
  }
  if (crc != t.crc32c()) {
    report->warning = "the dataset's tokenizer (" + t.files(0) +
                      ") changed since the data was converted (CRC32C): no tokenizer files written";
    return Status::OK();
  }
  for (size_t i = 0; i < layout.names.size(); ++i) {
    DT_RETURN_IF_ERROR(WriteText(dir + "/" + layout.names[i], texts[i]));
    report->tokenizer_files.push_back(layout.names[i]);
  }
  DT_RETURN_IF_ERROR(WriteText(dir + "/tokenizer_config.json", layout.config_json));
  report->tokenizer_files.push_back("tokenizer_config.json");
  return Status::OK();
}

}  // namespace

Status ExportHuggingFace(const proto::Config& cfg, const std::vector<NamedTensor>& params,
                         const std::map<std::string, std::string>& metadata, const std::string& dir,
                         HfExportReport* report) {
  const models::ModelSpec* spec = nullptr;
  DT_RETURN_IF_ERROR(FindModelSpec(cfg, &spec));
  const std::string& kind = cfg.model().kind();
  if (!spec->hf_export) {
    std::string with;
    for (const std::string& k : ModelKinds()) {
      const models::ModelSpec* s = models::FindModel(k);
      if (s != nullptr && s->hf_export) with += (with.empty() ? "" : ", ") + k;
    }
    return Status::InvalidArgument("--format hf exports the models that have a Hugging Face layout (" + with +
                                   "); this checkpoint holds model.kind " + kind + " (use --format safetensors)");
  }
  models::HfExportPlan plan;
  DT_RETURN_IF_ERROR(spec->hf_export(cfg, &plan));
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : params) by_name[t.name] = &t;
  std::vector<NamedTensor> hf(plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    DT_RETURN_IF_ERROR(MakeTensor(plan.tensors[i], by_name, kind, &hf[i]));
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::IoError("cannot create '" + dir + "': " + std::strerror(errno));
  }
  DT_RETURN_IF_ERROR(WriteSafetensors(dir + "/model.safetensors", hf, metadata));
  DT_RETURN_IF_ERROR(WriteText(dir + "/config.json", plan.config_json));
  HfExportReport ignored;
  HfExportReport* r = report != nullptr ? report : &ignored;
  DT_RETURN_IF_ERROR(CopyTokenizerFiles(cfg, dir, r));
  return r->tokenizer_files.empty() && r->warning.empty() ? CopyDatasetTokenizer(cfg, dir, r) : Status::OK();
}

}  // namespace dtrain::runtime
