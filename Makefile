# llmtrain's entry points. scripts/setup.sh does the set-up (packages, Python with LibTorch) and the
# configure + build into build/; every target below starts with it, so each works on a fresh machine.
JOBS ?= $(shell nproc)
# Tests that need the shared data (GPT-2 BPE files, the corpus) find it here; without it they skip.
LLMTRAIN_DATA_DIR ?= $(wildcard $(abspath $(CURDIR)/../shared/data))
export LLMTRAIN_DATA_DIR

.PHONY: build test demo clean

build:
	bash scripts/setup.sh

test: build
	ctest --test-dir build --output-on-failure -j $(JOBS)

# The main job: tokenizer, shards, a small GPT-2 trained and sampled (see scripts/demo.sh; CORPUS=path).
demo: build
	bash scripts/demo.sh

clean:
	rm -rf build
