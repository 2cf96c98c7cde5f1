// Two tables make it fast: every token's bytes -> id (a piece that is a whole token, most English
// words, needs no merging), and an open-addressing table of mergeable id pairs -> (rank, merged id).
// Pieces come from the pattern through PCRE2's JIT; the text is checked for valid UTF-8 once (by the
// caller), so the matcher can skip its own check on every call.
#include "byte_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <limits>

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::tokenizer::detail {
namespace {

// GPT-2 stores bytes as printable code points: printable Latin-1 bytes stand for themselves, the
// other 68 bytes for U+0100.. in byte order. Returns code point -> byte (-1 where none).
std::array<int, 324> unicode_to_byte() {
  std::array<int, 324> table;
  table.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[printable ? b : 256 + extra++] = b;
  }
  return table;
}

// Decodes one GPT-2 token string (UTF-8 of byte-standing code points) to its bytes.
std::string decode_token(const std::string& token, const std::array<int, 324>& to_byte, const std::string& file) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t i = 0; i < token.size();) {
    unsigned cp = p[i];
    int len = 1;
    if (cp >= 0xC0 && cp < 0xE0 && i + 1 < token.size()) {
      cp = ((cp & 0x1F) << 6) | (p[i + 1] & 0x3F);
      len = 2;
    }
    LLMTRAIN_CHECK(cp < to_byte.size() && to_byte[cp] >= 0 && (len == 2 || cp < 0x80 || cp >= 0xA0), file, ": token ",
                   json::excerpt(token), " holds a character that stands for no byte");
    out.push_back(static_cast<char>(to_byte[cp]));
    i += len;
  }
  return out;
}

