#include "ps/optimizer.h"

#include <cmath>

namespace strata {
namespace {

// state.buffers[name] into *out, which must keep its size.
Status Take(const OptimizerState& state, const char* name, int64_t size,
            std::vector<float>* out) {
  ASSIGN_OR_RETURN(const std::vector<float>* values, state.Buffer(name, size));
  *out = *values;
  return Status::Ok();
}

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, int64_t size)
      : o_(o), size_(size), buf_(o.momentum != 0.0 ? size : 0, 0.0f) {}

  void StepPieces(float* params, const FloatPiece* pieces, size_t num_pieces,
                  double lr) override {
    const float wd = static_cast<float>(o_.weight_decay);
    const float mu = static_cast<float>(o_.momentum);
    const float a = static_cast<float>(lr);
    for (size_t k = 0; k < num_pieces; ++k) {
      float* p = params + pieces[k].offset;
      const float* g = pieces[k].data;
      const int64_t n = pieces[k].size;
      if (mu == 0.0f) {
        for (int64_t i = 0; i < n; ++i) p[i] -= a * (g[i] + wd * p[i]);
        continue;
      }
      float* b = buf_.data() + pieces[k].offset;
      // One pass over p, g and b (the arithmetic of LibTorch's SGD, element
      // by element: d = g + wd * p with p before this step; b = d on the
      // first step, else mu * b + d; p -= lr * b, or lr * (d + mu * b) with
      // Nesterov). One pass instead of two: the server's update of a large
      // range is memory-bound.
      if (o_.nesterov) {
        first_ ? MomentumPass<true, true>(p, g, b, n, a, mu, wd)
               : MomentumPass<true, false>(p, g, b, n, a, mu, wd);
      } else {
        first_ ? MomentumPass<false, true>(p, g, b, n, a, mu, wd)
               : MomentumPass<false, false>(p, g, b, n, a, mu, wd);
      }
    }
    if (mu != 0.0f) first_ = false;
    ++steps_;
  }
  int64_t size() const override { return size_; }
  OptimizerState SaveState() const override {
    OptimizerState s;
    if (!buf_.empty()) s.buffers["momentum"] = buf_;
    s.steps = steps_;
    return s;
  }
  Status RestoreState(const OptimizerState& s) override {
    if (!buf_.empty()) RETURN_IF_ERROR(Take(s, "momentum", size_, &buf_));
    steps_ = s.steps;
    first_ = s.steps == 0;
    return Status::Ok();
  }

 private:
  // kFirst: LibTorch starts the momentum buffer at the first gradient.
  template <bool kNesterov, bool kFirst>
  static void MomentumPass(float* __restrict p, const float* __restrict g,
                           float* __restrict b, int64_t n, float a, float mu,
                           float wd) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * p[i];
      const float v = kFirst ? d : mu * b[i] + d;
      b[i] = v;
      p[i] -= kNesterov ? a * (d + mu * v) : a * v;
    }
  }

  const OptimizerOptions o_;
  const int64_t size_;
  std::vector<float> buf_;
  bool first_ = true;
  int64_t steps_ = 0;
};

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, int64_t size)
      : o_(o), size_(size), m_(size, 0.0f), v_(size, 0.0f) {}

  void StepPieces(float* params, const FloatPiece* pieces, size_t num_pieces,
                  double lr) override {
    ++t_;
    const float b1 = static_cast<float>(o_.beta1);
    const float b2 = static_cast<float>(o_.beta2);
    const float wd = static_cast<float>(o_.weight_decay);
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
    const float step = static_cast<float>(lr / bc1);
    const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
    const float eps = static_cast<float>(o_.eps);
    for (size_t k = 0; k < num_pieces; ++k) {
      const int64_t off = pieces[k].offset;
      float* p = params + off;
      const float* g = pieces[k].data;
      float* m = m_.data() + off;
      float* v = v_.data() + off;
      for (int64_t i = 0; i < pieces[k].size; ++i) {
        float gi = g[i] + wd * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        // Same operation order as LibTorch: (sqrt(v) / sqrt(bc2)) + eps.
        p[i] -= step * (m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps));
      }
    }
  }
  int64_t size() const override { return size_; }
  OptimizerState SaveState() const override {
    OptimizerState s;
    s.buffers["m"] = m_;
    s.buffers["v"] = v_;
    s.steps = t_;
    return s;
  }
  Status RestoreState(const OptimizerState& s) override {
    RETURN_IF_ERROR(Take(s, "m", size_, &m_));
    RETURN_IF_ERROR(Take(s, "v", size_, &v_));
    t_ = s.steps;
    return Status::Ok();
  }

 private:
  const OptimizerOptions o_;
  const int64_t size_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace

Result<const std::vector<float>*> OptimizerState::Buffer(
    const std::string& name, int64_t size) const {
  auto it = buffers.find(name);
  if (it == buffers.end())
    return Status::InvalidArgument(
        "optimizer state has no \"{}\" buffer (saved by another optimizer?)",
        name);
  if (static_cast<int64_t>(it->second.size()) != size)
    return Status::InvalidArgument(
        "optimizer state \"{}\" holds {} values; this optimizer has {}", name,
        it->second.size(), size);
  return &it->second;
}

OptimizerOptions OptimizerOptions::FromConfig(const Config& c) {
  OptimizerOptions o;
  o.kind = c.GetString("train.optimizer") == "adam" ? Kind::kAdam : Kind::kSgd;
  o.momentum = c.GetFloat("train.momentum");
  o.nesterov = c.GetBool("train.nesterov");
  o.weight_decay = c.GetFloat("train.weight_decay");
  o.beta1 = c.GetFloat("train.adam_beta1");
  o.beta2 = c.GetFloat("train.adam_beta2");
  o.eps = c.GetFloat("train.adam_eps");
  return o;
}

std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerOptions& options,
                                         int64_t size) {
  if (options.kind == OptimizerOptions::Kind::kAdam)
    return std::make_unique<Adam>(options, size);
  return std::make_unique<Sgd>(options, size);
}

}  // namespace strata
