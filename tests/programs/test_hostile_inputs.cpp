// llmtrain's programs against what a hostile or careless user gives them: outputs that name the
// working folder, a home, an input or someone else's files; crashes and full disks in the middle of a
// write; deeply nested, oversized, overflowing and mistyped files, flags and variables. Each case runs
// the real binary and must end by itself with status 1 and an error naming the input (or, where the
// input is fine, with status 0): never by a signal, never by the time limit, never by silently going on.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "llmtrain/core/fs.h"
#include "llmtrain/data/shard.h"
#include "programs/programs.h"

namespace lt = llmtrain::testing;
namespace fs = llmtrain::fs;
using ::testing::HasSubstr;
using namespace llmtrain::testing::programs;

namespace {

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

}  // namespace

TEST(HostileInputs, OutputsNeverDestroyAUsersFiles) {
  Setting s;
  const std::string work = s.t.path + "/work", home = s.t.path + "/home", foreign = s.t.path + "/foreign";
  for (const auto& d : {work, home, foreign}) fs::make_dirs(d);
  for (const auto& d : {work, home, foreign}) fs::write_file_atomic(d + "/keep.txt", "the user's");
  const std::string file = s.t.path + "/a_file";
  fs::write_file_atomic(file, "the user's");
  const std::string run_dir = s.run_dir(), hf = s.hf_dir();
  const auto convert = [&](const std::string& to, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"convert", "--from", "native", run_dir, "--to", "hf", to};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, {{"HOME", home}}, "", work);
  };
  expect_refused(convert("."), {"--to hf .", "the working folder"}, "convert to .");
  expect_refused(convert(".."), {"the working folder or a folder above it"}, "convert to ..");
  expect_refused(convert("/"), {"the root folder"}, "convert to /");
  expect_refused(convert(home), {"your home folder"}, "convert to $HOME");
  expect_refused(convert(foreign), {"llmtrain did not write", "--force"}, "convert over a foreign folder");
  expect_refused(convert(file), {"existing file", "--force"}, "convert over a file");
  expect_refused(convert(s.t.path + "/runs"), {"holds the input"}, "convert into a folder holding the input");
  expect_refused(run({"convert", "--from", "hf", hf, "--to", "hf", hf}), {"is the input"}, "convert onto its input");
  for (const auto& d : {work, home, foreign})
    EXPECT_EQ(fs::read_file(d + "/keep.txt"), "the user's") << d << " lost a file";
  EXPECT_EQ(fs::read_file(file), "the user's");
  expect_ok(convert(foreign, {"--force"}), "convert --force over a foreign folder");
  expect_ok(convert(foreign), "convert over its own earlier output");
  expect_ok(run({"convert", "--from", "hf", foreign, "--to", "native", s.t.path + "/back"}), "the export loads");

  // prepare_data: the same refusals, and an input folder is never an output's home.
  const std::string corpus = s.t.path + "/corpus";
  fs::make_dirs(corpus);
  for (int i = 0; i < 6; ++i)
    fs::write_file_atomic(corpus + "/doc" + std::to_string(i) + ".txt", std::string(300, 'a' + i) + " end.");
  const auto prepare = [&](const std::string& out, const std::string& shard_tokens = "200") {
    std::vector<std::string> argv = {
        "prepare_data", "--tokenizer", "sentencepiece",  "--model",    s.t.path + "/sp.model",
        "--out",        out,           "--shard-tokens", shard_tokens, "--"};
    argv.push_back(corpus);
    return run(argv, {{"HOME", home}}, "", work);
  };
  expect_ok(run({"train_tokenizer", "--vocab-size", "300", "--out", s.t.path + "/sp", corpus + "/doc0.txt",
                 corpus + "/doc1.txt", corpus + "/doc2.txt"}),
            "train_tokenizer");
  expect_refused(run({"train_tokenizer", "--vocab-size", "300", "--out", s.t.path + "/sp", corpus + "/doc0.txt"}),
                 {"sp.model exists", "--force"}, "train_tokenizer over an existing model");
  expect_refused(prepare("."), {"the working folder"}, "prepare_data --out .");
  expect_refused(prepare(corpus), {"is the input"}, "prepare_data --out INPUT");
  expect_refused(prepare(corpus + "/shards"), {"inside the input folder"}, "prepare_data --out INPUT/sub");
  const std::string foreign2 = s.t.path + "/foreign2";
  fs::make_dirs(foreign2);
  fs::write_file_atomic(foreign2 + "/keep.txt", "the user's");
  expect_refused(prepare(foreign2), {"llmtrain did not write", "--force"}, "prepare_data over a foreign folder");
  EXPECT_EQ(fs::read_file(foreign2 + "/keep.txt"), "the user's");
  const std::string shards = s.t.path + "/shards";
  expect_ok(prepare(shards), "prepare_data");
  const std::string first = listing(shards);
  EXPECT_THAT(first, HasSubstr("train_000003.bin"));
  // A second run with bigger shards replaces the whole set: no stale shard of the first stays.
  expect_ok(prepare(shards, "100000"), "prepare_data again");
  EXPECT_EQ(listing(shards), "manifest.json train_000000.bin");
  // A shard put there by hand is not part of the set, and training refuses to read it.
  fs::write_file_atomic(shards + "/train_000007.bin", fs::read_file(shards + "/train_000000.bin"));
  expect_refused(
      run(s.train(s.t.path + "/r2", {"data.train=" + shards + "/train_*.bin", "model.vocab_size=300", "data.val="})),
      {"train_000007.bin is not listed in", "manifest.json"}, "a stale shard");

  // train / finetune: out_dir is never ".", an input, or a folder with someone else's run files.
  expect_refused(run(s.train("."), {}, "", work), {"out_dir .", "the working folder"}, "train out_dir=.");
  const std::string config_before = fs::read_file(hf + "/config.json");
  const std::string ft = s.t.path + "/finetune.json";
  fs::write_file_atomic(ft, "{\"data\": {\"train\": \"" + s.data +
                                "/train_*.bin\"}, \"device\": \"cpu\", \"train\": "
                                "{\"batch_size\": 2, \"seq_len\": 16, \"max_steps\": 2}}");
  expect_refused(run({"finetune", "--init", hf, "--config", ft, "--set", "out_dir=" + hf}),
                 {"out_dir " + hf, "is the input"}, "fine-tune into the folder fine-tuned from");
  EXPECT_EQ(fs::read_file(hf + "/config.json"), config_before);
  fs::write_file_atomic(foreign + "/config.json", "the user's");
  fs::remove_tree(foreign + "/.llmtrain");
  expect_refused(run(s.train(foreign)), {"holds config.json, which llmtrain did not write", "--force"},
                 "train into a folder with a foreign config.json");
  EXPECT_EQ(fs::read_file(foreign + "/config.json"), "the user's");
}

