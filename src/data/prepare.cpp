// Documents are read in batches of about 64 MB of text; a batch is tokenized by a pool of threads
// (each takes the next document) and appended in input order, so the shards do not depend on the
// number of threads.
#include "llmtrain/data/prepare.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <thread>

#include "../core/json.h"
#include "../core/strings.h"
#include "jsonl.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/data/shard.h"

namespace llmtrain::data {
namespace {

constexpr int64_t kBatchBytes = 64 << 20;
constexpr uint64_t kMaxTextFile = uint64_t(8) << 30;  // a text input is read whole

struct Document {
  std::string text;
  std::string where;  // "file" or "file:line", for errors
  bool val = false;
};

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  LLMTRAIN_CHECK(::realpath(path.c_str(), buf) != nullptr, "prepare_data: input ", path, " does not exist");
  return buf;
}

// Files under `path` (itself if a file), sorted, hidden entries skipped.
void list_files(const std::string& path, std::vector<std::string>& out) {
  if (!fs::is_dir(path)) {
    out.push_back(real_path(path));
    return;
  }
  DIR* d = ::opendir(path.c_str());
  LLMTRAIN_CHECK(d != nullptr, "prepare_data: cannot read folder ", path);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) list_files(path + "/" + n, out);
}

// Streams the documents of each file in order; calls `emit` for each.
class DocumentReader {
 public:
  DocumentReader(const PrepareOptions& o, PrepareSummary& summary) : o_(o), summary_(summary) {
    std::set<std::string> val;
    for (const auto& v : o.val_files) {
      std::vector<std::string> files;
      list_files(v, files);
      val.insert(files.begin(), files.end());
    }
    std::set<std::string> seen;
    for (const auto& in : o.inputs) {
      std::vector<std::string> files;
      list_files(in, files);
      for (const auto& f : files)
        if (seen.insert(f).second) files_.push_back({f, val.count(f) > 0});
    }
    for (const auto& v : val)  // val files not among the inputs still count
      if (seen.insert(v).second) files_.push_back({v, true});
    for (const auto& f : files_) {
      struct stat st;
      LLMTRAIN_CHECK(::stat(f.first.c_str(), &st) == 0, "prepare_data: cannot read ", f.first);
      total_bytes_ += st.st_size;
    }
  }

  int64_t total_bytes() const { return total_bytes_; }

  // Fills `batch` with up to kBatchBytes of documents; false when every file is done.
  bool next(std::vector<Document>& batch) {
    batch.clear();
    int64_t bytes = 0;
    while (bytes < kBatchBytes && file_ < files_.size()) {
      const auto& [path, val] = files_[file_];
      if (!llmtrain::detail::ends_with(path, ".jsonl")) {
        std::string text = fs::read_file(path, kMaxTextFile, "prepare_data: input");
        bytes += int64_t(text.size());
        if (o_.separator.empty()) batch.push_back({std::move(text), path, val});
        else split_documents(text, path, val, batch);
        ++file_;
        continue;
      }
      if (!jsonl_) jsonl_ = std::make_unique<detail::LineReader>(path, "prepare_data");
      std::string line;
      bool more = false;
      while (bytes < kBatchBytes && (more = jsonl_->next(line))) {
        bytes += int64_t(line.size()) + 1;
        const std::string where = path + ":" + std::to_string(jsonl_->line_no());
        const auto j = detail::parse_object("prepare_data", line, where, o_.skip_bad_lines, summary_.skipped_lines);
        if (!j) continue;
        if (auto text = detail::string_field("prepare_data", *j, o_.text_field, where, o_.skip_bad_lines,
                                             summary_.skipped_lines))
          batch.push_back({std::move(*text), where, val});
      }
      if (!more) {  // this file is done
        jsonl_.reset();
        ++file_;
      }
    }
    done_bytes_ += bytes;
    return !batch.empty() || file_ < files_.size();
  }

  int64_t done_bytes() const { return std::min(done_bytes_, total_bytes_); }

