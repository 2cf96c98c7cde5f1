#include <llmtrain/llmtrain.h>
#include <torch/optim/adamw.h>
#include <iostream>

int main() {
  llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("tiny"));
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const auto idx = torch::randint(50257, {2, 32}, torch::kLong);
  const auto before = model(idx, idx).loss;
  before.backward();
  opt.step();
  const double after = model(idx, idx).loss.item<double>();
  std::cout << "consumer: trained one step, loss " << before.item<double>() << " -> " << after << "\n";
  return after < before.item<double>() ? 0 : 1;
}
