# Thin wrapper over CMake. The two commands of the README:
#   make demo   install what is missing, build, then scripts/demo.sh: synth a dataset whose 8
#               verbs need motion -> prep it into chunks -> train a small video ViT on the verbs
#               -> evaluate it on held-out videos (top-1, top-5, a confusion matrix)
#   make test   install what is missing, build, run every test (also under ASan + UBSan), and a
#               smoke run of every fuzz target
#   make install  build, then `cmake --install` into PREFIX (default ~/.local): bin/tubelet,
#               lib/libtubelet.a, include/tubelet/, lib/pkgconfig/tubelet.pc, the Python package
#   make fuzz   build the fuzz targets (clang, libFuzzer) and run each for FUZZ_SECONDS
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
FUZZ_RUNS ?=
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
PREFIX     ?= $(HOME)/.local

.PHONY: all setup build install build-asan build-fuzz test test-fast test-asan test-fuzz fuzz demo demo-mae demo-clip bench-prep bench-reader clean

all: build

setup:
	@sh scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

build-asan: setup
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DTB_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)

# libFuzzer targets (tests/fuzz, docs/ROBUSTNESS.md): clang, ASan and UBSan, coverage.
build-fuzz: setup
	@cmake -S . -B $(BUILD_FUZZ) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTB_FUZZ=ON -DTB_CUDA=OFF $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_FUZZ) -j $(JOBS)

# Every test in the optimised build, then again with AddressSanitizer and UBSan, then the fuzz
# targets' smoke runs.
test: test-fast test-asan test-fuzz

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan
	@cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# A few seconds of each fuzz target from its seeds (fixed seed) and every regression input.
test-fuzz: build-fuzz
	@cd $(BUILD_FUZZ) && ctest --output-on-failure -j $(JOBS)

# Each fuzz target (FUZZ_TARGETS, default all) for FUZZ_SECONDS, or FUZZ_RUNS executions when
# set, one after another at low priority; a summary line each (tests/fuzz/run.sh).
fuzz: build-fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) nice -n 10 sh tests/fuzz/run.sh fuzz $(BUILD_FUZZ) $(FUZZ_TARGETS)

demo: build
	@sh scripts/demo.sh $(BUILD)/tubelet demo

# VideoMAE pretraining then fine-tuning on a quarter of the labels, against scratch, 2 seeds.
demo-mae: build
	@sh scripts/demo_mae.sh $(BUILD)/tubelet demo-mae

# Video-text contrastive pretraining from scratch, then zero-shot retrieval and classification.
demo-clip: build
	@sh scripts/demo_clip.sh $(BUILD)/tubelet demo-clip

bench-prep: build
	@sh bench/prep_table.sh $(BUILD)

# Peers (decord, torchcodec, PyAV, torch) come from PyPI into bench/venv, never for the tests.
bench-reader: build
	@sh bench/setup.sh
	@sh bench/reader_bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ) demo demo-mae demo-clip
