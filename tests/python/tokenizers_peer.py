"""Test peer: Hugging Face's tokenizers library, for llmtrain's tokenizer.json reader.

Usage:
  tokenizers_peer.py train KIND DIR CORPUS...   trains a byte-level BPE of 3000 tokens on the corpus
                                                files with the pre-tokenizer of KIND (llama3, qwen2,
                                                smollm2 or gpt2), special tokens first and one ordinary
                                                added token last, and saves DIR/tokenizer.json
  tokenizers_peer.py encode DIR TEXTS OUT       for a JSON list of texts, writes to OUT {"ids": each
                                                text's ids (added tokens extracted, none added around),
                                                "plain": the same with special tokens read as text,
                                                "normal": the text after the normalizer (qwen2: NFC)}
"""
import json
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# The pre-tokenisation patterns of the Llama 3 and Qwen2 tokenizer.json files: one Split each, before
# a ByteLevel step that only maps bytes.
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
           "<|im_start|>", "<|im_end|>", "<|endoftext|>"]


def pre_tokenizer(kind):
    mapping_only = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    split = lambda pattern: pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
    if kind == "llama3":
        return pre_tokenizers.Sequence([split(LLAMA3), mapping_only])
    if kind == "qwen2":
        return pre_tokenizers.Sequence([split(QWEN2), mapping_only])
    if kind == "smollm2":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if kind == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    sys.exit(f"unknown kind {kind}")


def main() -> None:
    mode = sys.argv[1]
    if mode == "train":
        kind, folder, files = sys.argv[2], sys.argv[3], sys.argv[4:]
        tok = Tokenizer(models.BPE(ignore_merges=kind == "llama3"))
        tok.pre_tokenizer = pre_tokenizer(kind)
        if kind == "qwen2":  # what Qwen2's files say: the text in Unicode's NFC first
            tok.normalizer = normalizers.NFC()
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIAL, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train(files, trainer)
        tok.add_tokens(["<custom>"])  # an added token that is not special: always its own id
        if kind == "llama3":  # what Llama 3's files say: every encoding starts with the bos
            bos = tok.token_to_id("<|begin_of_text|>")
            tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                               special_tokens=[("<|begin_of_text|>", bos)])
        tok.save(f"{folder}/tokenizer.json")
    elif mode == "encode":
        folder, texts, out = sys.argv[2], json.load(open(sys.argv[3])), sys.argv[4]
        tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        tok.encode_special_tokens = True
        plain = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        normal = [tok.normalizer.normalize_str(t) if tok.normalizer else t for t in texts]
        json.dump({"ids": ids, "plain": plain, "normal": normal}, open(out, "w"))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