// Mergeable pairs of ids -> (rank, merged id), open addressing with linear probing.
class PairTable {
 public:
  void build(size_t n) {
    size_t cap = 1;
    while (cap < 2 * n + 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  void insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t key = pack(a, b);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0 || slots_[i].key == key) {
        slots_[i] = Slot{key, rank, merged};
        return;
      }
    }
  }
  // Rank of (a, b), or -1 when the pair does not merge; `merged` gets the new id.
  int32_t find(int32_t a, int32_t b, int32_t* merged) const {
    const uint64_t key = pack(a, b);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.rank < 0) return -1;
      if (s.key == key) {
        *merged = s.merged;
        return s.rank;
      }
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t rank = -1;
    int32_t merged = -1;
  };
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t hash(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Token bytes -> id, open addressing over the vocabulary's own strings. Each slot keeps the key's hash
// beside its id, so a lookup compares bytes only on a full hash match: the lookup of every piece of text
// is the encoder's hottest line, and a node-based map spent a third of a run chasing its chains.
class TokenTable {
 public:
  explicit TokenTable(const std::vector<std::string>& bytes_of) : bytes_of_(bytes_of) {}
  void build(size_t n) {
    size_t cap = 1;
    while (cap < 2 * n + 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // Adds `id` under its bytes unless they already have an id (the first one stays).
  void insert(int32_t id) {
    const std::string_view key = bytes_of_[size_t(id)];
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{h, id};
        return;
      }
      if (s.hash == h && bytes_of_[size_t(s.id)] == key) return;
    }
  }
  // The id of `key`, or -1.
  int32_t find(std::string_view key) const {
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && bytes_of_[size_t(s.id)] == key) return s.id;
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    int32_t id = -1;
  };
  static uint64_t hash(std::string_view key) {  // FNV-1a, then mixed: the low bits pick the slot
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
    return h ^ (h >> 29);
  }
  const std::vector<std::string>& bytes_of_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace

const char* const kWhiteSpaceMembers =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

void check_encodable(std::string_view text, const char* who) {
  const size_t bad = invalid_utf8_at(text);
  LLMTRAIN_CHECK(bad == std::string_view::npos, who, "::encode: text is not valid UTF-8 at byte ", bad);
  LLMTRAIN_CHECK(text.size() < size_t(INT32_MAX), who, "::encode: ", text.size(),
                 " bytes in one call, more than 2 GB: encode the text in pieces");
}

std::string token_bytes(const std::string& token, const std::string& file) {
  static const auto to_byte = unicode_to_byte();
  return decode_token(token, to_byte, file);
}

// Pieces up to this many bytes are merged by scanning (fast for the words of text), longer ones through
// a heap (O(n log n), for a word without spaces of any length).
constexpr size_t kShortPiece = 64;

struct ByteBPE::Impl {
  std::vector<std::string> bytes_of;   // id -> bytes
  TokenTable id_of{bytes_of};          // bytes -> id
  std::array<int32_t, 256> byte_id{};  // single byte -> id
  PairTable pairs;
  bool whole_first = true;
  std::vector<pcre2_code*> res;  // the patterns, in order

  ~Impl() {
    for (pcre2_code* re : res) pcre2_code_free(re);
  }

  // Appends the ids of one pre-tokenised piece: its bytes, merged pairwise, lowest-ranked pair first
  // (the leftmost of equal ones), until no ranked pair is left.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (const int32_t id = whole_first ? id_of.find(piece) : -1; id >= 0) {
      out.push_back(id);
      return;
    }
    if (piece.size() > kShortPiece) return encode_long_piece(piece, out);
    std::vector<int32_t> parts;
    parts.reserve(piece.size());
    for (unsigned char c : piece) parts.push_back(byte_id[c]);
    while (parts.size() > 1) {  // a scan per merge: quadratic, and fastest for the short pieces of text
      int32_t best_rank = std::numeric_limits<int32_t>::max(), best_merged = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        int32_t merged;
        const int32_t rank = pairs.find(parts[i], parts[i + 1], &merged);
        if (rank >= 0 && rank < best_rank) {
          best_rank = rank;
          best_merged = merged;
          best = i;
        }
      }
      if (best_merged < 0) break;
      parts[best] = best_merged;
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    out.insert(out.end(), parts.begin(), parts.end());
  }

  // The same merges in O(n log n) for long pieces (a word of a megabyte): the parts form a linked list,
  // and a min-heap holds every adjacent pair that merges, by (rank, position); an entry whose parts
  // have changed since it was pushed is skipped when it comes up.
  void encode_long_piece(std::string_view piece, std::vector<int32_t>& out) const {
    const int32_t n = int32_t(piece.size());  // pieces are at most the input (int32: < 2 GB, checked by encode)
    std::vector<int32_t> id(piece.size()), next(piece.size()), prev(piece.size());
    for (int32_t i = 0; i < n; ++i) {
      id[size_t(i)] = byte_id[static_cast<unsigned char>(piece[size_t(i)])];
      next[size_t(i)] = i + 1 < n ? i + 1 : -1;
      prev[size_t(i)] = i - 1;
    }
    struct Candidate {
      int32_t rank, pos, left, right, merged;  // the pair (left, right) at pos and its neighbour
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<Candidate> heap;
    const auto push = [&](int32_t i) {
      const int32_t j = next[size_t(i)];
      int32_t merged;
      if (j < 0) return;
      if (const int32_t rank = pairs.find(id[size_t(i)], id[size_t(j)], &merged); rank >= 0) {
        heap.push_back({rank, i, id[size_t(i)], id[size_t(j)], merged});
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    std::vector<bool> gone(size_t(n), false);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const Candidate c = heap.back();
      heap.pop_back();
      const int32_t i = c.pos, j = next[size_t(i)];
      if (gone[size_t(i)] || j < 0 || id[size_t(i)] != c.left || id[size_t(j)] != c.right) continue;  // stale
      id[size_t(i)] = c.merged;                                                                       // i absorbs j
      gone[size_t(j)] = true;
      next[size_t(i)] = next[size_t(j)];
      if (next[size_t(j)] >= 0) prev[size_t(next[size_t(j)])] = i;
      if (prev[size_t(i)] >= 0) push(prev[size_t(i)]);
      push(i);
    }
    for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(id[size_t(i)]);
  }

  // Appends the ids of text with no special tokens in it; `text` is valid UTF-8.
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const { split(0, text, out); }

  // Splits `text` by pattern `level` into its matches and the stretches between (each split further by
  // the patterns after), and merges the pieces the last pattern makes.
  void split(size_t level, std::string_view text, std::vector<int32_t>& out) const {
    if (level == res.size()) {
      if (!text.empty()) encode_piece(text, out);
      return;
    }
    thread_local struct Matcher {
      pcre2_match_data* data = nullptr;
      pcre2_jit_stack* stack = nullptr;
      pcre2_match_context* ctx = nullptr;
      Matcher() {
        data = pcre2_match_data_create(1, nullptr);
        stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
        ctx = pcre2_match_context_create(nullptr);
        pcre2_jit_stack_assign(ctx, nullptr, stack);
      }
      ~Matcher() {
        pcre2_match_context_free(ctx);
        pcre2_jit_stack_free(stack);
        pcre2_match_data_free(data);
      }
    } m;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, done = 0;  // done: where the text not yet passed on starts
    while (pos < text.size()) {
      const int rc = pcre2_jit_match(res[level], subject, text.size(), pos, PCRE2_NO_UTF_CHECK, m.data, m.ctx);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      LLMTRAIN_CHECK(rc > 0, "byte-level BPE: pre-tokenisation failed at byte ", pos, " (PCRE2 error ", rc, ")");
      // Copied out: the levels below reuse the match data.
      const size_t from = pcre2_get_ovector_pointer(m.data)[0], to = pcre2_get_ovector_pointer(m.data)[1];
      if (to == from) {  // an empty match splits nothing: go on from the next character
        pos = from + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      if (from > done) split(level + 1, text.substr(done, from - done), out);  // the stretch before
      split(level + 1, text.substr(from, to - from), out);
      pos = done = to;
    }
    if (done < text.size()) split(level + 1, text.substr(done), out);
  }
};

ByteBPE::ByteBPE(std::vector<std::string> bytes_of, const std::vector<int32_t>& unmergeable,
                 const std::vector<Merge>& merges, const std::vector<std::string>& patterns, bool whole_first,
                 const std::string& source)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.bytes_of = std::move(bytes_of);
  d.whole_first = whole_first;
  std::vector<bool> special(d.bytes_of.size(), false);
  for (const int32_t id : unmergeable) special[size_t(id)] = true;
  d.id_of.build(d.bytes_of.size());
  for (int32_t id = 0; id < int32_t(d.bytes_of.size()); ++id)
    if (!special[size_t(id)]) d.id_of.insert(id);
  for (int b = 0; b < 256; ++b) {
    const char byte = char(b);
    d.byte_id[b] = d.id_of.find(std::string_view(&byte, 1));
    LLMTRAIN_CHECK(d.byte_id[b] >= 0, source, ": no token for byte ", b);
  }
  std::vector<std::array<int32_t, 3>> rules;  // (left, right, merged)
  rules.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Merge& rule = merges[i];
    const int32_t l = d.id_of.find(rule.left), r = d.id_of.find(rule.right), m = d.id_of.find(rule.left + rule.right);
    LLMTRAIN_CHECK(l >= 0 && r >= 0 && m >= 0, rule.where, " uses or makes a token missing from ", source);
    rules.push_back({l, r, m});
  }
  d.pairs.build(rules.size());
  // The first rule for a pair wins (rank = its place in the list).
  for (size_t i = rules.size(); i-- > 0;) d.pairs.insert(rules[i][0], rules[i][1], int32_t(i), rules[i][2]);

  for (const std::string& pattern : patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!re) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(err, message, sizeof message);
      LLMTRAIN_CHECK(false, source, ": the pre-tokenisation pattern ", json::excerpt(pattern),
                     " does not compile at offset ", err_off, ": ", reinterpret_cast<const char*>(message));
    }
    d.res.push_back(re);
    LLMTRAIN_CHECK(pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0, source, ": PCRE2 has no JIT on this machine");
  }
}

ByteBPE::~ByteBPE() = default;

void ByteBPE::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  impl_->encode_ordinary(text, out);
}

const std::vector<std::string>& ByteBPE::bytes_of() const { return impl_->bytes_of; }

}  // namespace llmtrain::tokenizer::detail
