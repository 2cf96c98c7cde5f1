"""Test peer: the sentencepiece library's own encoding and decoding with a model file.

Usage: sentencepiece_ids.py MODEL IN OUT. IN is a JSON object {"texts": [...], "id_lists": [[...]]};
OUT gets {"ids": the ids of each text, "decoded": each text's ids decoded, "decoded_lists": each id list
decoded, "pieces": each text's pieces}. Specials are plain text, as in llmtrain's encode().
"""
import json
import sys

import sentencepiece as spm


def main(model: str, src: str, dst: str) -> None:
    sp = spm.SentencePieceProcessor(model_file=model)
    with open(src, encoding="utf-8") as f:
        job = json.load(f)
    texts = job["texts"]
    ids = [sp.encode(t) for t in texts]
    out = {
        "ids": ids,
        "pieces": [sp.encode(t, out_type=str) for t in texts],
        "decoded": [sp.decode(i) for i in ids],
        "decoded_lists": [sp.decode(i) for i in job["id_lists"]],
    }
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