// The process killed (SIGKILL, as a crash or the OOM killer) at each step of a checkpoint's write: the
// next --resume finds the newest complete checkpoint, removes the incomplete one and ends the run.
TEST(HostileInputs, ACrashDuringACheckpointLeavesOneToResumeFrom) {
  Setting s;
  for (const auto& [point, from] :
       std::vector<std::pair<std::string, std::string>>{{"checkpoint:tensors-written", "step_00000004"},
                                                        {"checkpoint:complete", "step_00000004"},
                                                        {"checkpoint:renamed", "step_00000006"}}) {
    const std::string out = s.t.path + "/crash_" + point.substr(11);
    expect_ok(run(s.train(out)), "the first 4 steps");
    std::vector<std::string> argv = s.train(out, {"train.max_steps=8"});
    argv.push_back("--resume");
    const auto killed = run(argv, {{"LLMTRAIN_FAILPOINT", point}});
    EXPECT_EQ(killed.signal, SIGKILL) << point << ": " << killed.how() << "\n" << killed.output;
    const auto resumed = run(argv);
    expect_ok(resumed, "resume after a crash at " + point);
    EXPECT_THAT(resumed.output, HasSubstr("resumed from " + out + "/checkpoints/" + from)) << point;
    EXPECT_THAT(resumed.output, HasSubstr("done at step 8")) << point;
    EXPECT_EQ(listing(out + "/checkpoints"), "step_00000006 step_00000008") << point;
  }
  // A converted folder killed after the exchange of a replace: the folder under the name is complete.
  const std::string run_dir = s.run_dir(), out = s.t.path + "/export";
  expect_ok(run({"convert", "--from", "native", run_dir, "--to", "hf", out}), "export");
  for (const char* point : {"replace:filled", "replace:exchanged"}) {
    const auto killed =
        run({"convert", "--from", "native", run_dir, "--to", "hf", out}, {{"LLMTRAIN_FAILPOINT", point}});
    EXPECT_EQ(killed.signal, SIGKILL) << point;
    expect_ok(run({"convert", "--from", "hf", out, "--to", "native", s.t.path + "/loaded_" + std::string(point + 8)}),
              std::string("the export still loads after a crash at ") + point);
  }
}