  // The documents of `text` between lines equal to the separator; blank ones are dropped.
  void split_documents(const std::string& text, const std::string& path, bool val, std::vector<Document>& batch) const {
    size_t start = 0, line_no = 1, doc_line = 1;
    const auto emit = [&](size_t end) {
      if (text.find_first_not_of(" \t\r\n", start) < end)
        batch.push_back({text.substr(start, end - start), path + ":" + std::to_string(doc_line), val});
    };
    for (size_t pos = 0; pos < text.size();) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      const std::string_view line(text.data() + pos, eol - pos);
      const bool sep = line == o_.separator || (line.size() == o_.separator.size() + 1 && line.back() == '\r' &&
                                                line.substr(0, o_.separator.size()) == o_.separator);
      if (sep) {
        emit(pos);
        start = std::min(eol + 1, text.size());
        doc_line = line_no + 1;
      }
      pos = eol + 1;
      ++line_no;
    }
    emit(text.size());
  }

 private:
  const PrepareOptions& o_;
  PrepareSummary& summary_;
  std::vector<std::pair<std::string, bool>> files_;  // (path, goes to val)
  size_t file_ = 0;
  std::unique_ptr<detail::LineReader> jsonl_;
  int64_t total_bytes_ = 0, done_bytes_ = 0;
};

// Buffers one split's tokens and writes a shard whenever shard_tokens are there; lists what it wrote.
class ShardSink {
 public:
  ShardSink(std::string dir, std::string split, int64_t shard_tokens, int64_t vocab)
      : dir_(std::move(dir)), split_(std::move(split)), shard_tokens_(shard_tokens), vocab_(vocab) {}
  void add(const std::vector<int32_t>& ids) {
    for (size_t at = 0; at < ids.size();) {
      const size_t take = std::min(ids.size() - at, size_t(shard_tokens_) - buf_.size());
      buf_.insert(buf_.end(), ids.begin() + at, ids.begin() + at + take);
      at += take;
      if (int64_t(buf_.size()) == shard_tokens_) flush();
    }
    tokens_ += int64_t(ids.size());
  }
  void flush() {
    if (buf_.empty()) return;
    char name[32];
    std::snprintf(name, sizeof name, "_%06lld.bin", static_cast<long long>(written_.size()));
    write_shard(dir_ + "/" + split_ + name, buf_, vocab_);
    written_.push_back({split_ + name, int64_t(buf_.size())});
    buf_.clear();
  }
  int64_t tokens() const { return tokens_; }
  int64_t shards() const { return int64_t(written_.size()); }
  // The manifest's entries for this split's shards.
  void list(json::Json& shards) const {
    const int64_t width = vocab_ > 65536 ? 4 : 2;
    for (const auto& [file, n] : written_)
      shards.push_back({{"file", file}, {"split", split_}, {"tokens", n}, {"bytes", kShardHeaderInts * 4 + n * width}});
  }

 private:
  std::string dir_, split_;
  int64_t shard_tokens_, vocab_;
  std::vector<int32_t> buf_;
  int64_t tokens_ = 0;
  std::vector<std::pair<std::string, int64_t>> written_;  // (file, tokens)
};

// splitmix64: a seeded, order-independent coin per document.
double unit_hash(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return double(x >> 11) / double(1ull << 53);
}

}  // namespace

