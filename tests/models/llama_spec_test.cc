// Tests of models/llama_spec.cc (model.kind llama): the spec builds the model from its config, refuses the Llama
// constraints naming the keys (at build and in the run check), checks data against the config, plans the Hugging Face
// export (q/k/v and gate/up as row slices of the fused weights); and the model computes what transformers'
// LlamaForCausalLM computes on the tensors that export writes (its forward written out here in double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "models/llama.h"
#include "models/model_registry.h"
#include "tests/testing/grad_check.h"

namespace dtrain::models {
namespace {

using testing::Fetch;
using testing::MakeTensor;

// As llama_test.cc's: 2 layers, 4 query heads over 2 KV heads (head size 4), C = 16, F = 24, T = 8, vocab 61.
LlamaOptions Tiny() {
  LlamaOptions o;
  o.vocab_size = 61;
  o.max_seq_len = 8;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_kv_head = 2;
  o.hidden = 16;
  o.ffn_hidden = 24;
  return o;
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// ---- the spec ----------------------------------------------------------------------------------------------------

proto::Config LlamaConfig() {
  proto::Config cfg;
  cfg.mutable_model()->set_kind("llama");
  auto* g = cfg.mutable_model()->mutable_llama();
  g->set_vocab_size(256);
  g->set_max_seq_len(64);
  g->set_n_layer(2);
  g->set_n_head(4);
  g->set_n_kv_head(2);
  g->set_hidden(64);
  g->set_ffn_hidden(172);
  g->set_rope_theta(10000);
  g->set_rms_norm_eps(1e-5);
  g->set_tie_embeddings(true);
  cfg.mutable_data()->set_batch_size(2);
  cfg.mutable_train()->set_precision("fp32");
  return cfg;
}

proto::DatasetSchema TokenSchema(int64_t record, int64_t vocab) {
  proto::DatasetSchema s;
  s.set_kind(proto::DatasetSchema::TOKENS);
  s.add_dims(record);
  s.set_vocab_size(vocab);
  return s;
}

// The message of building `cfg` on the CPU, which must be InvalidArgument.
std::string BuildRefusal(const proto::Config& cfg) {
  auto cpu = Cpu();
  std::unique_ptr<Model> m;
  const Status st = FindModel("llama")->build(cfg, *cpu, &m);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  return st.message();
}

TEST(LlamaSpec, IsABuiltInTokenModelThatBuildsFromItsConfig) {
  const ModelSpec* spec = FindModel("llama");
  ASSERT_NE(spec, nullptr);
  ASSERT_TRUE(spec->check_data && spec->tokens && spec->weights_metadata && spec->hf_export);
  const proto::Config cfg = LlamaConfig();
  const TokenInput t = spec->tokens(cfg);
  EXPECT_EQ(t.seq_len, 64);
  EXPECT_EQ(t.vocab_size, 256);
  std::map<std::string, std::string> meta;
  spec->weights_metadata(cfg, &meta);
  EXPECT_EQ(meta.at("vocab_size"), "256");
  EXPECT_EQ(meta.at("max_seq_len"), "64");
  auto cpu = Cpu();
  std::unique_ptr<Model> m;
  DT_ASSERT_OK(spec->build(cfg, *cpu, &m));
  EXPECT_EQ(m->param_infos().front().shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(m->param_infos().back().name, "model.norm.weight");
}

// The Llama constraints, each refused with the config keys named (at build, and by the run check).
TEST(LlamaSpec, ConstraintsAreRefusedNamingTheKeys) {
  proto::Config cfg = LlamaConfig();
  cfg.mutable_model()->mutable_llama()->set_n_kv_head(3);
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.n_head 4 must be a multiple of model.llama.n_kv_head 3"),
            std::string::npos)
      << BuildRefusal(cfg);
  const Status at_check = FindModel("llama")->check_data(cfg, "data.train_shards /d", TokenSchema(65, 256));
  EXPECT_NE(at_check.message().find("model.llama.n_kv_head 3"), std::string::npos) << at_check.ToString();

  cfg = LlamaConfig();
  cfg.mutable_model()->mutable_llama()->set_n_head(3);
  cfg.mutable_model()->mutable_llama()->set_n_kv_head(1);
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.hidden 64 must be a multiple of model.llama.n_head 3"),
            std::string::npos)
      << BuildRefusal(cfg);

  cfg = LlamaConfig();
  cfg.mutable_model()->mutable_llama()->set_hidden(36);  // head size 9
  EXPECT_NE(BuildRefusal(cfg).find("head size hidden / n_head = 36 / 4 = 9 must be even"), std::string::npos)
      << BuildRefusal(cfg);
  cfg.mutable_model()->mutable_llama()->set_hidden(4 * 258);  // head size 258
  EXPECT_NE(BuildRefusal(cfg).find("= 258 must be even (RoPE rotates pairs) and at most 256"), std::string::npos)
      << BuildRefusal(cfg);

  cfg = LlamaConfig();
  cfg.mutable_model()->mutable_llama()->set_n_kv_head(8);  // more KV heads than heads
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.n_kv_head: 8 is outside [1, 4]"), std::string::npos)
      << BuildRefusal(cfg);

  cfg = LlamaConfig();
  cfg.mutable_train()->set_precision("fp16");
  EXPECT_NE(BuildRefusal(cfg).find("train.precision: fp16 is not supported by model.kind llama"), std::string::npos);
  cfg.mutable_train()->set_precision("bf16");
  EXPECT_NE(BuildRefusal(cfg).find("train.precision: bf16 needs a GPU"), std::string::npos);

  cfg = LlamaConfig();
  cfg.mutable_model()->mutable_llama()->set_hidden(int64_t{1} << 30);
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.hidden: 1073741824 is outside"), std::string::npos);
}

// train.precision fp8: the layer table (model.llama.fp8_layers auto by hidden size, all, none, lists, bad items), the
// refusals on the CPU and of fp8_layers without fp8, and the memory plan's FP8 line (planned for a GPU).
TEST(LlamaSpec, Fp8LayersParseAndAreRefusedWhereTheyCannotRun) {
  Fp8LayerSet s;
  DT_ASSERT_OK(ParseLlamaFp8Layers("auto", 960, &s));  // SmolLM2-360M
  EXPECT_EQ(s.Describe(), "gate_up, down");
  DT_ASSERT_OK(ParseLlamaFp8Layers("auto", 1024, &s));
  EXPECT_EQ(s.Describe(), "qkv, gate_up, down");
  DT_ASSERT_OK(ParseLlamaFp8Layers("auto", 2048, &s));  // Llama-3.2-1B
  EXPECT_EQ(s.Describe(), "qkv, o_proj, gate_up, down");
  DT_ASSERT_OK(ParseLlamaFp8Layers("down , qkv", 2048, &s));
  EXPECT_EQ(s.Describe(), "qkv, down");
  DT_ASSERT_OK(ParseLlamaFp8Layers("none", 2048, &s));
  EXPECT_FALSE(s.any());
  Status st = ParseLlamaFp8Layers("qkv,mlp", 2048, &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("model.llama.fp8_layers: 'qkv,mlp' is not auto, all, none or a comma list of qkv, "
                              "o_proj, gate_up, down (unknown item 'mlp')"),
            std::string::npos)
      << st.ToString();

  proto::Config cfg = LlamaConfig();
  cfg.mutable_train()->set_precision("fp8");
  EXPECT_NE(BuildRefusal(cfg).find("train.precision: fp8 needs a GPU"), std::string::npos) << BuildRefusal(cfg);
  cfg.mutable_train()->set_precision("bf16");
  cfg.mutable_model()->mutable_llama()->set_fp8_layers("all");
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.fp8_layers: 'all' is set but train.precision is bf16"),
            std::string::npos)
      << BuildRefusal(cfg);
  cfg.mutable_train()->set_precision("fp8");
  cfg.mutable_model()->mutable_llama()->set_fp8_layers("gate_up,ffn");
  EXPECT_NE(BuildRefusal(cfg).find("unknown item 'ffn'"), std::string::npos) << BuildRefusal(cfg);