// Ctrl-C twice while a checkpoint is being written: the process ends at once, with the shell's status
// for SIGINT, the checkpoint it was writing is not taken for a whole one, and --resume goes on from the
// one before.
TEST(HostileInputs, ASecondInterruptEndsAtOnceAndLosesNoCheckpoint) {
  Setting s;
  const std::string out = s.t.path + "/interrupted";
  expect_ok(run(s.train(out)), "the first 4 steps");
  std::vector<std::string> argv = s.train(out, {"train.max_steps=8"});
  argv.push_back("--resume");
  const auto stopped = run(argv, {{"LLMTRAIN_FAILPOINT", "checkpoint:tensors-written+interrupts"}});
  EXPECT_TRUE(stopped.exited && stopped.code == 128 + SIGINT) << stopped.how() << "\n" << stopped.output;
  EXPECT_THAT(stopped.output, HasSubstr("second interrupt: stopping now, without a checkpoint of this step"));
  // The half-written one lies under a temporary name, as after a crash, until the next run clears it.
  EXPECT_THAT(listing(out + "/checkpoints"),
              ::testing::MatchesRegex("step_00000002 step_00000004 step_00000006\\.tmp\\.[0-9]+"));
  const auto resumed = run(argv);
  expect_ok(resumed, "resume after two interrupts");
  EXPECT_THAT(resumed.output, HasSubstr("resumed from " + out + "/checkpoints/step_00000004"));
  EXPECT_THAT(resumed.output, HasSubstr("done at step 8"));
  EXPECT_EQ(listing(out + "/checkpoints"), "step_00000006 step_00000008");
}

// A full disk (a small tmpfs in a mount namespace of its own) in the middle of a checkpoint, of a shard
// set and of an export: an error naming the file, the earlier output intact, nothing half-written left.
TEST(HostileInputs, AFullDiskFailsCleanlyAndKeepsTheEarlierOutput) {
  Setting s;
  const std::string disk = s.t.path + "/disk";
  fs::make_dirs(disk);
  const std::string q = "'";
  std::string body;
  const auto sh = [&](const std::vector<std::string>& argv) {
    std::string line;
    for (const auto& a : argv) line += q + a + q + " ";
    return line;
  };
  std::vector<std::string> train = s.train(disk + "/run");
  train[0] = bin(train[0]);
  std::vector<std::string> resume = s.train(disk + "/run", {"train.max_steps=2"});
  resume[0] = bin(resume[0]);
  resume.push_back("--resume");
  // One checkpoint of this model takes about 0.8 MB, so 1.3 MB hold the first and not the second.
  body += sh(train) + "; echo \"train exit $?\"; ls " + disk + "/run/checkpoints; echo listed; " + sh(resume) +
          "; echo \"resume exit $?\"";
  const auto argv = lt::in_small_tmpfs(disk, "1300k", body, s.t.path + "/full.sh");
  if (argv.empty()) GTEST_SKIP() << "no tmpfs can be mounted here (neither as root nor in a user namespace)";
  const auto o = lt::run({argv, {}, "", "", 300});
  ASSERT_TRUE(o.exited) << o.how() << "\n" << o.output;
  EXPECT_THAT(o.output, HasSubstr("train exit 1"));
  EXPECT_THAT(o.output, HasSubstr("No space left on device"));
  EXPECT_THAT(o.output, HasSubstr("step_00000002\nlisted"));  // the first checkpoint alone: no half one beside it
  EXPECT_THAT(o.output, HasSubstr("resumed from " + disk + "/run/checkpoints/step_00000002"));
  EXPECT_THAT(o.output, HasSubstr("resume exit 0"));
  for (const char* signal_word : {"Aborted", "Segmentation", "core dumped", "terminate called"})
    EXPECT_THAT(o.output, ::testing::Not(HasSubstr(signal_word)));

  // An export that does not fit: an error, and the earlier export as it was.
  const std::string run_dir = s.run_dir();
  const std::string body2 =
      sh({bin("convert"), "--from", "native", run_dir, "--to", "native", disk + "/a"}) + "; echo \"first exit $?\"; " +
      sh({bin("convert"), "--from", "native", run_dir, "--to", "native", disk + "/a"}) +
      "; echo \"second exit $?\"; ls -a " + disk + "; " +
      sh({bin("convert"), "--from", "native", disk + "/a", "--to", "hf", disk + "/b"}) + "; echo \"third exit $?\"";
  const auto argv2 = lt::in_small_tmpfs(disk, "400k", body2, s.t.path + "/full2.sh");
  const auto o2 = lt::run({argv2, {}, "", "", 300});
  EXPECT_THAT(o2.output, HasSubstr("first exit 0"));
  EXPECT_THAT(o2.output, HasSubstr("second exit 1"));  // a second copy does not fit beside the first
  EXPECT_THAT(o2.output, HasSubstr("No space left on device"));
  EXPECT_THAT(o2.output, HasSubstr(".\n..\na\n"));  // nothing left beside the first
  EXPECT_THAT(o2.output, HasSubstr("third exit 1"));
}

