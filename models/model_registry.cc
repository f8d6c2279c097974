#include "models/model_registry.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "models/builtin_models.h"

namespace dtrain::models {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<const ModelSpec>> specs;  // never erased: the pointers stay valid
  std::vector<std::string> builtins;                              // in BuiltinModels() order
};

bool ValidKind(const std::string& kind) {
  if (kind.empty()) return false;
  for (char c : kind) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Function-local, so that registering from another static initializer is safe; loaded with the built-ins once.
Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry();  // never destroyed: usable until the process ends
    for (ModelSpec& spec : BuiltinModels()) {
      const std::string kind = spec.kind;
      r->builtins.push_back(kind);
      r->specs.emplace(kind, std::make_unique<const ModelSpec>(std::move(spec)));
    }
    return r;
  }();
  return *registry;
}

}  // namespace

Status RegisterModel(ModelSpec spec) {
  const std::string kind = spec.kind;
  if (!ValidKind(kind)) {
    return Status::InvalidArgument("RegisterModel: bad model kind '" + kind + "' (expected [A-Za-z0-9_.-]+)");
  }
  if (!spec.build) return Status::InvalidArgument("RegisterModel: empty factory for '" + kind + "'");
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string& b : r.builtins) {
    if (b == kind) return Status::InvalidArgument("RegisterModel: '" + kind + "' is a built-in model kind");
  }
  if (!r.specs.emplace(kind, std::make_unique<const ModelSpec>(std::move(spec))).second) {
    return Status::InvalidArgument("RegisterModel: model kind '" + kind + "' is already registered");
  }
  return Status::OK();
}

const ModelSpec* FindModel(const std::string& kind) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.specs.find(kind);
  return it == r.specs.end() ? nullptr : it->second.get();
}

std::vector<std::string> ModelKinds() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> kinds = r.builtins;
  for (const auto& [kind, spec] : r.specs) {  // std::map: sorted
    bool builtin = false;
    for (const std::string& b : r.builtins) builtin = builtin || b == kind;
    if (!builtin) kinds.push_back(kind);
  }
  return kinds;
}

}  // namespace dtrain::models
