#include "launcher/cli/ckpt_cmd.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>

#include "core/check.h"
#include "launcher/cli_parse.h"
#include "models/model_registry.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/export_target.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/config.h"
#include "runtime/train/hf_export.h"
#include "runtime/train/weights_metadata.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kCkptFooter = "URL: file:///dir, a directory (e.g. runs/x/checkpoints), or s3://bucket/prefix\n";

std::string CheckStep(const std::string& v) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 18) {
    return "expects a step number, got '" + v + "'";
  }
  return "";
}

std::string Created(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  char buf[32];
  std::tm tm;
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status List(runtime::CheckpointManager* m) {
  std::vector<runtime::CheckpointEntry> entries;
  DT_RETURN_IF_ERROR(m->List(&entries));
  std::string latest;
  if (m->store().Get("latest", &latest).ok() && !latest.empty() && latest.back() == '\n') latest.pop_back();
  std::printf("%-16s %10s %-9s %12s  %s\n", "dir", "step", "state", "MiB", "");
  for (const auto& e : entries) {
    std::printf("%-16s %10lld %-9s %12.2f  %s\n", e.dir.c_str(), static_cast<long long>(e.step),
                e.has_manifest ? "complete" : "partial", e.bytes / 1048576.0, e.dir == latest ? "<- latest" : "");
  }
  std::printf("%zu step director%s in %s (`dtrain ckpt verify` checks sizes and CRC32C)\n", entries.size(),
              entries.size() == 1 ? "y" : "ies", m->url().c_str());
  return Status::OK();
}

Status Verify(runtime::CheckpointManager* m, int64_t step) {
  std::vector<runtime::CheckpointEntry> entries;
  DT_RETURN_IF_ERROR(m->List(&entries));
  int bad = 0, checked = 0;
  for (const auto& e : entries) {
    if (step >= 0 && e.step != step) continue;
    ++checked;
    runtime::LoadedCheckpoint ck;
    const Status st = m->Load(e.step, &ck);
    if (!st.ok() && st.code() != Status::Code::kNotFound && st.code() != Status::Code::kDataLoss) return st;
    bad += !st.ok();
    std::printf("%s  %s\n", e.dir.c_str(), st.ok() ? "OK" : ("BAD: " + st.message()).c_str());
  }
  if (checked == 0)
    return Status::NotFound("no checkpoint" + (step >= 0 ? " of step " + std::to_string(step) : "") + " in " +
                            m->url());
  if (bad > 0)
    return Status::DataLoss(std::to_string(bad) + " of " + std::to_string(checked) + " checkpoint(s) in " + m->url() +
                            " do not verify");
  return Status::OK();
}

Status LoadOne(runtime::CheckpointManager* m, int64_t step, runtime::LoadedCheckpoint* ck) {
  return step >= 0 ? m->Load(step, ck) : m->LoadLatest(ck);
}

void Inspect(const runtime::LoadedCheckpoint& ck) {
  const proto::CheckpointManifest& m = ck.manifest;
  std::printf("checkpoint     %s (format %d, dtrain %s, created %s)\n", ck.dir.c_str(), m.format_version(),
              m.dtrain_version().c_str(), Created(m.created_unix_ms()).c_str());
  std::printf("step           %lld (optimizer %s, step %lld)\n", static_cast<long long>(m.step()),
              m.optimizer().c_str(), static_cast<long long>(m.optimizer_step()));
  std::printf("world size     %d\n", m.world_size());
  if (m.sharding().zero1()) {
    std::printf(
        "sharding       ZeRO-1 over %d ranks, %d buckets, shard %lld elements (saved gathered: loads at any "
        "world size)\n",
        m.sharding().world_size(), m.sharding().num_buckets(), static_cast<long long>(m.sharding().shard_numel()));
  } else {
    std::printf("sharding       none (optimizer state replicated)\n");
  }
  const auto& lr = m.lr_schedule();
  std::printf("lr schedule    %s base %.6g warmup %lld total %lld min %.6g; next lr %.6g\n", lr.kind().c_str(),
              lr.base_lr(), static_cast<long long>(lr.warmup_steps()), static_cast<long long>(lr.total_steps()),
              lr.min_lr(), lr.next_lr());
  const auto& d = m.data();
  std::printf(
      "data           seed %llu shuffle %s epoch %lld, %lld samples into it, %lld consumed, global batch %lld\n",
      static_cast<unsigned long long>(d.seed()), d.shuffle() ? "true" : "false", static_cast<long long>(d.epoch() + 1),
      static_cast<long long>(d.samples_in_epoch()), static_cast<long long>(d.samples_consumed()),
      static_cast<long long>(d.global_batch()));
  for (const auto& f : m.files()) {
    std::printf("file           %-20s %12llu bytes  crc32c %08x\n", f.name().c_str(),
                static_cast<unsigned long long>(f.size()), f.crc32c());
  }
  for (const auto& p : m.params()) {
    std::string shape;
    for (int64_t s : p.shape()) shape += (shape.empty() ? "" : "x") + std::to_string(s);
    std::printf("param          %-20s [%s] at %lld\n", p.name().c_str(), shape.c_str(),
                static_cast<long long>(p.offset()));
  }
  std::printf("config:\n%s", m.config_yaml().c_str());
}

// A URL that names a step directory (runs/x/checkpoints/step-00000030, s3://b/run/step-00000030): its store and
// step, so that `ckpt inspect <step dir>` inspects it. --step, when given, must name the same step.
Status SplitStepDir(CkptArgs* a) {
  std::string url = a->url;
  while (url.size() > 1 && url.back() == '/') url.pop_back();
  const size_t slash = url.find_last_of('/');
  int64_t step = -1;
  if (slash == std::string::npos || !runtime::CheckpointManager::ParseStepDir(url.substr(slash + 1), &step)) {
    return Status::OK();
  }
  if (a->step >= 0 && a->step != step) {
    return Status::InvalidArgument(a->url + " is the step directory of step " + std::to_string(step) +
                                   ", but --step says " + std::to_string(a->step));
  }
  a->url = slash == 0 ? "/" : url.substr(0, slash);
  a->step = step;
  return Status::OK();
}

Status Export(const runtime::LoadedCheckpoint& ck, const CkptArgs& a) {
  const std::string& out = a.out;
  const std::string& format = a.format;
  const std::string& bytes = ck.files.at("params.bin");  // Load() verified every listed file
  const int64_t total = static_cast<int64_t>(bytes.size() / sizeof(float));
  std::vector<runtime::NamedTensor> tensors;
  for (const auto& p : ck.manifest.params()) {
    if (p.offset() < 0 || p.numel() < 0 || p.offset() + p.numel() > total) {
      return Status::DataLoss(ck.dir + ": parameter " + p.name() + " lies outside params.bin");
    }
    runtime::NamedTensor t{p.name(), {p.shape().begin(), p.shape().end()}, std::vector<float>(p.numel())};
    std::memcpy(t.data.data(), bytes.data() + p.offset() * sizeof(float), p.numel() * sizeof(float));
    tensors.push_back(std::move(t));
  }
  proto::Config cfg;
  DT_RETURN_IF_ERROR(runtime::ParseConfig(ck.manifest.config_yaml(), ck.dir + "/manifest.pb (config)", {}, &cfg));
  std::map<std::string, std::string> metadata;
  DT_RETURN_IF_ERROR(runtime::WeightsMetadata(cfg, &metadata));
  metadata["step"] = std::to_string(ck.manifest.step());
  const models::ModelSpec* spec = models::FindModel(cfg.model().kind());
  if (format == "hf" && (spec == nullptr || !spec->hf_export)) {
    return runtime::ExportHuggingFace(cfg, tensors, metadata, out);  // its refusal, before anything is moved aside
  }
  std::string moved;
  DT_RETURN_IF_ERROR(runtime::ClaimExportTarget({out, a.url, format == "hf", a.overwrite}, &moved));
  if (!moved.empty()) std::printf("%s\n", moved.c_str());
  if (format == "hf") {
    runtime::HfExportReport report;
    DT_RETURN_IF_ERROR(runtime::ExportHuggingFace(cfg, tensors, metadata, out, &report));
    std::string tokenizer;
    for (const std::string& f : report.tokenizer_files) tokenizer += (tokenizer.empty() ? " + " : ", ") + f;
    std::printf("%s: config.json and model.safetensors%s (Hugging Face, model.kind %s) of %s (step %lld)\n",
                out.c_str(), tokenizer.c_str(), cfg.model().kind().c_str(), ck.dir.c_str(),
                static_cast<long long>(ck.manifest.step()));
    if (!report.warning.empty()) std::fprintf(stderr, "warning: %s\n", report.warning.c_str());
    return Status::OK();
  }
  DT_RETURN_IF_ERROR(runtime::WriteSafetensors(out, tensors, metadata));
  std::printf("%s: %zu tensors of %s (step %lld)\n", out.c_str(), tensors.size(), ck.dir.c_str(),
              static_cast<long long>(ck.manifest.step()));
  return Status::OK();
}

}  // namespace