  // train.fp8_gradients: the gradients' format (e5m2 when unset), refused without fp8.
  DT_ASSERT_OK(ParseFp8Gradients("fp8", "", &s));
  EXPECT_EQ(s.grad, ops::Fp8Format::kE5M2);
  DT_ASSERT_OK(ParseFp8Gradients("fp8", "e4m3", &s));
  EXPECT_EQ(s.grad, ops::Fp8Format::kE4M3);
  EXPECT_NE(Fp8Summary(s, "rest").find("e4m3 gradients"), std::string::npos) << Fp8Summary(s, "rest");
  DT_ASSERT_OK(ParseFp8Gradients("bf16", "e5m2", &s));
  cfg.mutable_model()->mutable_llama()->set_fp8_layers("auto");
  cfg.mutable_train()->set_precision("bf16");
  cfg.mutable_train()->set_fp8_gradients("e4m3");
  EXPECT_NE(BuildRefusal(cfg).find("train.fp8_gradients: 'e4m3' is set but train.precision is bf16"), std::string::npos)
      << BuildRefusal(cfg);
  cfg.mutable_train()->set_fp8_gradients("e3m4");
  EXPECT_NE(BuildRefusal(cfg).find("train.fp8_gradients: 'e3m4' is not e5m2 or e4m3"), std::string::npos)
      << BuildRefusal(cfg);
  cfg.mutable_train()->set_fp8_gradients("e5m2");
  cfg.mutable_train()->set_precision("fp8");

