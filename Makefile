# Thin wrapper over CMake. The two commands of the README:
#   make demo   install what is missing, build, run synth -> prep -> probe on the embedded default
#   make test   install what is missing, build, run every test (also under ASan + UBSan)
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

.PHONY: all setup build build-asan test test-fast test-asan demo demo-mae demo-clip bench-prep bench-reader clean

all: build

setup:
	@sh scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: setup
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DTB_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)

# Every test in the optimised build, then again with AddressSanitizer and UBSan.
test: test-fast test-asan

test-fast: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan
	@cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

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
	rm -rf $(BUILD) $(BUILD_ASAN) demo demo-mae demo-clip
