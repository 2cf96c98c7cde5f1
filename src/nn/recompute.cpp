#include "recompute.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <array>
#include <memory>

namespace llmtrain::nn::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autocast as the forward found it, on the CPU and CUDA: backward runs on a thread of its own (autocast
// is per thread), so the piece's second run sets it again, to compute what the first computed.
struct Autocast {
  static constexpr std::array<at::DeviceType, 2> kDevices = {at::kCPU, at::kCUDA};
  std::array<bool, 2> enabled{};
  std::array<at::ScalarType, 2> dtype{};
  static Autocast now() {
    Autocast a;
    for (size_t i = 0; i < kDevices.size(); ++i) {
      a.enabled[i] = at::autocast::is_autocast_enabled(kDevices[i]);
      a.dtype[i] = at::autocast::get_autocast_dtype(kDevices[i]);
    }
    return a;
  }
  void set() const {
    for (size_t i = 0; i < kDevices.size(); ++i) {
      at::autocast::set_autocast_enabled(kDevices[i], enabled[i]);
      at::autocast::set_autocast_dtype(kDevices[i], dtype[i]);
    }
  }
};

// For a scope, autocast as `a` says (then as it was); its cache of cast weights lasts the outermost scope.
class AutocastAs {
 public:
  explicit AutocastAs(const Autocast& a) : was_(Autocast::now()) {
    a.set();
    at::autocast::increment_nesting();
  }
  ~AutocastAs() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    was_.set();
  }

 private:
  Autocast was_;
};

// Autograd's saved data holds IValues: the piece (and the forward's autocast) travels to backward in a capsule.
struct PieceHolder : torch::CustomClassHolder {
  PieceHolder(Piece p, Autocast a) : piece(std::move(p)), autocast(a) {}
  Piece piece;
  Autocast autocast;
};

class RecomputeFn : public torch::autograd::Function<RecomputeFn> {
 public:
  // The inputs come as a TensorList: apply() counts a list's tensors as inputs, not a std::vector.
  static variable_list forward(AutogradContext* ctx, const Piece& piece, at::TensorList inputs) {
    ctx->saved_data["piece"] = c10::IValue::make_capsule(c10::make_intrusive<PieceHolder>(piece, Autocast::now()));
    ctx->save_for_backward(inputs.vec());
    return piece(inputs.vec());  // autograd records nothing inside a Function's forward
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = c10::static_intrusive_pointer_cast<PieceHolder>(ctx->saved_data["piece"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    variable_list inputs;
    for (size_t i = 0; i < saved.size(); ++i)
      inputs.push_back(saved[i].defined() ? saved[i].detach().requires_grad_(ctx->needs_input_grad(i))
                                          : torch::Tensor());
    variable_list outputs, out_grads;
    {
      torch::AutoGradMode on(true);
      const AutocastAs as(holder->autocast);
      // Each leaf goes in as a view: autocast caches its casts of leaves that take a gradient (weights),
      // and one cast shared by two products would sum their gradients before the cast back, not after.
      variable_list views;
      for (const auto& in : inputs) views.push_back(in.defined() && in.requires_grad() ? in.view_as(in) : in);
      const variable_list out = holder->piece(views);
      for (size_t i = 0; i < out.size(); ++i)
        if (out[i].defined() && out[i].requires_grad()) {
          outputs.push_back(out[i]);
          out_grads.push_back(grads[i].defined() ? grads[i] : torch::zeros_like(out[i]));
        }
    }
    if (!outputs.empty()) torch::autograd::backward(outputs, out_grads);
    variable_list result = {torch::Tensor()};  // the piece itself takes none
    for (const auto& in : inputs) result.push_back(in.defined() && in.requires_grad() ? in.grad() : torch::Tensor());
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> recompute(const Piece& piece, const std::vector<torch::Tensor>& inputs) {
  if (!torch::GradMode::is_enabled()) return piece(inputs);
  // Autograd's inputs must be defined tensors: the undefined ones are put back in their places inside.
  std::vector<torch::Tensor> defined;
  std::vector<bool> present;
  bool any_grad = false;
  for (const auto& t : inputs) {
    present.push_back(t.defined());
    if (t.defined()) defined.push_back(t);
    any_grad = any_grad || (t.defined() && t.requires_grad());
  }
  TORCH_INTERNAL_ASSERT(!defined.empty(), "recompute: a piece without inputs");
  // Inputs that take no gradient (a frozen base's embeddings before LoRA's layers) would leave the result
  // off the graph, the piece's own parameters with it: an empty input that takes one keeps it on.
  const size_t skip = any_grad ? 0 : 1;
  if (!any_grad) defined.insert(defined.begin(), torch::empty({0}, defined.front().options()).requires_grad_());
  const Piece whole = [piece, present, skip](const std::vector<torch::Tensor>& in) {
    std::vector<torch::Tensor> all;
    size_t next = skip;
    for (bool p : present) all.push_back(p ? in[next++] : torch::Tensor());
    return piece(all);
  };
  return RecomputeFn::apply(whole, at::TensorList(defined));
}

}  // namespace llmtrain::nn::detail