  // The plan (for CUDA) counts what Fp8Linears::Create allocates: with all four linears of this shape (hidden 64,
  // qkv 128 x 64, o_proj 64 x 64, gate_up 344 x 64, down 64 x 172; 2 layers, none: 2 activation sets; 128 tokens),
  // W and W^T per layer, x^T per set, the scratch and the scales; bf16 plans none.
  cfg.mutable_model()->mutable_llama()->set_fp8_layers("all");
  cfg.mutable_model()->mutable_llama()->set_ffn_hidden(176);  // FP8 GEMMs need multiples of 16
  MemoryPlanInputs in;
  in.cuda = true;
  MemoryPlan plan;
  DT_ASSERT_OK(FindModel("llama")->memory_plan(cfg, in, &plan));
  const std::vector<std::pair<int64_t, int64_t>> linears = {{128, 64}, {64, 64}, {352, 64}, {64, 176}};
  int64_t want = in.Round(4 * 12 * ((2 + 2) * 4 + 1));
  for (auto [out, k] : linears) want += 2 * 2 * in.Round(out * k) + 2 * in.Round(128 * k);
  want += in.Round(128 * 176) + 2 * in.Round(128 * 352);
  EXPECT_EQ(plan.fp8, want);
  EXPECT_GT(plan.fp8, 0);
  cfg.mutable_train()->set_precision("bf16");
  cfg.mutable_model()->mutable_llama()->set_fp8_layers("auto");
  DT_ASSERT_OK(FindModel("llama")->memory_plan(cfg, in, &plan));
  EXPECT_EQ(plan.fp8, 0);
}

// model.llama.weight_cast layer needs a bf16 copy of f32 masters: refused by the run check for train.precision fp32
// and for train.master_weights bf16, and by Build for precision auto on the CPU (fp32 there), naming the keys.
// Under auto, the budget's policies come with and without it, in the order of their cost.
TEST(LlamaSpec, WeightCastLayerNeedsABf16CopyOfF32Masters) {
  const ModelSpec& spec = *FindModel("llama");
  proto::Config cfg = LlamaConfig();
  cfg.mutable_model()->mutable_llama()->set_weight_cast("layer");
  for (const auto& [precision, masters] : {std::pair<std::string, std::string>{"fp32", "fp32"}, {"bf16", "bf16"}}) {
    cfg.mutable_train()->set_precision(precision);
    cfg.mutable_train()->set_master_weights(masters);
    const Status st = spec.check_data(cfg, "data.train_shards /d", TokenSchema(65, 256));
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("model.llama.weight_cast: layer casts the f32 master weights"), std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("train.precision " + precision + ", train.master_weights " + masters),
              std::string::npos)
        << st.ToString();
  }
  cfg.mutable_train()->set_precision("auto");
  cfg.mutable_train()->set_master_weights("fp32");
  DT_ASSERT_OK(spec.check_data(cfg, "data.train_shards /d", TokenSchema(65, 256)));
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.weight_cast: layer"), std::string::npos) << BuildRefusal(cfg);

