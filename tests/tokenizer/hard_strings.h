// Texts that break careless tokenizers: scripts, emoji, combining marks, whitespace runs, contractions,
// digits, control bytes, special-token text. Every tokenizer's test compares its peer on them.
#pragma once

#include <string>
#include <vector>

namespace llmtrain::testing {

inline const std::vector<std::string> kHardStrings = {
    "Hello world",
    "  leading and trailing  ",
    "emoji 😀👍🏽 family 👨‍👩‍👧",
    "中文字符测试，还有标点。",
    "العربية نص مع أرقام ١٢٣",
    "e\u0301 combining n\u0303 a\u0308\u0304",
    "tabs\t\tand\nnewlines\r\n\r\nCRLF\r",
    "I'M HERE, YOU'RE THERE, THEY'LL GO, WE'VE DONE, HE'D, IT'S",
    "numbers 1234567890 3.14159 -42 1e10 ½ Ⅻ",
    "def f(x):\n    return x**2  # code\n\tif (a && b) { c[i] = d->e; }",
    "     \n\n   ",
    "\u00a0nbsp\u180emongolian\u2003em\u3000ideo\u2028line\u0085nel",
    "a'b's't' 'll'",
    "<|endoftext|> in text",
    std::string(1000, 'x'),
    std::string(100, ' ') + "y",
    std::string("\x01\x02 control \x7f", 13),
    "ΑΒΓ Ελληνικά",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
    "'s 'S 'll 'LL",
    "",
    " ",
    "\n",
    "日本語のテキストとカタカナ",
    "한국어 텍스트"};

}  // namespace llmtrain::testing
