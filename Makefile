# llmtrain's entry points. scripts/setup.sh does the set-up (packages, Python with LibTorch) and the
# configure + build into build/; every target below starts with it, so each works on a fresh machine.
JOBS ?= $(shell nproc)
# Tests that need the shared data (GPT-2 BPE files, the corpus) find it here; without it they skip.
LLMTRAIN_DATA_DIR ?= $(wildcard $(abspath $(CURDIR)/../shared/data))
export LLMTRAIN_DATA_DIR

.PHONY: build test demo fuzz format clean

build:
	bash scripts/setup.sh

test: build
	ctest --test-dir build --output-on-failure -j $(JOBS)

# The main job: tokenizer, shards, a small GPT-2 trained and sampled (see scripts/demo.sh; CORPUS=path).
# It builds only the programs it runs; `make test` builds the rest.
DEMO_TARGETS = train_tokenizer prepare_data train generate
demo:
	LLMTRAIN_TARGETS="$(DEMO_TARGETS)" bash scripts/setup.sh
	bash scripts/demo.sh

# The parsers' fuzz targets (built by `make build` with clang), each for FUZZ_SECONDS (default 300):
# longer than the smoke run of `make test`. A finding is saved and named.
FUZZ_SECONDS ?= 300
fuzz: build
	@set -e; for f in build/fuzz/fuzz_*; do \
	  bash tests/fuzz/run.sh $$f $${f##*/fuzz_} $(FUZZ_SECONDS) build/fuzz/runs/$${f##*/fuzz_}; done

# Formats the C++ and CUDA sources with .clang-format; `make test` checks that they are.
format:
	bash scripts/format.sh

clean:
	rm -rf build