  bool open = false;
  cfg.mutable_model()->mutable_llama()->set_weight_cast("step");
  const size_t fixed = spec.activation_policies(cfg, &open).size();
  cfg.mutable_model()->mutable_llama()->set_weight_cast("auto");
  const std::vector<ActivationPolicy> policies = spec.activation_policies(cfg, &open);
  EXPECT_TRUE(open);
  ASSERT_EQ(policies.size(), 2 * fixed);
  EXPECT_EQ(policies[0].name, "none");
  int layer = 0;
  for (size_t i = 0; i < policies.size(); ++i) {
    if (i > 0) EXPECT_LE(policies[i - 1].recompute, policies[i].recompute) << policies[i].name;
    proto::Config applied = cfg;
    policies[i].apply(&applied);
    const bool cast = policies[i].name.find("weights cast per layer") != std::string::npos;
    layer += cast;
    EXPECT_EQ(applied.model().llama().weight_cast(), cast ? "layer" : "step") << policies[i].name;
    EXPECT_EQ(policies[i].setting.find("weight_cast: layer") != std::string::npos, cast) << policies[i].setting;
  }
  EXPECT_EQ(layer, static_cast<int>(fixed));
}

TEST(LlamaSpec, CheckDataNamesTheDataAndTheKey) {
  const proto::Config cfg = LlamaConfig();
  const ModelSpec& spec = *FindModel("llama");
  DT_ASSERT_OK(spec.check_data(cfg, "data.train_shards /d", TokenSchema(65, 256)));
  DT_ASSERT_OK(spec.check_data(cfg, "data.train_shards /d", TokenSchema(33, 100)));
  Status st = spec.check_data(cfg, "data.train_shards /d", TokenSchema(65, 300));
  EXPECT_NE(st.message().find("data.train_shards /d has token ids up to 299 (vocab_size 300), but "
                              "model.llama.vocab_size is 256: raise it to at least 300"),
            std::string::npos)
      << st.ToString();
  st = spec.check_data(cfg, "data.train_shards /d", TokenSchema(129, 256));
  EXPECT_NE(st.message().find("records of 129 tokens (sequences of 128), longer than model.llama.max_seq_len 64"),
            std::string::npos)
      << st.ToString();
  proto::DatasetSchema images;
  images.set_kind(proto::DatasetSchema::IMAGE);
  st = spec.check_data(cfg, "data.dataset fashion_mnist", images);
  EXPECT_NE(st.message().find("holds images, but model.kind llama takes tokens"), std::string::npos);
}