PrepareSummary prepare_shards(const tokenizer::Tokenizer& tok, const PrepareOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  LLMTRAIN_CHECK(!o.inputs.empty() || !o.val_files.empty(), "prepare_data: no inputs");
  LLMTRAIN_CHECK(!o.out_dir.empty(), "prepare_data: no output folder");
  LLMTRAIN_CHECK(o.val_fraction >= 0.0 && o.val_fraction < 1.0, "prepare_data: val_fraction ", o.val_fraction,
                 " is outside [0, 1)");
  LLMTRAIN_CHECK(o.val_fraction == 0.0 || o.val_files.empty(),
                 "prepare_data: give val_fraction or val_files, not both");
  LLMTRAIN_CHECK(o.shard_tokens > 0 && o.shard_tokens <= INT32_MAX, "prepare_data: shard_tokens ", o.shard_tokens,
                 " is outside [1, 2^31)");
  const auto eot = tok.eot_id();
  LLMTRAIN_CHECK(eot.has_value(), "prepare_data: the tokenizer has no end-of-text id to separate documents");
  const auto bos = o.add_bos ? tok.bos_id() : std::nullopt;
  LLMTRAIN_CHECK(!o.add_bos || bos.has_value(), "prepare_data: --bos, but the tokenizer has no bos to start ",
                 "documents with (GPT-2's BPE has none: its documents are separated by the end-of-text alone)");

  // The output is swapped in whole once complete, so neither a failed run nor an earlier one leaves shards
  // that do not belong to this set; and it may not lie inside an input folder, whose files are read.
  std::vector<std::string> inputs = o.inputs;
  inputs.insert(inputs.end(), o.val_files.begin(), o.val_files.end());
  const std::string out_abs = fs::absolute(o.out_dir);
  for (const auto& in : inputs)
    LLMTRAIN_CHECK(!fs::is_dir(in) || out_abs.rfind(fs::absolute(in) + "/", 0) != 0, "prepare_data: --out ", o.out_dir,
                   " lies inside the input folder ", in, ", whose files are read as text: write the shards elsewhere");
  PrepareSummary summary;
  DocumentReader reader(o, summary);
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  fs::write_dir_atomic(o.out_dir, "shards", {"prepare_data: --out", inputs, o.force}, [&](const std::string& tmp) {
    ShardSink train(tmp, "train", o.shard_tokens, tok.vocab_size());
    ShardSink val(tmp, "val", o.shard_tokens, tok.vocab_size());
    std::vector<Document> batch;
    int64_t doc_index = 0;
    while (reader.next(batch)) {
      std::vector<std::vector<int32_t>> ids(batch.size());
      std::vector<std::string> errors(batch.size());
      std::atomic<size_t> next{0};
      const auto work = [&] {
        for (size_t i; (i = next.fetch_add(1)) < batch.size();) {
          try {
            ids[i] = tok.encode(batch[i].text);
            if (bos) ids[i].insert(ids[i].begin(), *bos);
            ids[i].push_back(*eot);
          } catch (const std::exception& e) {
            errors[i] = e.what();
          }
        }
      };
      std::vector<std::thread> pool;
      for (int t = 1; t < std::min<int>(threads, int(batch.size())); ++t) pool.emplace_back(work);
      work();
      for (auto& t : pool) t.join();
      for (size_t i = 0; i < batch.size(); ++i) {
        LLMTRAIN_CHECK(errors[i].empty(), "prepare_data: ", batch[i].where, ": ", errors[i]);
        const bool to_val =
            batch[i].val || (o.val_fraction > 0 && unit_hash(o.seed ^ uint64_t(doc_index)) < o.val_fraction);
        (to_val ? val : train).add(ids[i]);
        ++(to_val ? summary.val_documents : summary.train_documents);
        ++doc_index;
      }
      if (o.on_progress) o.on_progress(reader.done_bytes(), reader.total_bytes());
    }
    LLMTRAIN_CHECK(doc_index > 0, "prepare_data: the inputs hold no documents");
    train.flush();
    val.flush();
    json::Json shards = json::Json::array();
    train.list(shards);
    val.list(shards);
    const json::Json manifest = {{"format", kShardSetFormat},
                                 {"version", 1},
                                 {"vocab_size", tok.vocab_size()},
                                 {"eot_id", *eot},
                                 {"documents", {{"train", summary.train_documents}, {"val", summary.val_documents}}},
                                 {"shards", shards}};
    fs::write_file_atomic(tmp + "/" + kShardManifest, manifest.dump(2) + "\n");
    summary.train_tokens = train.tokens();
    summary.val_tokens = val.tokens();
    summary.train_shards = train.shards();
    summary.val_shards = val.shards();
  });
  summary.bytes = reader.total_bytes();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace llmtrain::data
