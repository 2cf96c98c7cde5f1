// The text side of llmtrain alone: trains a SentencePiece tokenizer on text it writes, round-trips a
// sentence through it, prepares shards with it and reads them back.
#include <llmtrain/text.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

int main() {
  try {
    namespace lt = llmtrain;
    const std::string dir = lt::fs::make_temp_dir("llmtrain_text_consumer_");
    const char* words[] = {"the", "model", "learns", "tokens", "from", "text", "and", "data", "runs", "fast"};
    std::mt19937 rng(7);
    std::string corpus;
    for (int line = 0; line < 2000; ++line) {
      for (int i = 0; i < 6; ++i) corpus += std::string(i ? " " : "") + words[rng() % 10];
      corpus += ".\n";
    }
    lt::fs::write_file_atomic(dir + "/corpus.txt", corpus);
    lt::tokenizer::train_sentencepiece(
        {.inputs = {dir + "/corpus.txt"}, .model_prefix = dir + "/sp", .vocab_size = 300});
    const auto tok = lt::tokenizer::load_tokenizer("sentencepiece", dir + "/sp.model");
    const std::string sentence = "the model learns from data.";
    const bool round_trip = tok->decode(tok->encode(sentence)) == sentence;

    const auto summary = lt::data::prepare_shards(*tok, {.inputs = {dir + "/corpus.txt"}, .out_dir = dir + "/shards"});
    const lt::data::Shard shard(dir + "/shards/train_000000.bin");
    std::vector<int64_t> tokens(size_t(shard.num_tokens()));
    shard.read(0, shard.num_tokens(), tokens.data());
    std::vector<int64_t> expected;  // the document's ids, then end-of-text
    for (const int32_t id : tok->encode(corpus)) expected.push_back(id);
    expected.push_back(*tok->eot_id());
    const bool same = shard.num_tokens() == summary.train_tokens && tokens == expected;
    lt::fs::remove_tree(dir);
    std::printf("text consumer: %lld-piece tokenizer, %lld tokens in a shard, round trip %s, shard %s\n",
                static_cast<long long>(tok->vocab_size()), static_cast<long long>(shard.num_tokens()),
                round_trip ? "ok" : "FAILED", same ? "ok" : "FAILED");
    return round_trip && same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "text consumer: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
}