// LlamaForCausalLM's names: q/k/v and gate/up as row slices of the fused weights, the vocabulary unpadded, lm_head
// only when untied; config.json as transformers reads it.
TEST(LlamaSpec, HfExportPlanSlicesTheFusedWeights) {
  proto::Config cfg = LlamaConfig();
  cfg.mutable_model()->mutable_llama()->set_vocab_size(200);  // padded to 256 inside the model
  HfExportPlan plan;
  DT_ASSERT_OK(FindModel("llama")->hf_export(cfg, &plan));
  ASSERT_EQ(plan.tensors.size(), 1u + 9u * 2u + 1u);
  const HfTensor& embed = plan.tensors[0];
  EXPECT_EQ(embed.name, "model.embed_tokens.weight");
  EXPECT_EQ(embed.param_shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(embed.keep_rows, 200);
  struct Want {
    std::string name, param;
    int64_t row_begin, keep_rows;
  };
  const std::string p = "model.layers.1.";
  const std::vector<Want> want = {{p + "input_layernorm.weight", p + "input_layernorm.weight", 0, -1},
                                  {p + "self_attn.q_proj.weight", p + "self_attn.qkv_proj.weight", 0, 64},
                                  {p + "self_attn.k_proj.weight", p + "self_attn.qkv_proj.weight", 64, 32},
                                  {p + "self_attn.v_proj.weight", p + "self_attn.qkv_proj.weight", 96, 32},
                                  {p + "self_attn.o_proj.weight", p + "self_attn.o_proj.weight", 0, -1},
                                  {p + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight", 0, -1},
                                  {p + "mlp.gate_proj.weight", p + "mlp.gate_up_proj.weight", 0, 172},
                                  {p + "mlp.up_proj.weight", p + "mlp.gate_up_proj.weight", 172, 172},
                                  {p + "mlp.down_proj.weight", p + "mlp.down_proj.weight", 0, -1}};
  for (size_t i = 0; i < want.size(); ++i) {
    const HfTensor& t = plan.tensors[10 + i];
    EXPECT_EQ(t.name, want[i].name);
    EXPECT_EQ(t.param, want[i].param) << t.name;
    EXPECT_EQ(t.row_begin, want[i].row_begin) << t.name;
    EXPECT_EQ(t.keep_rows, want[i].keep_rows) << t.name;
    EXPECT_FALSE(t.transpose) << t.name;
  }
  EXPECT_EQ(plan.tensors[11].param_shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(plan.tensors[16].param_shape, (std::vector<int64_t>{344, 64}));
  EXPECT_EQ(plan.tensors.back().name, "model.norm.weight");
  for (const char* key :
       {"\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]", "\"model_type\": \"llama\"", "\"vocab_size\": 200",
        "\"hidden_size\": 64", "\"intermediate_size\": 172", "\"num_hidden_layers\": 2", "\"num_attention_heads\": 4",
        "\"num_key_value_heads\": 2", "\"head_dim\": 16", "\"max_position_embeddings\": 64", "\"hidden_act\": \"silu\"",
        "\"rms_norm_eps\": 1e-05", "\"rope_theta\": 10000.0", "\"rope_scaling\": null", "\"attention_bias\": false",
        "\"mlp_bias\": false", "\"tie_word_embeddings\": true"}) {
    EXPECT_NE(plan.config_json.find(key), std::string::npos) << key << "\n" << plan.config_json;
  }

  cfg.mutable_model()->mutable_llama()->set_tie_embeddings(false);
  DT_ASSERT_OK(FindModel("llama")->hf_export(cfg, &plan));
  ASSERT_EQ(plan.tensors.size(), 1u + 9u * 2u + 2u);
  EXPECT_EQ(plan.tensors.back().name, "lm_head.weight");
  EXPECT_EQ(plan.tensors.back().param, "lm_head.weight");
  EXPECT_EQ(plan.tensors.back().keep_rows, 200);
  EXPECT_NE(plan.config_json.find("\"tie_word_embeddings\": false"), std::string::npos);
}

// model.llama.rope_scaling: llama3 reaches the model's options and the export's config.json (as transformers 4.4x's
// save_pretrained writes it); none is plain RoPE and config.json's null; bad numbers are refused naming the key.
TEST(LlamaSpec, RopeScalingReachesTheModelAndTheHfConfig) {
  auto cpu = Cpu();
  proto::Config cfg = LlamaConfig();
  std::unique_ptr<Model> m;
  DT_ASSERT_OK(FindModel("llama")->build(cfg, *cpu, &m));
  EXPECT_EQ(dynamic_cast<Llama&>(*m).options().rope_scaling.kind, ops::RopeScaling::Kind::kNone);
  cfg.mutable_model()->mutable_llama()->mutable_rope_scaling()->set_rope_type("none");
  DT_ASSERT_OK(FindModel("llama")->build(cfg, *cpu, &m));
  EXPECT_EQ(dynamic_cast<Llama&>(*m).options().rope_scaling.kind, ops::RopeScaling::Kind::kNone);

  auto* rs = cfg.mutable_model()->mutable_llama()->mutable_rope_scaling();
  rs->set_rope_type("llama3");
  rs->set_factor(32);
  rs->set_low_freq_factor(1);
  rs->set_high_freq_factor(4);
  rs->set_original_max_position_embeddings(8192);
  DT_ASSERT_OK(FindModel("llama")->build(cfg, *cpu, &m));
  const ops::RopeScaling& got = dynamic_cast<Llama&>(*m).options().rope_scaling;
  EXPECT_EQ(got.kind, ops::RopeScaling::Kind::kLlama3);
  EXPECT_EQ(got.factor, 32.0);
  EXPECT_EQ(got.low_freq_factor, 1.0);
  EXPECT_EQ(got.high_freq_factor, 4.0);
  EXPECT_EQ(got.original_max_position_embeddings, 8192);
  HfExportPlan plan;
  DT_ASSERT_OK(FindModel("llama")->hf_export(cfg, &plan));
  EXPECT_NE(plan.config_json.find("  \"rope_scaling\": {\n    \"factor\": 32.0,\n    \"high_freq_factor\": 4.0,\n"
                                  "    \"low_freq_factor\": 1.0,\n    \"original_max_position_embeddings\": 8192,\n"
                                  "    \"rope_type\": \"llama3\"\n  },\n"),
            std::string::npos)
      << plan.config_json;
  EXPECT_EQ(plan.config_keys.at("rope_scaling.factor"), "model.llama.rope_scaling.factor");

  rs->set_high_freq_factor(1);
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.rope_scaling: rope_type llama3 needs 0 < low_freq_factor < "
                                   "high_freq_factor, got low_freq_factor 1.0, high_freq_factor 1.0"),
            std::string::npos)
      << BuildRefusal(cfg);
  EXPECT_EQ(FindModel("llama")->hf_export(cfg, &plan).code(), Status::Code::kInvalidArgument);
  rs->set_high_freq_factor(4);
  rs->set_factor(0.5);
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.rope_scaling.factor 0.5 must be >= 1"), std::string::npos)
      << BuildRefusal(cfg);
  rs->set_factor(32);
  rs->set_rope_type("yarn");  // the YAML loader refuses it first (choices); a Config built in code here
  EXPECT_NE(BuildRefusal(cfg).find("model.llama.rope_scaling.rope_type 'yarn' is none of none|llama3"),
            std::string::npos)
      << BuildRefusal(cfg);
}

// ---- Hugging Face semantics ------------------------------------------------------------------------------------

// LlamaForCausalLM's forward written out from transformers' modeling_llama.py, in double, on the tensors of the
// spec's HF export plan (q/k/v and gate/up cut from the fused weights): separate projections, rotate_half RoPE with
// HF's fp32 table (inv_freq = 1 / theta^(2i/hs) and angle = t * inv_freq rounded to f32, as torch computes them),
// repeat_kv (query head h reads KV head h / (NH / NKV)), causal softmax, silu(gate) * up, RMSNorm
// x / sqrt(mean(x^2) + eps) * w. Returns the logits [T, vocab_size] of one sequence.
// Llama 3's frequency scaling (o.rope_scaling kLlama3): modeling_rope_utils.py's _compute_llama3_parameters, one
// frequency at a time, each torch op one f32 rounding (Python scalars rounded to f32 by the op; scalar / tensor is
// reciprocal() * scalar).
using HfWeights = std::map<std::string, std::vector<double>>;

std::vector<double> HfLinear(const std::vector<double>& x, const std::vector<double>& w, int64_t out, int64_t in) {
  std::vector<double> y(out, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
  }
  return y;
}

std::vector<double> HfRmsNorm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  const double r = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * (x[i] * r);
  return y;
}