// Inputs that used to crash, hang or be taken: each ends with status 1 and says what is wrong.
TEST(HostileInputs, BadFilesFlagsAndVariablesEndInAClearError) {
  Setting s;
  const std::string d = s.t.path;
  const std::string run_dir = s.run_dir(), hf = s.hf_dir();
  const auto write = [&](const std::string& name, const std::string& text) {
    fs::write_file_atomic(d + "/" + name, text);
    return d + "/" + name;
  };
  const std::string gpt2 = lt::test_data_dir().empty() ? "" : lt::test_data_dir() + "/gpt2";

  // JSON: nesting deep enough to overflow a recursive printer, in every reader; values quoted short.
  expect_refused(run({"train", "--config", write("deep.json", nested(200000))}), {"deep.json", "nested deeper than 64"},
                 "a deeply nested config");
  expect_refused(run({"train", "--config", write("deep_value.json", "{\"out_dir\": " + nested(100000) + "}")}),
                 {"nested deeper than 64"}, "a deeply nested value");
  std::string long_list = "[0";
  for (int i = 1; i < 200000; ++i) long_list += "," + std::to_string(i);
  long_list += "]";
  const auto wide = run({"train", "--config", write("wide_value.json", "{\"out_dir\": " + long_list + "}")});
  expect_refused(wide, {"out_dir must be a string, got [0,1,2,"}, "a huge value");
  EXPECT_LT(wide.output.size(), 1000u) << "the value is quoted, not printed whole";

  // Sizes: allocations estimated and refused, products that overflow int64, values past int64.
  expect_refused(run(s.train(d + "/big", {"model.n_embd=65536", "model.n_head=64", "model.n_layer=4096"})),
                 {"needs at least", "GB on cpu"}, "a model larger than the machine");
  expect_refused(run(s.train(d + "/big", {"train.batch_size=4611686018427387904"})), {"overflows 64-bit sizes"},
                 "batch_size x seq_len past int64");
  expect_refused(run(s.train(d + "/big", {"train.batch_size=1099511627776"})), {"needs at least", "logits"},
                 "a batch whose logits do not fit");
  expect_refused(run(s.train(d + "/big", {"train.max_steps=9223372036854775808"})),
                 {"train.max_steps must be an integer (64-bit)"}, "a step count past int64");
  expect_refused(run(s.train(d + "/big", {"train.seed=-1"})), {"train.seed must be a non-negative integer"},
                 "a negative seed");
  expect_refused(run(s.train(d + "/big", {"model.n_embd=2147483648", "model.n_head=1"})),
                 {"n_embd must be in [1, 1048576]"}, "a width past the limit");

  // Checkpoint state: every field typed and range-checked, naming the file and key.
  const std::string state = run_dir + "/checkpoints/step_00000004/state.json";
  const std::string good_state = fs::read_file(state);
  const auto resume_with = [&](const std::string& text) {
    fs::write_file_atomic(state, text);
    std::vector<std::string> argv = s.train(run_dir);
    argv.push_back("--resume");
    const auto o = run(argv);
    fs::write_file_atomic(state, good_state);
    return o;
  };
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = good_state;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  expect_refused(resume_with(replace("\"step\": 4", "\"step\": -5")), {"state.json: step must be an integer in [0,"},
                 "a negative step");
  expect_refused(resume_with(replace("\"step\": 4", "\"step\": \"four\"")), {"step must be an integer"},
                 "a step as text");
  expect_refused(resume_with(replace("\"scaler\"", "\"scalar\"")), {"state.json: scaler is missing"}, "a missing key");
  expect_refused(resume_with(replace("\"n_embd\": 64", "\"n_embd\": 1099511627776")), {"state.json: model: ", "n_embd"},
                 "a model too wide");
  expect_refused(resume_with(nested(100000)), {"nested deeper"}, "a nested state");
  expect_refused(resume_with(replace("\"position\": ", "\"position\": 99999999")), {"train_loader does not fit"},
                 "a loader position past the data");

  // Model files: Hugging Face folders, safetensors and llm.c headers whose sizes are lies.
  const std::string bad_hf = d + "/bad_hf";
  expect_ok(run({"convert", "--from", "hf", hf, "--to", "hf", bad_hf}), "a copy of the export");
  const std::string hf_config = fs::read_file(bad_hf + "/config.json");
  const auto with_config = [&](const std::string& from, const std::string& to) {
    std::string t = hf_config;
    t.replace(t.find(from), from.size(), to);
    fs::write_file_atomic(bad_hf + "/config.json", t);
    return run({"convert", "--from", "hf", bad_hf, "--to", "native", d + "/from_bad_hf"});
  };
  expect_refused(with_config("\"n_layer\": 1", "\"n_layer\": \"1\""), {"config.json: n_layer must be an integer"},
                 "n_layer as text");
  expect_refused(with_config("\"n_layer\": 1", "\"n_layer\": 4096"), {"no tensor transformer.h.1."},
                 "a config of more layers than the file holds, before any allocation");
  expect_refused(with_config("\"n_embd\": 64", "\"n_embd\": 1048576"), {"has shape", "config.json's model needs"},
                 "a config far wider than the file");
  fs::write_file_atomic(bad_hf + "/config.json", hf_config);
  const std::string st = bad_hf + "/model.safetensors", st_good = fs::read_file(st);
  const auto with_header = [&](const std::string& header, const std::string& rest = "") {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
    fs::write_file_atomic(st, len + header + rest);
    const auto o = run({"convert", "--from", "hf", bad_hf, "--to", "native", d + "/from_bad_st"});
    fs::write_file_atomic(st, st_good);
    return o;
  };
  expect_refused(with_header(nested(50000)), {"model.safetensors: the header: JSON nested deeper"}, "a nested header");
  expect_refused(with_header(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})"),
                 {"tensor a: shape", "larger than the file"}, "a shape past the file");
  std::string huge_len(8, '\xff');
  fs::write_file_atomic(st, huge_len + "{}");
  expect_refused(run({"convert", "--from", "hf", bad_hf, "--to", "native", d + "/x"}), {"header length"},
                 "a header length past the file");
  fs::write_file_atomic(st, st_good);
  const auto llmc = [&](std::vector<int32_t> header) {
    header.resize(256, 0);
    return write("model.bin", std::string(reinterpret_cast<const char*>(header.data()), 1024));
  };
  expect_refused(run({"convert", "--from", "llmc", llmc({20240326, 3, 1024, 50257, 1 << 30, 1, 1 << 30, 50304}), "--to",
                      "native", d + "/x"}),
                 {"llm.c model", "overflows 64-bit sizes"}, "an llm.c header whose sizes overflow");
  expect_refused(run({"convert", "--from", "llmc", llmc({20240326, 3, 1024, 50257, 12, 12, 768, 50304}), "--to",
                      "native", d + "/x"}),
                 {"1024 bytes; its header describes"}, "an llm.c header larger than its file");

  // Token shards and corpora: counts past the file; a FIFO as input, refused at once instead of a wait.
  std::vector<int32_t> header = {20240520, 1, 2147483647};
  header.resize(256, 0);
  fs::make_dirs(d + "/lying");
  fs::write_file_atomic(d + "/lying/train_000000.bin",
                        std::string(reinterpret_cast<const char*>(header.data()), 1024) + "abcd");
  expect_refused(run(s.train(d + "/r3", {"data.train=" + d + "/lying/train_*.bin"})),
                 {"header says 2147483647 tokens, file holds 2"}, "a shard that lies about its length");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the model reads line " + std::to_string(i) + " of a small corpus.\n";
  const std::string sp = d + "/sp";
  expect_ok(run({"train_tokenizer", "--vocab-size", "300", "--out", sp, write("corpus.txt", text)}), "train_tokenizer");
  ASSERT_EQ(::mkfifo((d + "/fifo.txt").c_str(), 0600), 0);
  expect_refused(run({"prepare_data", "--tokenizer", "sentencepiece", "--model", sp + ".model", "--out", d + "/s2",
                      "--", d + "/fifo.txt"},
                     {}, "", "", 30),
                 {"fifo.txt: cannot read what is not a regular file"}, "a FIFO as input (no wait for a writer)");

  // Ids: never taken modulo 2^32; lists checked against the vocabulary.
  if (!gpt2.empty()) {
    expect_refused(run({"tokenize", "--vocab-dir", gpt2, "--decode"}, {}, "[15496, 4294967301]"),
                   {"--decode: stdin: entry 1 is 4294967301, not a token id in [0, 50257)"}, "an id past 2^32");
    expect_refused(run({"tokenize", "--vocab-dir", gpt2, "--decode"}, {}, "[-1]"), {"entry 0 is -1"}, "a negative id");
    expect_refused(run({"tokenize", "--vocab-dir", gpt2, "--decode"}, {}, "[1.5]"), {"entry 0 is 1.5"}, "a fraction");
    expect_refused(run({"tokenize", "--vocab-dir", gpt2, "--decode"}, {}, nested(100000)), {"nested deeper"},
                   "a nested id list");
    // A word of a megabyte without a space: one piece to merge, in well under the time limit.
    std::string word(1 << 20, 'a');
    for (size_t i = 0; i < word.size(); i += 7) word[i] = char('b' + i % 20);
    const auto o = run({"tokenize", "--vocab-dir", gpt2}, {}, word, "", 60);
    expect_ok(o, "a 1 MB word");
    fs::make_dirs(d + "/vocab");
    fs::write_file_atomic(d + "/vocab/vocab.json", nested(100000));
    fs::write_file_atomic(d + "/vocab/merges.txt", "#version: 0.2\n");
    expect_refused(run({"tokenize", "--vocab-dir", d + "/vocab"}, {}, "hi"), {"vocab.json: JSON nested deeper"},
                   "a nested vocabulary");
  }
  expect_refused(run({"generate", "--checkpoint", run_dir, "--prompt-ids", "[99999999]", "--format", "ids"}),
                 {"--prompt-ids: entry 0 is 99999999, not a token id in [0, 256)"}, "a prompt id past the model");
  expect_refused(
      run({"tokenize", "--tokenizer", "sentencepiece", "--model", write("junk.model", std::string(4096, '\x0a'))}, {},
          "hi"),
      {"junk.model could not be loaded"}, "a SentencePiece model of junk");

  // Environment: a world of no ranks is an error, not one process; a malformed peak is named.
  expect_refused(run(s.train(d + "/r4"), {{"WORLD_SIZE", "0"}}), {"WORLD_SIZE=0 is outside [1, 1048576]"},
                 "WORLD_SIZE=0");
  expect_refused(run(s.train(d + "/r4"), {{"WORLD_SIZE", "-2"}}), {"WORLD_SIZE=-2 is outside"}, "WORLD_SIZE=-2");
  expect_refused(run(s.train(d + "/r4"), {{"LLMTRAIN_PEAK_TFLOPS", "fast"}}), {"LLMTRAIN_PEAK_TFLOPS=\"fast\""},
                 "a malformed peak");

  // A sample prompt longer than the model's context is found before the first step, not after.
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "line " + std::to_string(i) + " ";
  const auto long_prompt =
      run(s.train(d + "/r5", {"model.vocab_size=300", "tokenizer.kind=sentencepiece", "tokenizer.path=" + sp + ".model",
                              "sample.every=2", "sample.prompt=" + prompt}));
  expect_refused(long_prompt, {"sample.prompt is", "tokens, which leaves no room", "block_size 32"},
                 "a long sample prompt");
  EXPECT_FALSE(fs::exists(d + "/r5/metrics.jsonl")) << "nothing trained before the error";
}
