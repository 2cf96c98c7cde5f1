"""Test peer: transformers' apply_chat_template, for llmtrain's chat formats (llmtrain/data/chat.h).

Usage:
  chat_peer.py template FORMAT                 prints the Jinja chat template of FORMAT (llama3, llama3.1,
                                               chatml, qwen2, qwen2.5, smollm2 or mistral) as this test writes it
  chat_peer.py render FORMAT DIR CHATS OUT     for a JSON list of conversations, writes to OUT a list of
                                               {"text": apply_chat_template(tokenize=False), "prompt": the
                                               same with add_generation_prompt, and, where DIR holds a
                                               tokenizer.json, "ids" and "mask": the tokens of the text
                                               (no tokens added around it) and transformers' assistant-token
                                               mask}

The templates are this test's own, written to lay conversations out as each family's instruct models
expect; {% generation %} marks what an assistant says, for return_assistant_tokens_mask.
"""
import json
import os
import sys

CHATML_TURNS = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' }}"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}{{ '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

TEMPLATES = {
    "llama3": (
        "{{ '<|begin_of_text|>' }}{% for m in messages %}"
        "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' }}"
        "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
        "{% else %}{{ m['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    "llama3.1": (
        "{{ '<|begin_of_text|>' }}{% if messages[0]['role'] == 'system' %}"
        "{% set system = messages[0]['content'] | trim %}{% set turns = messages[1:] %}"
        "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
        "{% if date_string is not defined %}{% set date_string = '26 Jul 2024' %}{% endif %}"
        "{{ '<|start_header_id|>system<|end_header_id|>\n\n' + 'Cutting Knowledge Date: December 2023\n' }}"
        "{{ 'Today Date: ' + date_string + '\n\n' + system + '<|eot_id|>' }}{% for m in turns %}"
        "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' }}"
        "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
        "{% else %}{{ m['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    "chatml": CHATML_TURNS,
    "qwen2": (
        "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
        "{% endif %}{% endfor %}" + CHATML_TURNS),
    "qwen2.5": (
        "{% if messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}"
        "{% endif %}" + CHATML_TURNS),
    "smollm2": (
        "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
        "{% endif %}{% endfor %}" + CHATML_TURNS),
    "mistral": (
        "{{ '<s>' }}{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] + '\n\n' %}"
        "{% set turns = messages[1:] %}{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
        "{% for m in turns %}{% if m['role'] == 'user' %}"
        "{{ '[INST] ' + (system if loop.first else '') + m['content'] + ' [/INST]' }}"
        "{% else %}{% generation %}{{ m['content'] + '</s>' }}{% endgeneration %}{% endif %}{% endfor %}"),
}


def main() -> None:
    mode, fmt = sys.argv[1], sys.argv[2]
    if mode == "template":
        print(TEMPLATES[fmt], end="")
        return
    folder, chats, out = sys.argv[3], json.load(open(sys.argv[4])), sys.argv[5]
    from transformers import PreTrainedTokenizerFast
    if os.path.exists(f"{folder}/tokenizer.json"):
        tok = PreTrainedTokenizerFast(tokenizer_file=f"{folder}/tokenizer.json")
    else:  # rendering only: a tokenizer of one character a token
        from tokenizers import Tokenizer, models
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0}, unk_token="x")))
    tok.chat_template = TEMPLATES[fmt]
    results = []
    for chat in chats:
        r = {"text": tok.apply_chat_template(chat, tokenize=False)}
        if chat[-1]["role"] == "user":
            r["prompt"] = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        if os.path.exists(f"{folder}/tokenizer.json"):
            enc = tok.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            r["ids"] = list(enc["input_ids"])
            r["mask"] = list(enc["assistant_masks"])
        results.append(r)
    json.dump(results, open(out, "w"))


if __name__ == "__main__":
    main()