float HfLlama3InvFreq(float inv_freq, const ops::RopeScaling& r) {
  const double old_context_len = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_context_len / r.low_freq_factor;
  const double high_freq_wavelen = old_context_len / r.high_freq_factor;
  const float wavelen = (1.0f / inv_freq) * static_cast<float>(2 * 3.14159265358979323846);
  const float inv_freq_llama =
      wavelen > static_cast<float>(low_freq_wavelen) ? inv_freq / static_cast<float>(r.factor) : inv_freq;
  const float smooth_factor =
      ((1.0f / wavelen) * static_cast<float>(old_context_len) - static_cast<float>(r.low_freq_factor)) /
      static_cast<float>(r.high_freq_factor - r.low_freq_factor);
  const float smoothed_inv_freq =
      (1.0f - smooth_factor) * inv_freq_llama / static_cast<float>(r.factor) + smooth_factor * inv_freq_llama;
  const bool is_medium_freq =
      !(wavelen < static_cast<float>(high_freq_wavelen)) && !(wavelen > static_cast<float>(low_freq_wavelen));
  return is_medium_freq ? smoothed_inv_freq : inv_freq_llama;
}

std::vector<std::vector<double>> HfLlamaLogits(const LlamaOptions& o, const HfWeights& w, const std::vector<int>& ids) {
  const int64_t c = o.hidden, hs = c / o.n_head, nh = o.n_head, nkv = o.n_kv_head, f = o.ffn_hidden;
  const int64_t t_len = static_cast<int64_t>(ids.size()), half = hs / 2;
  auto rope = [&](std::vector<double>* x, int64_t heads, int64_t t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const float expo = static_cast<float>(2 * i) / static_cast<float>(hs);
        float inv_freq = static_cast<float>(1.0 / static_cast<float>(std::pow(o.rope_theta, double{expo})));
        if (o.rope_scaling.kind == ops::RopeScaling::Kind::kLlama3)
          inv_freq = HfLlama3InvFreq(inv_freq, o.rope_scaling);
        const float angle = static_cast<float>(t) * inv_freq;
        const double cs = static_cast<float>(std::cos(double{angle})), sn = static_cast<float>(std::sin(double{angle}));
        double& x1 = (*x)[h * hs + i];
        double& x2 = (*x)[h * hs + i + half];
        const double a = x1 * cs - x2 * sn, b = x2 * cs + x1 * sn;
        x1 = a;
        x2 = b;
      }
    }
  };
  std::vector<std::vector<double>> x(t_len);
  for (int64_t t = 0; t < t_len; ++t) {
    const auto& e = w.at("model.embed_tokens.weight");
    x[t].assign(e.begin() + ids[t] * c, e.begin() + (ids[t] + 1) * c);
  }
  for (int64_t l = 0; l < o.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<double>> q(t_len), k(t_len), v(t_len);
    for (int64_t t = 0; t < t_len; ++t) {
      const auto n = HfRmsNorm(x[t], w.at(p + "input_layernorm.weight"), o.rms_norm_eps);
      q[t] = HfLinear(n, w.at(p + "self_attn.q_proj.weight"), nh * hs, c);
      k[t] = HfLinear(n, w.at(p + "self_attn.k_proj.weight"), nkv * hs, c);
      v[t] = HfLinear(n, w.at(p + "self_attn.v_proj.weight"), nkv * hs, c);
      rope(&q[t], nh, t);
      rope(&k[t], nkv, t);
    }
    for (int64_t t = 0; t < t_len; ++t) {
      std::vector<double> att(nh * hs, 0.0);
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / nkv);  // repeat_kv
        std::vector<double> s(t + 1);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          s[j] = 0;
          for (int64_t d = 0; d < hs; ++d) s[j] += q[t][h * hs + d] * k[j][g * hs + d];
          s[j] /= std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, s[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t d = 0; d < hs; ++d) att[h * hs + d] += s[j] / sum * v[j][g * hs + d];
        }
      }
      const auto out = HfLinear(att, w.at(p + "self_attn.o_proj.weight"), c, nh * hs);
      for (int64_t i = 0; i < c; ++i) x[t][i] += out[i];
      const auto n = HfRmsNorm(x[t], w.at(p + "post_attention_layernorm.weight"), o.rms_norm_eps);
      const auto gate = HfLinear(n, w.at(p + "mlp.gate_proj.weight"), f, c);
      const auto up = HfLinear(n, w.at(p + "mlp.up_proj.weight"), f, c);
      std::vector<double> act(f);
      for (int64_t i = 0; i < f; ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const auto down = HfLinear(act, w.at(p + "mlp.down_proj.weight"), c, f);
      for (int64_t i = 0; i < c; ++i) x[t][i] += down[i];
    }
  }
  const auto& head = w.at(o.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  std::vector<std::vector<double>> logits(t_len);
  for (int64_t t = 0; t < t_len; ++t) {
    logits[t] = HfLinear(HfRmsNorm(x[t], w.at("model.norm.weight"), o.rms_norm_eps), head, o.vocab_size, c);
  }
  return logits;
}

