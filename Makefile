# llmtrain's entry points. scripts/setup.sh does the set-up (packages, Python with LibTorch) and the
# configure + build into build/; every target below starts with it, so each works on a fresh machine.
JOBS ?= $(shell nproc)

.PHONY: build test clean

build:
	bash scripts/setup.sh

test: build
	ctest --test-dir build --output-on-failure -j $(JOBS)

clean:
	rm -rf build
