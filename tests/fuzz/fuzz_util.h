// What the fuzz targets share: a scratch folder of this process for inputs that must be files, a small
// GPT-2-style tokenizer of its own (every byte, merges among a few letters, an end-of-text), and the
// rule that an input may be refused only by llmtrain::Error: any other exception escapes to libFuzzer,
// which reports it, as it reports a crash, a leak, undefined behaviour or a time-out.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"

namespace fuzz {

/// A folder of this process's, made once, removed at exit.
inline const std::string& scratch() {
  static const std::string dir = [] {
    std::string d = llmtrain::fs::make_temp_dir("llmtrain_fuzz_");
    static std::string keep = d;
    std::atexit([] { llmtrain::fs::remove_tree(keep); });
    return d;
  }();
  return dir;
}

/// `bytes` written to scratch()/name; the path.
inline std::string file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch() + "/" + name;
  llmtrain::fs::write_file_atomic(path, {reinterpret_cast<const char*>(data), size});
  return path;
}

/// GPT-2's byte -> printable code point (as UTF-8), the form its vocabularies store bytes in.
inline std::string byte_token(int b) {
  int extra = 0, cp = b;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    if (!printable) {
      if (x == b) cp = 256 + extra;
      ++extra;
    }
  }
  std::string out;
  if (cp < 0x80) out += char(cp);
  else {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

/// A tokenizer with every byte, merges among "a".."d" (all pairs, then pairs of those), and
/// <|endoftext|>: long words of those letters take many merges.
inline const llmtrain::tokenizer::GPT2BPE& small_tokenizer() {
  static const std::unique_ptr<llmtrain::tokenizer::GPT2BPE> tok = [] {
    std::string vocab = "{", merges = "#version: 0.2\n";
    int id = 0;
    const auto add = [&](const std::string& token) {
      const std::string quoted = token == "\"" ? "\\\"" : token == "\\" ? "\\\\" : token;
      vocab += (id ? "," : "") + std::string("\"") + quoted + "\":" + std::to_string(id);
      ++id;
    };
    for (int b = 0; b < 256; ++b) add(byte_token(b));
    const std::string letters = "abcd";
    for (char x : letters)
      for (char y : letters) {
        add(std::string{x, y});
        merges += std::string{x} + " " + std::string{y} + "\n";
      }
    for (char x : letters)
      for (char y : letters)
        for (char z : letters) {
          add(std::string{x, y, z, z});
          merges += std::string{x, y} + " " + std::string{z, z} + "\n";
        }
    add("<|endoftext|>");
    vocab += "}";
    const std::string dir = scratch() + "/small_tokenizer";
    llmtrain::fs::make_dirs(dir);
    llmtrain::fs::write_file_atomic(dir + "/vocab.json", vocab);
    llmtrain::fs::write_file_atomic(dir + "/merges.txt", merges);
    return llmtrain::tokenizer::GPT2BPE::from_dir(dir);
  }();
  return *tok;
}

/// Traps (a crash libFuzzer reports, with the input) when `ok` is false: an invariant broken.
inline void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace fuzz
