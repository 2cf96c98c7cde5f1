"""Test peer: GPT-2's tokenizer files as Hugging Face's tokenizers library writes them.

Usage: hf_gpt2_files.py GPT2_DIR OUT. Loads the BPE model from GPT2_DIR's encoder.json and vocab.bpe and
saves it into OUT as vocab.json and merges.txt (tokenizers' own serialisation, which the files of a
save_pretrained folder follow).
"""
import os
import sys

from tokenizers.models import BPE


def main(gpt2_dir: str, out: str) -> None:
    model = BPE.from_file(os.path.join(gpt2_dir, "encoder.json"), os.path.join(gpt2_dir, "vocab.bpe"))
    model.save(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
