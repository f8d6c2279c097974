// The newcomer's custom-model path, end to end: install the already-built tree to a temporary prefix,
// configure and build examples/custom_model against that prefix alone (find_package(dtrain)), and
// train its registered `two_layer_mlp` with `custom_trainer launch --nproc-per-node 2` on CPU ranks:
// the launcher must re-execute custom_trainer (not a dtrain from PATH) as the workers, which then
// use the data loader, the MPI gradient all-reduce, checkpoints and the final export like any run.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kSource = DT_SOURCE_DIR;
const std::string kData = ::dtrain::testing::kFashionMnistDir;

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

std::string Dirname(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The build tree holding `bin`: the nearest directory above it with a CMakeCache.txt.
std::string BuildDirOf(const std::string& bin) {
  for (std::string dir = Dirname(bin); !dir.empty() && dir != "."; dir = Dirname(dir)) {
    if (Exists(dir + "/CMakeCache.txt")) return dir;
  }
  return "";
}

// The value of `key` in a CMakeCache.txt ("KEY:TYPE=value"), "" when absent.
std::string CacheValue(const std::string& cache, const std::string& key) {
  std::stringstream lines(cache);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(key + ":", 0) == 0) return line.substr(line.find('=') + 1);
  }
  return "";
}

TEST(CustomModelE2E, InstalledPackageBuildsTheExampleWhichTrainsOnTwoRanks) {
  if (!DT_HAVE_MPI) GTEST_SKIP() << "built without MPI (DT_WITH_MPI=OFF): launch needs mpirun";
  DT_SKIP_WITHOUT_FASHION_MNIST();
  const std::string build = BuildDirOf(DtrainBin());
  ASSERT_FALSE(build.empty()) << "no CMakeCache.txt above " << DtrainBin();
  const std::string cache = ReadFile(build + "/CMakeCache.txt");
  TempDir dir;
  const std::string d = dir.path(), prefix = d + "/prefix", ex = d + "/build";

  // 1. Install: binary, libraries, headers (incl. generated proto headers), package files.
  ProcessResult install = RunCommand("cmake --install " + build + " --prefix " + prefix);
  ASSERT_EQ(install.exit_code, 0) << install.output;
  for (const char* f :
       {"/bin/dtrain", "/lib/libdtrain_launcher.a", "/lib/libdtrain_core.a", "/include/dtrain/models/model.h",
        "/include/dtrain/core/status.h", "/include/dtrain/proto/config.pb.h", "/include/dtrain/launcher/cli/cli.h",
        "/lib/cmake/dtrain/dtrainConfig.cmake", "/lib/cmake/dtrain/dtrainConfigVersion.cmake"}) {
    EXPECT_TRUE(Exists(prefix + f)) << f << " not installed:\n" << install.output;
  }

  // 2. The example against the prefix only, with dtrain's compiler (and its ccache, if any).
  std::string configure = "cmake -S " + kSource + "/examples/custom_model -B " + ex + " -DCMAKE_PREFIX_PATH=" + prefix +
                          " -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=" + CacheValue(cache, "CMAKE_CXX_COMPILER");
  const std::string generator = CacheValue(cache, "CMAKE_GENERATOR");
  if (!generator.empty()) configure += " -G '" + generator + "'";
  const std::string launcher = CacheValue(cache, "CMAKE_CXX_COMPILER_LAUNCHER");
  if (!launcher.empty()) configure += " -DCMAKE_CXX_COMPILER_LAUNCHER=" + launcher;
  ProcessResult cfg = RunCommand(configure);
  ASSERT_EQ(cfg.exit_code, 0) << configure << "\n" << cfg.output;
  EXPECT_NE(cfg.output.find("custom_model: dtrain 0.1.0"), std::string::npos) << cfg.output;
  ProcessResult make = RunCommand("cmake --build " + ex + " -j2");
  ASSERT_EQ(make.exit_code, 0) << make.output;

  // 3. Two CPU ranks, 40 steps of 2 x 64 samples, a checkpoint at 20 and at the end. PATH holds no
  // dtrain at all (only mpirun's directory), so the workers can only be custom_trainer itself.
  const std::string run = d + "/run";
  const std::string cmd = "env PATH=/usr/bin:/bin " + ex + "/custom_trainer launch --nproc-per-node 2 " + kSource +
                          "/examples/custom_model/fashion_mnist_two_layer.yaml --set train.device=cpu" +
                          " --set train.max_steps=40 --set train.log_every=10 --set schedule.warmup_steps=5" +
                          " --set checkpoint.every_steps=20 --set data.limit_test=1000 --set run.dir=" + run;
  ProcessResult r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  // 784*128 + 128 + 128*10 + 10 parameters: the custom model, not the built-in mlp.
  EXPECT_NE(r.output.find("model two_layer_mlp: 101770 parameters in 4 tensors"), std::string::npos) << r.output;

  const std::string metrics = ReadFile(run + "/metrics.jsonl");
  const auto starts = Lines(metrics, "\"kind\":\"start\"");
  ASSERT_EQ(starts.size(), 1u) << metrics;
  EXPECT_EQ(Field(starts[0], "world"), 2) << starts[0];
  const auto trains = Lines(metrics, "\"kind\":\"train\"");
  ASSERT_GE(trains.size(), 3u) << metrics;
  // From ~ln(10) = 2.30 at the start; 40 AdamW steps on 128-sample global batches get well below it.
  EXPECT_GT(Field(trains.front(), "loss"), 1.0) << trains.front();
  EXPECT_LT(Field(trains.back(), "loss"), 0.75 * Field(trains.front(), "loss")) << metrics;
  const auto evals = Lines(metrics, "\"kind\":\"eval\"");
  ASSERT_FALSE(evals.empty()) << metrics;
  EXPECT_GT(Field(evals.back(), "eval_accuracy"), 0.6) << evals.back();

  // Checkpoints of both saves, and the exported weights under the model's own parameter names.
  EXPECT_TRUE(Exists(run + "/checkpoints/step-00000020/manifest.pb")) << r.output;
  EXPECT_TRUE(Exists(run + "/checkpoints/step-00000040/manifest.pb")) << r.output;
  std::vector<runtime::NamedTensor> w;
  ASSERT_TRUE(runtime::ReadSafetensors(run + "/final.safetensors", &w).ok());
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].name, "fc1.weight");
  EXPECT_EQ(w[0].shape, (std::vector<int64_t>{128, 784}));
  EXPECT_EQ(w[3].name, "fc2.bias");

  // 4. The stock binary does not know the kind: one error line naming it and the registry (exit 2).
  ProcessResult stock = RunCommand(prefix + "/bin/dtrain train " + kSource +
                                   "/examples/custom_model/fashion_mnist_two_layer.yaml --set train.device=cpu" +
                                   " --set run.dir=" + d + "/stock");
  EXPECT_EQ(stock.exit_code, 2) << stock.output;
  EXPECT_NE(stock.output.find("model.kind: unknown model 'two_layer_mlp' (known: mlp, cnn, gpt2, llama;"),
            std::string::npos)
      << stock.output;
  EXPECT_NE(stock.output.find("RegisterModel"), std::string::npos) << stock.output;
  // Refused right after the config is read, before the worker picks its device ("rank 0/1 ... started by").
  EXPECT_EQ(stock.output.find("; started by "), std::string::npos) << stock.output;
}

}  // namespace
}  // namespace dtrain::testing