CLI::App* AddCkptCommand(CLI::App* parent, CkptArgs* a) {
  *a = CkptArgs();
  CLI::App* ckpt = parent->add_subcommand("ckpt", "look into checkpoints; export the weights as safetensors");
  ckpt->footer(std::string(kCkptFooter) + "\nexample: dtrain ckpt verify runs/x/checkpoints\n");
  struct Verb {
    const char* name;
    const char* help;
    const char* example;
  };
  const Verb verbs[] = {
      {"list", "step directories: valid (manifest present) or partial, size", "dtrain ckpt list runs/x/checkpoints"},
      {"verify", "check every file's size and CRC32C (all checkpoints, or step N)",
       "dtrain ckpt verify s3://bucket/run1 --step 200"},
      {"inspect", "print the manifest of the newest valid checkpoint (or step N)",
       "dtrain ckpt inspect runs/x/checkpoints"},
      {"export", "write the parameters as safetensors (loads in PyTorch / Hugging Face)",
       "dtrain ckpt export runs/x/checkpoints --out model.safetensors"},
  };
  for (const Verb& v : verbs) {
    CLI::App* app = ckpt->add_subcommand(v.name, v.help);
    app->footer(std::string(kCkptFooter) + "\nexample: " + v.example + "\n");
    app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    const std::string verb = v.name;
    app->preparse_callback([a, verb](size_t) { a->verb = verb; });
    app->add_option("URL", a->url, "file:///dir, a directory, or s3://bucket/prefix");
    if (verb != "list") {
      app->add_option("--step", a->step, "that step instead of the newest valid checkpoint")
          ->type_name("N")
          ->check(CheckStep);
    }
    if (verb == "export") {
      app->add_option("--out", a->out, "the safetensors file to write, or with --format hf a directory (required)")
          ->type_name("PATH");
      app->add_option("--format", a->format,
                      "safetensors (default; dtrain's names), or hf: a Hugging Face directory (config.json + "
                      "model.safetensors, and the tokenizer files of a run started from hf:DIR) that transformers' "
                      "from_pretrained loads")
          ->type_name("safetensors|hf")
          ->check(OneOf({"safetensors", "hf"}));
      app->add_flag("--overwrite", a->overwrite,
                    "replace an existing --out (it is moved aside to PATH.replaced-<time>, never deleted), or "
                    "write inside a checkpoint store other than the one read");
    }
    app->callback([a, verb] {
      if (a->url.empty()) FailParse("missing URL (usage: dtrain ckpt " + verb + " URL)");
      if (verb == "export" && a->out.empty()) FailParse("--out FILE is required");
    });
  }
  return ckpt;
}

Status RunCkpt(const CkptArgs& args) {
  CkptArgs a = args;
  if (a.verb != "list") DT_RETURN_IF_ERROR(SplitStepDir(&a));
  std::unique_ptr<runtime::CheckpointManager> m;
  DT_RETURN_IF_ERROR(runtime::CheckpointManager::OpenExisting(a.url, {}, &m));  // read-only: creates nothing
  if (a.verb == "list") return List(m.get());
  if (a.verb == "verify") return Verify(m.get(), a.step);
  runtime::LoadedCheckpoint ck;
  DT_RETURN_IF_ERROR(LoadOne(m.get(), a.step, &ck));
  if (a.verb == "inspect") {
    Inspect(ck);
    return Status::OK();
  }
  return Export(ck, a);
}

}  // namespace dtrain::launcher