// dtrain's logits (f64, eval mode) equal LlamaForCausalLM's on the weights dtrain's HF export writes, for
// grouped-query and multi-head attention, tied and untied heads, a RoPE theta of 500000, and Llama 3's frequency
// scaling (head size 4: frequencies 1 and theta^-1/2; with original_max_position_embeddings 64, low 1, high 4 the
// bands are wavelen < 16 kept, > 64 divided, between interpolated: theta 10000 puts the two frequencies in the
// outer bands, theta 100 (wavelen 62.8) the second in the medium one): the model computes what transformers
// computes, and the export plan names and slices the tensors the way transformers reads them.
TEST(LlamaCpu, LogitsMatchHuggingFaceLlamaOnTheExportedWeights) {
  auto cpu = Cpu();
  struct Case {
    int64_t n_kv_head;
    bool tied;
    double theta;
    bool llama3 = false;
  };
  ops::RopeScaling llama3;
  llama3.kind = ops::RopeScaling::Kind::kLlama3;
  llama3.original_max_position_embeddings = 64;  // factor 8, low 1, high 4
  for (const Case& c : {Case{2, true, 10000.0}, Case{4, false, 500000.0}, Case{1, true, 10000.0},
                        Case{2, true, 10000.0, true}, Case{2, false, 100.0, true}}) {
    SCOPED_TRACE("n_kv_head " + std::to_string(c.n_kv_head) + (c.tied ? ", tied" : ", untied") + ", theta " +
                 std::to_string(c.theta) + (c.llama3 ? ", llama3" : ""));
    LlamaOptions o = Tiny();
    o.n_kv_head = c.n_kv_head;
    o.tie_embeddings = c.tied;
    o.rope_theta = c.theta;
    if (c.llama3) o.rope_scaling = llama3;
    o.rms_norm_eps = 1e-6;
    o.dtype = DType::kF64;
    std::unique_ptr<Llama> m;
    DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &m));
    const int64_t np = m->params().numel();
    std::vector<double> params = testing::RandomVector(np, 13, -0.3, 0.3);
    for (const ParamInfo& p : m->param_infos()) {
      if (p.name.find("norm") == std::string::npos) continue;
      for (int64_t k = 0; k < p.numel; ++k) params[p.offset + k] += 1.0;
    }
    std::memcpy(m->params().data<double>(), params.data(), np * sizeof(double));
    std::vector<double> ids = testing::RandomVector(16, 7, 0.0, 61.0);
    for (double& id : ids) id = std::floor(id);
    Tensor inputs, targets;
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {2, 8}, ids, &inputs));
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {2, 8}, std::vector<double>(16, 0.0), &targets));
    m->set_training(false);
    DT_ASSERT_OK(m->Forward(inputs, targets));
    std::vector<double> logits;
    DT_ASSERT_OK(Fetch(*cpu, m->logits(), &logits));

    proto::Config cfg = LlamaConfig();
    auto* g = cfg.mutable_model()->mutable_llama();
    g->set_vocab_size(o.vocab_size);
    g->set_max_seq_len(o.max_seq_len);
    g->set_n_layer(o.n_layer);
    g->set_n_head(o.n_head);
    g->set_n_kv_head(o.n_kv_head);
    g->set_hidden(o.hidden);
    g->set_ffn_hidden(o.ffn_hidden);
    g->set_tie_embeddings(o.tie_embeddings);
    HfExportPlan plan;
    DT_ASSERT_OK(FindModel("llama")->hf_export(cfg, &plan));
    HfWeights hf;
    for (const HfTensor& t : plan.tensors) {
      const ParamInfo* info = nullptr;
      for (const ParamInfo& p : m->param_infos()) info = p.name == t.param ? &p : info;
      ASSERT_NE(info, nullptr) << t.param;
      ASSERT_EQ(info->shape, t.param_shape) << t.param;
      const int64_t row = info->shape.size() == 2 ? info->shape[1] : 1;
      const int64_t rows = t.keep_rows >= 0 ? t.keep_rows : info->shape[0] - t.row_begin;
      const auto begin = params.begin() + info->offset + t.row_begin * row;
      hf[t.name].assign(begin, begin + rows * row);
    }
    const int64_t vp = Llama::PaddedVocab(o.vocab_size);
    double max_diff = 0, scale = 0;
    for (int64_t b = 0; b < 2; ++b) {
      std::vector<int> seq(8);
      for (int64_t t = 0; t < 8; ++t) seq[t] = static_cast<int>(ids[b * 8 + t]);
      const auto want = HfLlamaLogits(o, hf, seq);
      for (int64_t t = 0; t < 8; ++t) {
        for (int64_t j = 0; j < o.vocab_size; ++j) {
          max_diff = std::max(max_diff, std::fabs(logits[(b * 8 + t) * vp + j] - want[t][j]));
          scale = std::max(scale, std::fabs(want[t][j]));
        }
      }
    }
    EXPECT_GT(scale, 0.5);
    EXPECT_LE(max_diff, 1e-10 * scale) << "max |dtrain - HF| " << max_diff << ", max |logit| " << scale;
  }
}

}  // namespace
}  // namespace dtrain::models
