// The Trainer from C++: a config, data, a run folder; progress through a callback.
#include <llmtrain/llmtrain.h>

#include <cstdio>

int main() {
  // Token shards (prepare_data makes them from text): here a stream where each token gives the next.
  std::vector<int32_t> tokens(20000);
  for (size_t i = 1; i < tokens.size(); ++i) tokens[i] = (31 * tokens[i - 1] + 7) % 1000;
  const std::string dir = llmtrain::fs::make_temp_dir("trainer_example_");
  llmtrain::data::write_shard(dir + "/train_000000.bin", tokens, 50257);

  const auto cfg = llmtrain::train::TrainerConfig::parse(
      R"({"model": {"preset": "tiny"}, "device": "cpu",
          "train": {"batch_size": 8, "seq_len": 64, "max_steps": 30, "lr": 3e-3, "quiet": true}})",
      "trainer example", {"data.train=" + dir + "/train_*.bin", "out_dir=" + dir + "/run"});
  llmtrain::train::Trainer trainer(cfg);
  double first = 0, last = 0;
  trainer.on_step([&](const llmtrain::train::StepRecord& r) { (r.step == 1 ? first : last) = r.loss; });
  trainer.run();
  std::printf("trainer: 30 steps, loss %.3f -> %.3f\n", first, last);
  llmtrain::fs::remove_tree(dir);
  return last < first ? 0 : 1;
}
